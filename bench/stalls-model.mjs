#!/usr/bin/env node
// In-process costs of the synchronous walks bench/stalls.mjs cannot start from a client:
// each runs in one go on the event loop, so its time is the stall it causes.
// A Broker (dist/) with one queue of BENCH_STALL_N (default 1,000,000) small messages:
//   heldBefore     the DR restart-gap walk (src/dr/restart-gap.ts) over the queue's ids
//   snapshot-first the first batch of an HA snapshot (snapshotOf + 1000 records)
//   expire         queue expiry of every message at once (Broker.expire)
//   indexDedup     indexDedupWindows of a window of N keys (after promotion)
//   dedup-runs     the dedup window copied into an HA snapshot's config (snapshotOf)
//   query-10k      describe 10,000 queues (QUERY queue)
//   detach-held    a consumer holding all N unsettled detaches (Queue.removeConsumer): the
//                  detach, then each dispatch giving them back (longest, and how many)
//   node bench/stalls-model.mjs
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { envNumber, repoRoot } from './lib.mjs';

const d = (p) => import(pathToFileURL(join(repoRoot, 'dist', p)).href);
const { Broker } = await d('broker/broker.js');
const { defaultQueueSettings } = await d('broker/settings.js');
const { heldBefore } = await d('dr/restart-gap.js');
const { snapshotOf } = await d('replication/snapshot.js');
const { query } = await d('admin/operations.js');
const N = envNumber('BENCH_STALL_N', 1_000_000, 1, 5_000_000);

const msg = (i, opts = {}) => ({ bytes: Buffer.from(`m${i}`), headerLength: 0, durable: false, priority: 4, ttlMs: undefined, absoluteExpiry: undefined, deliveryCount: 0, subject: undefined, ...opts });
const time = (fn) => {
  const t = performance.now();
  const r = fn();
  return { ms: Math.round(performance.now() - t), r };
};
const out = {};
let clock = Date.now();
function filled(settings = {}, opts = {}) {
  const broker = new Broker({ now: () => clock });
  broker.log.attach({ append: () => {} });
  broker.declareQueue('q', { ...defaultQueueSettings, ...settings });
  for (let i = 0; i < N; i++) broker.publish('q', msg(i, opts));
  return broker;
}

let b = filled();
out.heldBefore = time(() => heldBefore(b, 'q', Infinity)?.length).ms;
out['snapshot-first-batch'] = time(() => {
  const s = snapshotOf(b);
  for (let i = 0; i < 1000; i++) s.records.next();
}).ms;
b = undefined;
b = filled({}, { ttlMs: 1000 });
clock += 2000;
out['expire-all'] = time(() => b.expire()).ms;
b = undefined;
b = filled();
{
  const q = b.queues.get('q');
  // Held as a link holds them (OutgoingLink.unsettled), forgotten by it once it is removed.
  const unsettled = new Map();
  const holder = { id: 'a', connectionId: 'c', browse: false, credit: N, cursor: 0, deliver: (e) => unsettled.set(unsettled.size, e), held: () => unsettled.values() };
  q.addConsumer(holder);
  q.dispatch(clock);
  const detach = time(() => {
    q.removeConsumer(holder);
    unsettled.clear();
  }).ms;
  // The broker dispatches again after the event loop ran while a give-back is under way (builds before it had none).
  const slices = [];
  while (q.givingBack && slices.length < 1_000_000) slices.push(time(() => q.dispatch(clock)).ms);
  out['detach-held'] = { detachMs: detach, dispatches: slices.length, longestDispatchMs: Math.max(0, ...slices), available: q.available };
}
b = undefined;
const keyed = new Broker({ now: () => clock });
keyed.log.attach({ append: () => {} });
keyed.declareQueue('q', { ...defaultQueueSettings, dedupWindow: N });
const { dedupIntegerDigest } = await d('broker/dedup-key.js');
// Fill the window as a backup does, by replaying enqueues with dedup stamps (not indexed).
const key = (i) => {
  const buf = Buffer.alloc(9);
  buf.writeBigUInt64BE(BigInt(i), 1);
  return dedupIntegerDigest(buf, 0, 9, true);
};
const q = keyed.queues.get('q');
for (let i = 0; i < N; i++) q.dedup.appended(key(i), clock, i + 1, false);
out['indexDedupWindows'] = time(() => keyed.indexDedupWindows()).ms;
out['snapshot-dedup-runs'] = time(() => snapshotOf(keyed)).ms;
const many = new Broker({ now: () => clock });
many.log.attach({ append: () => {} });
for (let i = 0; i < 10_000; i++) many.declareQueue(`q${i}`, defaultQueueSettings);
out['query-10k-queues'] = time(() => query({ broker: many, connections: () => [], closeConnection: () => false, status: () => ({}) }, 'queue').length).ms;
process.stdout.write(`${JSON.stringify({ n: N, ms: out })}\n`);
