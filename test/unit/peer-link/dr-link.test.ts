// DR over the scripted link: a real DrSource on one broker model feeds a real
// DrBridge on another through the peer-link seam, while the wire drops and
// partitions. The bridge's credit is the stream's only acknowledgement, and its
// journaled position is where it resumes: whatever the faults, the secondary's
// copy ends equal to the source queue, and no message is ever recorded there
// twice or out of order.
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { drRoleChange } from '../../../src/broker/broker.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import { DrBridge } from '../../../src/dr/bridge.js';
import { DrSource } from '../../../src/dr/source.js';
import { bodies, msg, newBroker, prng, qs } from '../broker/helpers.js';
import { ScriptedNetwork } from '../../helpers/scripted-link.js';

const SOURCE = 'source:5672';
const log = pino({ level: 'silent' });

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** A gate whose journal syncs take a random 0-2 ms. */
function syncingGate(rnd: () => number): SettlementGate {
  return { whenSafe: (_lsn, _durable, cb) => void setTimeout(() => cb(), Math.floor(rnd() * 3)) } as SettlementGate;
}

function pair(seed: number) {
  const rnd = prng(seed);
  const net = new ScriptedNetwork(seed, 5);
  const a = newBroker();
  a.broker.declareQueue('q', qs({ durable: true }));
  const source = new DrSource({ broker: a.broker, gate: syncingGate(rnd), log, retainCount: 100_000, retainBytes: 1 << 28, heartbeatMs: 200 });
  a.broker.log.attach(source);
  net.listen(SOURCE, {
    properties: {},
    // As the daemon serves the DR address.
    attach: (link) => {
      const stream = source.attach(link, 'bridge');
      return stream ? { flow: () => stream.pump(), closed: () => source.detach(stream) } : undefined;
    },
  });

  const b = newBroker();
  b.broker.recordDr(
    drRoleChange('q', { source: SOURCE, mode: 'enqueue-and-dequeue', state: 'passive', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '', tell: false }),
  );
  // Every enqueue the secondary records: never one twice, always in the source's order.
  const problems: string[] = [];
  let lastId = 0;
  b.broker.log.attach({
    append: (e) => {
      if (e.change.kind !== 'dr-transaction') return;
      for (const op of e.change.changes) {
        if (op.kind !== 'enqueue') continue;
        if (op.message.id <= lastId) problems.push(`message ${op.message.id} recorded after ${lastId}: repeated or reordered`);
        lastId = Math.max(lastId, op.message.id);
      }
    },
  });
  const bridge = new DrBridge(SOURCE, { broker: b.broker, gate: syncingGate(rnd), log, autoCreate: true, instanceId: 'secondary', password: undefined, tls: {}, dialer: net });

  let published = 0;
  const copy = () => bodies(b.broker.queues.get('q')!);
  const original = () => bodies(a.broker.queues.get('q')!);
  const run = async (before: number, count: number) => {
    for (let i = 0; i < before; i++) a.broker.publish('q', msg(`m${published++}`, { durable: true }));
    bridge.restart();
    for (let step = 0; step < 10_000 && published < before + count; step++) {
      const burst = 1 + Math.floor(rnd() * 8);
      for (let i = 0; i < burst && published < before + count; i++) a.broker.publish('q', msg(`m${published++}`, { durable: true }));
      await vi.advanceTimersByTimeAsync(Math.floor(rnd() * 20));
    }
    for (let step = 0; step < 2_000 && (bridge.state !== 'connected' || copy().length < original().length); step++) await vi.advanceTimersByTimeAsync(50);
    bridge.stop();
    source.close();
  };
  return { net, run, copy, original, problems, bridge };
}

function expectSameCopy(p: ReturnType<typeof pair>, count: number): void {
  expect(p.problems).toEqual([]);
  expect(p.original()).toHaveLength(count);
  expect(p.copy()).toEqual(p.original());
}

describe('DR over the scripted peer link', () => {
  it('with delays only: a copy of what was there, then the log, equal to the source', async () => {
    const p = pair(11);
    await p.run(50, 300);
    expectSameCopy(p, 350);
  });

  for (const seed of [12, 13, 14]) {
    it(`a partition during a batch: the bridge resumes from its journaled position (seed ${seed})`, async () => {
      const p = pair(seed);
      // Longer than the bridge's silence limit (two of its 4 s idle-time-outs).
      const partition = p.net.partitionAt(SOURCE, 'changes', 3, 12_000);
      await p.run(20, 400);
      expect(partition.happened()).toBe(true);
      expect(p.net.dialled).toBeGreaterThan(1);
      expectSameCopy(p, 420);
    });
  }

  for (const [seed, when] of [
    [15, 'lost'],
    [16, 'delivered'],
    [17, 'lost'],
    [18, 'delivered'],
  ] as const) {
    it(`a drop just after a credit grant, the bridge's acknowledgement (${when} on the way) (seed ${seed})`, async () => {
      const p = pair(seed);
      const drops = p.net.dropOn(SOURCE, (f) => f.dir === 'c2s' && f.kind === 'flow', { every: 10, times: 3, when });
      await p.run(20, 400);
      expect(drops.count()).toBe(3);
      expect(p.net.dialled).toBeGreaterThanOrEqual(4);
      expectSameCopy(p, 420);
    });
  }
});
