// The server's handshake deadline (handshakeTimeoutMs, tandemd's handshake-timeout): a
// peer that has not sent its open that long after connecting is answered as far as its
// handshake got and closed, so a socket that says nothing, or stops halfway, cannot
// hold a connection slot for ever. Scripted clock; the engine asks to be ticked at it.
import { describe, expect, it } from 'vitest';
import { AMQP_HEADER, SASL_HEADER, perf, plainResponse } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer } from './scripted-peer.js';

const LIMIT = 10_000;
const anonymous = { sasl: { anonymous: true } };

/** Tick at the deadline less 1 ms (nothing happens, and the engine asks for 1 ms more), then at it. */
function reachDeadline(p: ScriptedPeer, startedAt: number): void {
  p.time = startedAt + LIMIT - 1;
  expect(p.conn.tick(p.time)).toBe(1);
  expect(p.conn.finished).toBe(false);
  p.time = startedAt + LIMIT;
  expect(p.conn.tick(p.time)).toBeUndefined();
}

const outcome = (p: ScriptedPeer, frames = p.written()) => {
  const w = frames.find((x) => x.kind === 'frame' && x.name === 'sasl-outcome');
  return w?.kind === 'frame' ? w.fields.code : undefined;
};

describe('engine connection - handshake deadline', () => {
  it('engine connection - a peer that sends nothing gets our protocol header at the deadline and the connection ends', () => {
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT, ...anonymous });
    const startedAt = p.time;
    expect(p.conn.tick(p.time)).toBe(LIMIT);
    reachDeadline(p, startedAt);
    expect(p.names()).toEqual(['header:3']);
    expect(p.conn.finished).toBe(true);
    expect(p.events.at(-1)).toMatchObject({ event: 'close', error: { condition: 'amqp:resource-limit-exceeded' } });
  });

  it('engine connection - the SASL header and then nothing ("AMQP" 3 1 0 0): sasl-outcome auth at the deadline', () => {
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT, ...anonymous });
    const startedAt = p.time;
    p.feed(SASL_HEADER);
    expect(p.names()).toEqual(['header:3', 'sasl-mechanisms']);
    reachDeadline(p, startedAt);
    expect(outcome(p)).toBe(1);
    expect(p.conn.finished).toBe(true);
  });

  it('engine connection - a login still being checked at the deadline: outcome auth, and the check is told to stop', () => {
    let signal: AbortSignal | undefined;
    const plain = (_u: string, _p: string, _a: string, s: AbortSignal) => ((signal = s), new Promise<string | undefined>(() => undefined));
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT, sasl: { plain } });
    const startedAt = p.time;
    p.feed(SASL_HEADER, perf.saslInit('PLAIN', plainResponse('alice', 'secret')));
    p.written();
    reachDeadline(p, startedAt);
    expect(outcome(p)).toBe(1);
    expect(signal?.aborted).toBe(true);
  });

  it('engine connection - logged in but no AMQP header: our header, open and a close with amqp:resource-limit-exceeded', () => {
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT, ...anonymous });
    const startedAt = p.time;
    p.feed(SASL_HEADER, perf.saslInit('ANONYMOUS'));
    p.written();
    reachDeadline(p, startedAt);
    const frames = p.written();
    expect(frames.map((w) => (w.kind === 'header' ? `header:${w.id}` : w.name))).toEqual(['header:0', 'open', 'close']);
    expect(p.errorOf('close', frames)).toMatchObject({ condition: 'amqp:resource-limit-exceeded', description: `no open within ${LIMIT} ms of connecting` });
  });

  it('engine connection - the AMQP header without SASL and then no open: open and close with amqp:resource-limit-exceeded', () => {
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT });
    const startedAt = p.time;
    p.feed(AMQP_HEADER);
    expect(p.names()).toEqual(['header:0']);
    reachDeadline(p, startedAt);
    const frames = p.written();
    expect(frames.map((w) => (w.kind === 'header' ? `header:${w.id}` : w.name))).toEqual(['open', 'close']);
    expect(p.errorOf('close', frames)?.condition).toBe('amqp:resource-limit-exceeded');
  });

  it('engine connection - the deadline counts from the start: a peer trickling a byte a second is closed at it all the same', () => {
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT, ...anonymous });
    const startedAt = p.time;
    const bytes = Buffer.concat([SASL_HEADER, perf.saslInit('ANONYMOUS'), AMQP_HEADER, perf.open()]);
    for (let i = 0; i < 9; i++) {
      p.time += 1000;
      p.feed(bytes.subarray(i, i + 1));
      p.conn.tick(p.time);
    }
    reachDeadline(p, startedAt);
    expect(p.conn.finished).toBe(true);
    expect(p.events.find((e) => e.event === 'open')).toBeUndefined();
  });

  it('engine connection - a peer that opens in time is not touched by the deadline, nor is one without a deadline', () => {
    const p = new ScriptedPeer({ handshakeTimeoutMs: LIMIT, ...anonymous });
    p.feed(SASL_HEADER, perf.saslInit('ANONYMOUS'), AMQP_HEADER, perf.open());
    p.written();
    p.time += LIMIT * 10;
    expect(p.conn.tick(p.time)).toBeUndefined();
    expect(p.names()).toEqual([]);
    expect(p.conn.isOpen).toBe(true);

    const q = new ScriptedPeer(anonymous);
    expect(q.conn.tick(q.time)).toBeUndefined();
    q.time += 24 * 3_600_000;
    expect(q.conn.tick(q.time)).toBeUndefined();
    expect(q.conn.finished).toBe(false);
  });
});
