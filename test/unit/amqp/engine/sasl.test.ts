// The SASL layer, both roles, driven by scripted frames.
import { describe, expect, it } from 'vitest';
import { AMQP_HEADER, CODE, FRAME_SASL, SASL_HEADER, composite, frame, perf, plainResponse, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer } from './scripted-peer.js';

const verifier = (user: string, password: string) => Promise.resolve(user === 'alice' && password === 'secret' ? 'alice' : undefined);
const settle = () => new Promise((r) => setImmediate(r));
const outcomeCode = (p: ScriptedPeer) => {
  const w = p.written().find((x) => x.kind === 'frame' && x.name === 'sasl-outcome');
  return w?.kind === 'frame' ? w.fields.code : undefined;
};

describe('engine sasl - server', () => {
  it('engine sasl - offers what it is given and takes ANONYMOUS, then the AMQP header and open', () => {
    const p = new ScriptedPeer({ sasl: { anonymous: true, plain: verifier } });
    p.feed(SASL_HEADER);
    const w = p.written();
    expect(w[0]).toEqual({ kind: 'header', id: 3 });
    expect(w[1]!.kind === 'frame' && w[1]!.fields['sasl-server-mechanisms']).toEqual(['PLAIN', 'ANONYMOUS']);
    p.feed(perf.saslInit('ANONYMOUS'));
    expect(outcomeCode(p)).toBe(0);
    expect(p.conn.identity).toBe('anonymous');
    p.feed(AMQP_HEADER, perf.open());
    expect(p.names()).toEqual(['header:0', 'open']);
  });

  it('engine sasl - PLAIN is checked by the async verifier; AMQP pipelined behind the init waits for its verdict', async () => {
    const p = new ScriptedPeer({ sasl: { plain: verifier } });
    p.feed(SASL_HEADER);
    p.written();
    p.feed(Buffer.concat([perf.saslInit('PLAIN', plainResponse('alice', 'secret')), AMQP_HEADER, perf.open()]));
    expect(p.names()).toEqual([]);
    await settle();
    expect(p.names()).toEqual(['sasl-outcome', 'header:0', 'open']);
    expect(p.conn.identity).toBe('alice');
  });

  it('engine sasl - a client that leaves while its PLAIN login is checked: the check is told to stop and what it sent behind the init is let go', async () => {
    // A check that ends only when told to, as a hash queued behind others does.
    let signal: AbortSignal | undefined;
    const checking = (_user: string, _password: string, _authzid: string, s: AbortSignal) =>
      new Promise<string | undefined>((resolve, reject) => {
        signal = s;
        s.addEventListener('abort', () => reject(s.reason));
      });
    const p = new ScriptedPeer({ sasl: { plain: checking } });
    p.feed(SASL_HEADER);
    p.written();
    const behind = Buffer.concat([AMQP_HEADER, perf.open(), perf.begin(), Buffer.alloc(30_000, 0x41)]);
    p.feed(Buffer.concat([perf.saslInit('PLAIN', plainResponse('alice', 'secret')), behind]));
    expect(signal?.aborted).toBe(false);
    expect(p.conn.bufferedInput).toBe(behind.length);
    p.conn.ended();
    expect(signal?.aborted).toBe(true);
    expect(p.conn.bufferedInput).toBe(0);
    await settle();
    // The verdict that never came sends nothing.
    expect(p.names()).toEqual([]);
    expect(p.events.map((e) => e.event)).toEqual(['peer-close']);
  });

  it('engine sasl - a wrong password gets outcome auth (1) and nothing pipelined behind it is read', async () => {
    const p = new ScriptedPeer({ sasl: { plain: verifier } });
    p.feed(SASL_HEADER);
    p.written();
    p.feed(Buffer.concat([perf.saslInit('PLAIN', plainResponse('alice', 'wrong')), AMQP_HEADER, perf.open()]));
    await settle();
    const w = p.written();
    expect(w.map((x) => (x.kind === 'frame' ? x.name : 'header'))).toEqual(['sasl-outcome']);
    expect(w[0]!.kind === 'frame' && w[0]!.fields.code).toBe(1);
    expect(p.conn.finished).toBe(true);
    expect(p.events.find((e) => e.event === 'open')).toBeUndefined();
  });

  it('engine sasl - a PLAIN response that is not three NUL-separated parts is refused without calling the verifier', () => {
    let called = false;
    const p = new ScriptedPeer({ sasl: { plain: () => ((called = true), Promise.resolve('x')) } });
    p.feed(SASL_HEADER, perf.saslInit('PLAIN', Buffer.from('no-nuls-here')));
    expect(outcomeCode(p)).toBe(1);
    expect(called).toBe(false);
  });

  it('engine sasl - EXTERNAL is offered only with a TLS identity, and logs in as it', () => {
    const p = new ScriptedPeer({ sasl: { externalIdentity: 'cn-bob' } });
    p.feed(SASL_HEADER, perf.saslInit('EXTERNAL'));
    expect(outcomeCode(p)).toBe(0);
    expect(p.conn.identity).toBe('cn-bob');
    const q = new ScriptedPeer({ sasl: { anonymous: true } });
    q.feed(SASL_HEADER, perf.saslInit('EXTERNAL'));
    expect(outcomeCode(q)).toBe(1);
  });

  it('engine sasl - issue-20 case 1: the 32-byte sasl-init with an array32 of 2^32-1 uuids is a decode-error, answered with outcome sys', () => {
    const bytes = Buffer.from('414d5150030100000000001802010000005341c00b01f000000005ffffffff98', 'hex');
    const p = new ScriptedPeer({ sasl: { anonymous: true } });
    p.feed(bytes);
    expect(outcomeCode(p)).toBe(2);
    expect(p.events.at(-1)).toMatchObject({ event: 'close', error: { condition: 'amqp:decode-error' } });
    const zeroWidth = frame(composite(CODE.saslInit, [v.symbol('ANONYMOUS'), undefined, v.array32(0x40, 0xffffffff)]), { type: FRAME_SASL });
    const q = new ScriptedPeer({ sasl: { anonymous: true } });
    q.feed(SASL_HEADER, zeroWidth);
    expect(q.events.at(-1)).toMatchObject({ event: 'close', error: { condition: 'amqp:decode-error' } });
  });

  it('engine sasl - a sasl-response without a challenge is amqp:not-allowed; a client skipping SASL where it is required gets the SASL header back', () => {
    const p = new ScriptedPeer({ sasl: { anonymous: true } });
    p.feed(SASL_HEADER, frame(composite(CODE.saslResponse, [v.binary(Buffer.from('x'))]), { type: FRAME_SASL }));
    expect(outcomeCode(p)).toBe(2);
    expect(p.events.at(-1)).toMatchObject({ event: 'close', error: { condition: 'amqp:not-allowed' } });
    const q = new ScriptedPeer({ sasl: { plain: verifier }, requireSasl: true });
    q.feed(AMQP_HEADER);
    expect(q.names()).toEqual(['header:3']);
    expect(q.conn.finished).toBe(true);
    const r = new ScriptedPeer({ sasl: { anonymous: true } });
    r.feed(SASL_HEADER, perf.saslInit('PLAIN', plainResponse('a', 'b')));
    expect(outcomeCode(r)).toBe(1);
  });
});

