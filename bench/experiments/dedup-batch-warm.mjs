#!/usr/bin/env node
// Would a duplicate-detection window gain from looking keys up a batch at a time?
// In process, against the committed build (bench/.build, as run.mjs builds it):
// a broker publishing 1 KiB messages with integer message-ids to one queue and
// dropping each at once (a consumer that keeps up), with a window of WIN keys
// against one without, both filled first by PREFILL messages. Publishes go in
// batches of BATCH (a socket read's worth of transfers at saturation), three ways:
//
//   plain    as the broker does today, one message at a time;
//   control  a first pass over the batch that reads each key and hashes it, then
//            touches one fixed index entry: the extra work of a batched design
//            with none of its gain;
//   warmed   the same pass touching each key's own index entry and those of the
//            batch's eviction victims, so the batch's cache misses are in flight
//            together before the publishes need them.
//
// control - warmed is what overlapping the misses saves per keyed publish (the
// most a batched lookup in the engine could gain); control - plain is what the
// pass costs. The pass reads the window's private fields (index, mask, hashKey,
// tags, head, count): it only reads them, and only here.
//
//   node bench/experiments/dedup-batch-warm.mjs     env: WIN (1000000), BATCH (32), PREFILL (1200000), ROUNDS (12)
//
// Prints one JSON object: the median over ROUNDS of window-on minus window-off
// nanoseconds per publish for each way, and every round's figures.
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import rhea from 'rhea';
import { buildTandem, envNumber, machineInfo } from '../lib.mjs';

const WIN = envNumber('WIN', 1_000_000, 1, 10_000_000);
const BATCH = envNumber('BATCH', 32, 1, 1024);
const PREFILL = envNumber('PREFILL', 1_200_000, 0, 5_000_000);
const ROUNDS = envNumber('ROUNDS', 12, 3, 50);
const PER_ROUND = 100_000;

const build = await buildTandem();
const dist = dirname(dirname(build.entry));
const load = (path) => import(pathToFileURL(join(dist, path)).href);
const { Broker } = await load('broker/broker.js');
const { readDedupKey } = await load('amqp/dedup-key-reader.js');
const { parseIncoming } = await load('amqp/message-codec.js');
const { defaultQueueSettings } = await load('broker/settings.js');
const { halfSipHash16 } = await load('util/half-siphash.js');

function makeBroker(window) {
  const broker = new Broker({ dedupKeys: readDedupKey });
  broker.log.attach({ append: () => {} });
  const settings = { ...defaultQueueSettings, ...(window ? { dedupWindow: window, dedupTtlMs: 3_600_000 } : {}) };
  return { broker, queue: broker.declareQueue('q', settings).queue };
}

/**
 * The first pass over a batch: each key read and hashed, then (in a loop of loads
 * alone, so that they are in flight together) an index entry read per key and per
 * eviction victim: its own (warmed) or always the first (control).
 */
let touched = 0;
const homes = new Uint32Array(2048);
function warmPass(window, parsed, own) {
  const { index, mask, hashKey, tags, head, count, limit } = window;
  if (mask === 0) return;
  let n = 0;
  for (const m of parsed) {
    const lookup = readDedupKey(m.bytes, undefined, m.propertiesAt);
    if (lookup.status !== 'key') continue;
    const d = lookup.digest;
    homes[n++] = own ? 2 * (halfSipHash16(hashKey, d.w0, d.w1, d.w2, d.w3) & mask) : 0;
  }
  if (count === limit) for (let i = 0; i < parsed.length; i++) homes[n++] = own ? 2 * (tags[(head + i) % tags.length] & mask) : 0;
  let t = 0;
  for (let i = 0; i < n; i++) t ^= index[homes[i]];
  touched ^= t;
}

const body = 'x'.repeat(1000);
let nextId = 1;
function encodeBatch(n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(rhea.message.encode({ message_id: nextId++, body }));
  return out;
}

/** ns per publish (encoding not timed) over `count` messages, in batches, by `way`. */
function drive({ broker, queue }, count, way) {
  let elapsed = 0n;
  const parsed = new Array(BATCH);
  for (let done = 0; done < count; ) {
    const encoded = encodeBatch(2048 - (2048 % BATCH) || BATCH);
    const start = process.hrtime.bigint();
    for (let b = 0; b + BATCH <= encoded.length; b += BATCH) {
      for (let i = 0; i < BATCH; i++) parsed[i] = parseIncoming(encoded[b + i]);
      if (way !== 'plain' && queue.dedup) warmPass(queue.dedup, parsed, way === 'warmed');
      for (let i = 0; i < BATCH; i++) queue.drop(broker.publish('q', parsed[i]).id);
    }
    elapsed += process.hrtime.bigint() - start;
    done += encoded.length;
  }
  return Number(elapsed) / count;
}

const on = makeBroker(WIN);
const off = makeBroker(0);
drive(on, Math.max(PREFILL, WIN), 'plain');
drive(off, Math.max(PREFILL, WIN), 'plain');
const ways = ['plain', 'control', 'warmed'];
const rounds = Object.fromEntries(ways.map((w) => [w, []]));
for (let r = 0; r < ROUNDS; r++) {
  // Each way in turn, the order rotated per round so that none is always first.
  for (let k = 0; k < ways.length; k++) {
    const way = ways[(r + k) % ways.length];
    const offNs = drive(off, PER_ROUND, 'plain');
    rounds[way].push(Math.round(drive(on, PER_ROUND, way) - offNs));
  }
}
const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
const medians = Object.fromEntries(ways.map((w) => [w, median(rounds[w])]));
const result = {
  at: new Date().toISOString(),
  tandem: build.label,
  node: process.version,
  machine: machineInfo(),
  settings: { WIN, BATCH, PREFILL, ROUNDS, PER_ROUND },
  onMinusOffNsPerPublish: medians,
  passCostsNs: medians.control - medians.plain,
  overlapSavesNs: medians.control - medians.warmed,
  rounds,
  touched,
};
console.log(JSON.stringify(result, null, 2));
