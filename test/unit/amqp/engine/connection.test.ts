// The connection state machine (server role) driven by scripted frames: header
// exchange, open (pipelined), limits, idle-time-out both ways, and every
// violation answered with the spec's condition in a close, never a throw.
import { describe, expect, it } from 'vitest';
import { AMQP_HEADER, CODE, composite, frame, message, perf, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer } from './scripted-peer.js';

const opened = (options = {}, handler = {}) => {
  const p = new ScriptedPeer(options, handler);
  p.feed(AMQP_HEADER, perf.open());
  p.written();
  return p;
};

describe('engine connection - header and open', () => {
  it('engine connection - answers the AMQP header and the open with its own limits', () => {
    const p = new ScriptedPeer({ maxFrameSize: 4096, channelMax: 7, idleTimeoutMs: 30_000 });
    p.feed(AMQP_HEADER);
    expect(p.names()).toEqual(['header:0']);
    p.feed(perf.open({ containerId: 'c1' }));
    const [open] = p.written();
    expect(open).toMatchObject({ kind: 'frame', name: 'open' });
    expect(open!.kind === 'frame' && open!.fields).toMatchObject({ 'container-id': 'engine-under-test', 'max-frame-size': 4096, 'channel-max': 7, 'idle-time-out': 30_000 });
    expect(p.conn.remoteOpen?.fields['container-id']).toBe('c1');
    expect(p.conn.isOpen).toBe(true);
  });

  it('engine connection - a pipelined conversation in one read, or one byte at a time, gives the same frames and events', () => {
    const bytes = Buffer.concat([
      AMQP_HEADER,
      perf.open(),
      perf.begin(),
      perf.attach({ name: 'l', handle: 0, role: 'sender', address: 'q' }),
      perf.transfer({ handle: 0, deliveryId: 0, tag: 't', settled: true }, message('hello')),
    ]);
    const whole = new ScriptedPeer().feed(bytes);
    const bytewise = new ScriptedPeer();
    for (let i = 0; i < bytes.length; i++) bytewise.feed(bytes.subarray(i, i + 1));
    expect(whole.eventNames()).toEqual(['open', 'begin', 'attach', 'transfer']);
    expect(bytewise.eventNames()).toEqual(whole.eventNames());
    expect(bytewise.names()).toEqual(whole.names());
    expect(whole.events[3]!.delivery!.payload.equals(message('hello'))).toBe(true);
  });

  it('engine connection - a bad protocol header is answered with ours, and nothing more is read', () => {
    const p = new ScriptedPeer();
    p.feed(Buffer.from('HTTP/1.1 200 OK\r\n'));
    expect(p.names()).toEqual(['header:0']);
    expect(p.conn.finished).toBe(true);
    expect(p.events[0]).toMatchObject({ event: 'close', error: { condition: 'amqp:connection:framing-error' } });
  });

  it('engine connection - a frame before open, and open twice, are framing errors in a close (after our open)', () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, perf.begin());
    const w = p.written();
    expect(w.map((x) => (x.kind === 'frame' ? x.name : 'header'))).toEqual(['header', 'open', 'close']);
    expect(p.errorOf('close', w)).toMatchObject({ condition: 'amqp:connection:framing-error', description: 'begin before open' });
    const q = opened();
    q.feed(perf.open());
    expect(q.errorOf('close')).toMatchObject({ condition: 'amqp:connection:framing-error', description: 'open received twice' });
  });

  it('engine connection - max-frame-size under 512 is refused with amqp:invalid-field', () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, perf.open({ maxFrameSize: 511 }));
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:invalid-field' });
  });

  it('engine connection - a frame over our max-frame-size is a framing error, read from its header alone', () => {
    const p = opened({ maxFrameSize: 1024 });
    const head = Buffer.from([0, 0, 0x10, 0, 2, 0, 0, 0]); // 4096 bytes announced, none sent
    p.feed(head);
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:connection:framing-error' });
  });

  it('engine connection - a begin over channel-max, and a frame on a channel with no session, are framing errors', () => {
    const p = opened({ channelMax: 3 });
    p.feed(perf.begin({ channel: 4 }));
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:connection:framing-error' });
    const q = opened();
    q.feed(perf.attach({ name: 'x', handle: 0, role: 'sender', address: 'q', channel: 2 }));
    expect(q.errorOf('close')).toMatchObject({ condition: 'amqp:connection:framing-error' });
  });

  it('engine connection - issue-20 case 1: an array32 of 2^32-1 zero-width elements in the open is a decode-error', () => {
    const p = new ScriptedPeer();
    const open = frame(composite(CODE.open, [v.string('c'), undefined, undefined, undefined, undefined, v.array32(0x40, 0xffffffff)]));
    p.feed(AMQP_HEADER, open);
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:decode-error' });
    expect(p.conn.finished).toBe(true);
  });

  it('engine connection - a wrongly typed field is amqp:invalid-field naming it', () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, frame(composite(CODE.open, [v.string('c'), undefined, v.string('big')])));
    const e = p.errorOf('close');
    expect(e?.condition).toBe('amqp:invalid-field');
    expect(e?.description).toContain('open.max-frame-size');
  });

  it("engine connection - the peer's close is reported and answered; nothing after it is read", () => {
    const p = opened();
    p.feed(perf.close(), perf.begin());
    expect(p.names()).toEqual(['close']);
    expect(p.eventNames()).toContain('peer-close');
    expect(p.conn.finished).toBe(true);
  });

  it('engine connection - a handler that throws closes the connection with amqp:internal-error, not the process', () => {
    const p = new ScriptedPeer({}, { onSessionBegin: () => { throw new Error('host bug'); } });
    p.feed(AMQP_HEADER, perf.open(), perf.begin());
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:internal-error' });
  });

  it('engine connection - client-controlled text reaches the log hook only as fields', () => {
    const lines: { message: string; fields: Record<string, unknown> }[] = [];
    const p = new ScriptedPeer({ log: (_l, message, fields) => lines.push({ message, fields }) });
    p.feed(AMQP_HEADER, perf.open({ containerId: '\n{"level":50,"msg":"forged"}' }), perf.open());
    expect(lines.length).toBeGreaterThan(0);
    for (const l of lines) expect(l.message).not.toContain('forged');
    expect(lines.some((l) => String(l.fields.container).includes('forged'))).toBe(true);
  });
});