describe('engine sasl - client', () => {
  const server = (mechanisms: string[]) =>
    Buffer.concat([SASL_HEADER, frame(composite(CODE.saslMechanisms, [v.array32(0xa3, mechanisms.length, Buffer.concat(mechanisms.map((m) => Buffer.concat([Buffer.from([m.length]), Buffer.from(m)]))))]), { type: FRAME_SASL })]);
  const outcome = (code: number) => frame(composite(CODE.saslOutcome, [v.ubyte(code)]), { type: FRAME_SASL });

  it('engine sasl - the client picks PLAIN when it has a user, and starts AMQP (header and open) on outcome ok', () => {
    const p = new ScriptedPeer({ role: 'client', saslClient: { user: 'alice', password: 'secret' } });
    expect(p.names()).toEqual(['header:3']);
    p.feed(server(['ANONYMOUS', 'PLAIN']));
    const [init] = p.written();
    expect(init!.kind === 'frame' && init!.fields.mechanism).toBe('PLAIN');
    expect(init!.kind === 'frame' && (init!.fields['initial-response'] as Buffer).equals(plainResponse('alice', 'secret'))).toBe(true);
    p.feed(outcome(0));
    expect(p.names()).toEqual(['header:0', 'open']);
    p.feed(AMQP_HEADER, perf.open());
    expect(p.conn.isOpen).toBe(true);
  });

  it('engine sasl - the client says so when no mechanism suits, and when the server refuses it', () => {
    const p = new ScriptedPeer({ role: 'client', saslClient: { external: true } });
    p.feed(server(['PLAIN']));
    expect(p.events.at(-1)!.error?.description).toMatch(/No suitable mechanism/);
    const q = new ScriptedPeer({ role: 'client', saslClient: {} });
    q.feed(server(['ANONYMOUS']), outcome(1));
    expect(q.events.at(-1)!.error?.description).toMatch(/authentication failed/);
    expect(q.conn.finished).toBe(true);
  });
});
