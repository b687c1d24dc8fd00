// What the engine gives the broker beyond the spec's state machines: an EXTERNAL
// login the host checks, the idle-time-out of a refusing open, a transfer's own
// state (a send under a transaction), whether a detach closed the link, and a
// sender's attach without initial-delivery-count taken when the host says so.
import { describe, expect, it } from 'vitest';
import type { Composite } from '../../../../src/amqp/engine/composite.js';
import { encodeMessage, decodeMessage } from '../../../../src/amqp/engine/message.js';
import { AMQP_HEADER, CODE, SASL_HEADER, composite, frame, message, perf, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer } from './scripted-peer.js';

const settle = () => new Promise((r) => setImmediate(r));
const outcomeCode = (p: ScriptedPeer) => {
  const w = p.written().find((x) => x.kind === 'frame' && x.name === 'sasl-outcome');
  return w?.kind === 'frame' ? w.fields.code : undefined;
};

describe('engine host hooks - EXTERNAL checked by the host', () => {
  it('engine host hooks - EXTERNAL is offered with a check, which gets the authorization identity asked for and names the user', async () => {
    const asked: string[] = [];
    const p = new ScriptedPeer({ sasl: { external: (authzid) => (asked.push(authzid), Promise.resolve('carol')) } });
    p.feed(SASL_HEADER);
    const w = p.written();
    expect(w[1]!.kind === 'frame' && w[1]!.fields['sasl-server-mechanisms']).toEqual(['EXTERNAL']);
    p.feed(perf.saslInit('EXTERNAL', Buffer.from('carol')));
    expect(outcomeCode(p)).toBeUndefined();
    await settle();
    expect(outcomeCode(p)).toBe(0);
    expect(asked).toEqual(['carol']);
    expect(p.conn.identity).toBe('carol');
  });

  it('engine host hooks - a check that names no one refuses the login (outcome auth) and nothing more is read', async () => {
    const p = new ScriptedPeer({ sasl: { external: () => Promise.resolve(undefined) } });
    p.feed(SASL_HEADER);
    p.written();
    p.feed(Buffer.concat([perf.saslInit('EXTERNAL'), AMQP_HEADER, perf.open()]));
    await settle();
    expect(outcomeCode(p)).toBe(1);
    expect(p.events.some((e) => e.event === 'open')).toBe(false);
  });
});

describe('engine host hooks - connection and link', () => {
  it('engine host hooks - advertiseIdleTimeout before our open puts that idle-time-out in it (a refusal asks for heartbeats)', () => {
    const p = new ScriptedPeer({ idleTimeoutMs: 60_000 }, { onOpen: (c) => (c.advertiseIdleTimeout(100), c.close({ condition: 'amqp:connection:forced', description: 'a backup' })) });
    p.feed(AMQP_HEADER, perf.open());
    const out = p.written();
    const open = out.find((x) => x.kind === 'frame' && x.name === 'open');
    expect(open?.kind === 'frame' && open.fields['idle-time-out']).toBe(100);
    expect(p.errorOf('close', out)).toMatchObject({ condition: 'amqp:connection:forced' });
  });

  it("engine host hooks - a transfer's state (transactional-state) is the delivery's remote state", () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, perf.open(), perf.begin(), perf.attach({ name: 'l', handle: 0, role: 'sender', address: 'q' }));
    const txn = composite(0x34, [v.binary(Buffer.from('tx-1'))]);
    const fields = [v.uint(0), v.uint(0), v.binary(Buffer.from('t')), v.uint(0), v.bool(false), v.bool(false), undefined, txn];
    p.feed(frame(composite(CODE.transfer, fields), { payload: message('in a transaction') }));
    const d = p.events.find((e) => e.event === 'transfer')!.delivery!;
    expect(d.remoteState?.def.name).toBe('transactional-state');
    expect((d.remoteState as Composite).fields['txn-id']).toEqual(Buffer.from('tx-1'));
  });

  it('engine host hooks - remoteClosed says whether the peer detached with closed=true', () => {
    const p = new ScriptedPeer();
    p.feed(AMQP_HEADER, perf.open(), perf.begin(), perf.attach({ name: 'a', handle: 0, role: 'receiver', address: 'q' }), perf.attach({ name: 'b', handle: 1, role: 'receiver', address: 'q' }));
    p.feed(perf.detach(0), frame(composite(CODE.detach, [v.uint(1), v.bool(false)])));
    const detached = p.events.filter((e) => e.event === 'peer-detach').map((e) => [e.link!.name, e.link!.remoteClosed]);
    expect(detached).toEqual([
      ['a', true],
      ['b', false],
    ]);
  });

  it("engine host hooks - a sender's attach without initial-delivery-count is refused by default, taken as 0 with requireInitialDeliveryCount false", () => {
    const attach = frame(composite(CODE.attach, [v.string('l'), v.uint(0), v.bool(false), undefined, undefined, composite(CODE.source, []), composite(CODE.target, [v.string('q')])]));
    const strict = new ScriptedPeer();
    strict.feed(AMQP_HEADER, perf.open(), perf.begin(), attach);
    expect(strict.errorOf('close')).toMatchObject({ condition: 'amqp:invalid-field' });
    const lenient = new ScriptedPeer({ requireInitialDeliveryCount: false });
    lenient.feed(AMQP_HEADER, perf.open(), perf.begin(), attach, perf.transfer({ handle: 0, deliveryId: 0, tag: 't', settled: true }, message('x')));
    expect(lenient.errorOf('close')).toBeUndefined();
    expect(lenient.events.filter((e) => e.event === 'transfer')).toHaveLength(1);
  });

  it('engine host hooks - encodeMessage writes a typed id as it is given (a reply echoing a uuid correlation-id)', () => {
    const uuid = Buffer.alloc(16, 7);
    const bytes = encodeMessage({ correlationId: { type: 'uuid', value: uuid }, body: 'ok' });
    expect(decodeMessage(bytes).properties['correlation-id']).toEqual(uuid);
  });
});