describe('engine connection - idle-time-out', () => {
  it("engine connection - issue-20 case 6: a peer's idle-time-out of 0xffffffff gives heartbeats every 30 minutes at most, not every millisecond", () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, perf.open({ idleTimeOut: 0xffffffff }));
    p.written();
    const next = p.conn.tick(p.time);
    expect(next).toBeDefined();
    expect(next!).toBeGreaterThan(60_000);
    expect(next!).toBeLessThanOrEqual(30 * 60_000);
    p.time += 1;
    p.conn.tick(p.time);
    expect(p.names()).toEqual([]);
    p.time += 30 * 60_000;
    p.conn.tick(p.time);
    expect(p.names()).toEqual(['empty']);
  });

  it("engine connection - a peer's idle-time-out of 1 s gives a heartbeat after 500 ms of our silence", () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, perf.open({ idleTimeOut: 1000 }));
    p.written();
    p.time += 499;
    p.conn.tick(p.time);
    expect(p.names()).toEqual([]);
    p.time += 1;
    p.conn.tick(p.time);
    expect(p.names()).toEqual(['empty']);
  });

  it("engine connection - a peer's idle-time-out under the floor is refused with amqp:invalid-field", () => {
    const p = new ScriptedPeer({ minPeerIdleTimeoutMs: 100 });
    p.feed(AMQP_HEADER, perf.open({ idleTimeOut: 1 }));
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:invalid-field' });
  });

  it('engine connection - a peer silent past our idle-time-out is closed with amqp:resource-limit-exceeded; heartbeats keep it open', () => {
    const p = opened({ idleTimeoutMs: 1000 });
    p.time += 900;
    p.feed(frame(undefined)); // a heartbeat
    p.time += 900;
    p.conn.tick(p.time);
    expect(p.names()).toEqual([]);
    p.time += 101;
    p.conn.tick(p.time);
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:resource-limit-exceeded' });
  });
});
