// The backup's side of the stream against a primary that does not wait for its
// acknowledgements: the link's credit is topped up as transfers arrive, so only the
// follower can bound what it holds. Past MAX_UNACKNOWLEDGED unanswered transfers it
// refuses the next and lets the primary go; an honest primary (16 batches in flight,
// a few control messages) never comes near.
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { decodeMessage } from '../../../src/amqp/engine/message.js';
import type { InboundDelivery, PeerDialer, ReceiverEvents } from '../../../src/peer-link/transport.js';
import { MAX_UNACKNOWLEDGED, Follower, type FollowerHost } from '../../../src/replication/follower.js';
import { encodeStreamMessage } from '../../../src/replication/protocol.js';

/** What the primary at the one address of the test does: serves the link at once; the test sends on it. */
function fakePrimary() {
  const state: { link?: ReceiverEvents; abandoned: number } = { abandoned: 0 };
  const dialer: PeerDialer = {
    dial: (_o, events) => {
      setImmediate(() => events.opened({}));
      return {
        openReceiver: (_r, link) => {
          setImmediate(() => {
            link.attached({ source: { address: '$ha.replication' }, properties: {} });
            state.link = link;
          });
          return { addCredit: () => undefined };
        },
        abandon: () => void state.abandoned++,
      };
    },
  };
  return { dialer, state };
}

/** A follower of the fake primary, a backup at position 0; `host` gives what a test watches. */
function followerOf(dialer: ReturnType<typeof fakePrimary>['dialer'], host: Pick<FollowerHost, 'log' | 'handle' | 'onLost'>): Follower {
  return new Follower({
    endpoints: [{ host: 'primary', port: 5672 }],
    user: undefined,
    password: undefined,
    mechanism: 'ANONYMOUS',
    tls: undefined,
    brokerId: 'backup',
    instanceId: 'backup-instance',
    replicate: 'all',
    heartbeatMs: 60_000,
    position: () => ({ lsn: 0, epoch: 0, journalLsn: 0 }),
    onFollowing: () => undefined,
    onFatal: () => undefined,
    dialer,
    ...host,
  });
}

describe('replication follower', () => {
  it('replication follower - a primary that sends on past the unacknowledged bound is refused and let go, not buffered for', async () => {
    const { dialer, state } = fakePrimary();
    const lost: string[] = [];
    const errors: string[] = [];
    // A slow apply: nothing is applied until the test lets it.
    let release!: () => void;
    const applying = new Promise<void>((resolve) => (release = resolve));
    let handled = 0;
    const log = pino({ level: 'error' }, { write: (line: string) => void errors.push(JSON.parse(line).msg) });
    const follower = followerOf(dialer, {
      log,
      handle: async () => {
        handled++;
        await applying;
        return { safe: Promise.resolve() };
      },
      onLost: (reason) => lost.push(reason),
    });
    follower.start();
    while (!state.link) await new Promise((r) => setImmediate(r));
    const heartbeat = decodeMessage(encodeStreamMessage({ kind: 'heartbeat', lsn: 0 }));
    const answers: string[] = [];
    const delivery = (): InboundDelivery => ({ accept: () => answers.push('accepted'), reject: (e) => answers.push(`rejected ${e.condition}`) });
    // 200,000 of these were all held, waiting to be applied (107 MB of heap).
    for (let i = 0; i < 10_000; i++) state.link.message({ application_properties: heartbeat.applicationProperties, body: undefined }, delivery());
    expect(answers).toEqual(['rejected amqp:resource-limit-exceeded']);
    expect(lost).toEqual([`the primary sent more than ${MAX_UNACKNOWLEDGED} transfers that were not yet acknowledged`]);
    expect(errors).toContain(`the primary sent more than ${MAX_UNACKNOWLEDGED} transfers that were not yet acknowledged; reconnecting`);
    expect(state.abandoned).toBe(1);
    release();
    await follower.stop();
    // Only those within the bound were applied; their acknowledgements do not go to a link let go.
    expect(handled).toBe(MAX_UNACKNOWLEDGED);
    expect(answers).toHaveLength(1);
  });

  it('replication follower - acknowledged transfers leave the bound: a primary that waits for them is followed on', async () => {
    const { dialer, state } = fakePrimary();
    const lost: string[] = [];
    const follower = followerOf(dialer, { log: pino({ level: 'silent' }), handle: async () => ({ safe: Promise.resolve() }), onLost: (reason) => lost.push(reason) });
    follower.start();
    while (!state.link) await new Promise((r) => setImmediate(r));
    const heartbeat = decodeMessage(encodeStreamMessage({ kind: 'heartbeat', lsn: 0 }));
    let accepted = 0;
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < MAX_UNACKNOWLEDGED - 10; i++) state.link.message({ application_properties: heartbeat.applicationProperties, body: undefined }, { accept: () => accepted++, reject: () => undefined });
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(accepted).toBe(20 * (MAX_UNACKNOWLEDGED - 10));
    expect(lost).toEqual([]);
    await follower.stop();
  });
});
