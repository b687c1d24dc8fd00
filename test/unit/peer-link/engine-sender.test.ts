// The serving side of a peer link over the engine: the hello, the answer, credit,
// transfers sent before there is credit (they wait and go first), outcomes given
// back under the ref each send returned, and refusal.
import { describe, expect, it } from 'vitest';
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { EnginePeerSender } from '../../../src/peer-link/engine-sender.js';
import type { DeliveryRef } from '../../../src/peer-link/transport.js';
import { AMQP_HEADER, CODE, composite, frame, perf, v } from '../../helpers/amqp-frames.js';
import { ScriptedPeer } from '../amqp/engine/scripted-peer.js';

/** A backup's attach to the replication address, with its hello in the link properties. */
const helloAttach = frame(
  composite(CODE.attach, [
    v.string('replication'),
    v.uint(0),
    v.bool(true),
    undefined,
    undefined,
    composite(CODE.source, [v.string('$ha.replication')]),
    composite(CODE.target, []),
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
    v.map([v.symbol('tandem.lsn'), v.long(42), v.symbol('tandem.broker-id'), v.string('b1')]),
  ]),
);

function served(): { peer: ScriptedPeer; sender: EnginePeerSender; outcomes: [DeliveryRef, boolean][] } {
  let sender: EnginePeerSender | undefined;
  const outcomes: [DeliveryRef, boolean][] = [];
  const peer = new ScriptedPeer(
    {},
    {
      onLinkAttach: (link: Link) => {
        sender = new EnginePeerSender(link);
        sender.onOutcome((d, accepted) => outcomes.push([d, accepted]));
      },
      onFlow: () => sender?.flush(),
      onDisposition: (d: Delivery) => sender?.outcome(d, d.outcome === 'accepted'),
    },
  );
  peer.feed(AMQP_HEADER, perf.open(), perf.begin(), helloAttach);
  return { peer, sender: sender!, outcomes };
}

describe('peer link - engine sender', () => {
  it("peer link - the hello is the attach's properties; accept answers with the source and our properties", () => {
    const { peer, sender } = served();
    expect(sender.hello).toEqual({ 'tandem.lsn': 42, 'tandem.broker-id': 'b1' });
    sender.accept('$ha.replication', { 'tandem.epoch': 3 });
    const attach = peer.written().find((w) => w.kind === 'frame' && w.name === 'attach');
    expect(attach?.kind === 'frame' && (attach.fields.source as { fields: Record<string, unknown> }).fields.address).toBe('$ha.replication');
    expect(sender.credit()).toBe(0);
  });

  it('peer link - a transfer sent without credit waits, goes first when credit comes, and its outcome comes back under the ref send returned', () => {
    const { peer, sender, outcomes } = served();
    sender.accept('$ha.replication', {});
    const early = sender.send(Buffer.from('control'), false);
    expect(peer.written().filter((w) => w.kind === 'frame' && w.name === 'transfer')).toHaveLength(0);
    peer.feed(perf.flow({ handle: 0, credit: 2 }));
    // The waiting one went out on the flow, and took one of the two credits.
    expect(sender.credit()).toBe(1);
    const later = sender.send(Buffer.from('batch'), false);
    const transfers = peer.written().filter((w) => w.kind === 'frame' && w.name === 'transfer');
    expect(transfers.map((t) => (t.kind === 'frame' ? t.payload.toString() : ''))).toEqual(['control', 'batch']);
    peer.feed(perf.disposition({ role: 'receiver', first: 0, last: 1, settled: true }));
    expect(outcomes).toEqual([
      [early, true],
      [later, true],
    ]);
  });

  it('peer link - refuse answers without a source and detaches with the error; close is idempotent', () => {
    const { peer, sender } = served();
    sender.refuse({ condition: 'tandem:ha:not-primary', description: 'a backup' });
    sender.close({ condition: 'amqp:internal-error' });
    const out = peer.written();
    const attach = out.find((w) => w.kind === 'frame' && w.name === 'attach');
    expect(attach?.kind === 'frame' && attach.fields.source).toBeUndefined();
    expect(out.filter((w) => w.kind === 'frame' && w.name === 'detach')).toHaveLength(1);
    expect(peer.errorOf('detach', out)).toMatchObject({ condition: 'tandem:ha:not-primary' });
  });
});
