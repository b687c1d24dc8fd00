#!/usr/bin/env node
// What the frame guard (src/amqp/engine/frame-guard.ts) costs per transfer, in CPU
// time of this process (process.cpuUsage: time the process was descheduled does not
// count, so it holds up on a shared machine better than wall time): the guard
// reading 1 KiB transfers of a valid session, beside rhea's own read_frame of the
// same frame and rhea's message decode, in the same run. Needs `npm run build`.
//
//   node bench/guard-cost.mjs
const cpuNs = () => { const u = process.cpuUsage(); return (u.user + u.system) * 1000; };
import { createRequire } from 'node:module';
const require = createRequire(new URL('../package.json', import.meta.url));
const frames = require('rhea/lib/frames.js');
const rhea = require('rhea');
const { FrameGuard, DEFAULT_GUARD_OPTIONS } = await import(new URL('../dist/amqp/engine/frame-guard.js', import.meta.url).href);
const payload = rhea.message.encode({ body: Buffer.alloc(1024, 1), durable: false });
const f = (p, pl) => frames.write_frame(frames.amqp_frame(0, p.described(), pl));
const head = Buffer.concat([Buffer.from('AMQP\x00\x01\x00\x00', 'latin1'), f(frames.open({ container_id: 'c' })), f(frames.begin({ next_outgoing_id: 0, incoming_window: 2048, outgoing_window: 2048 })),
  f(frames.attach({ name: 'l', handle: 0, role: false, source: require('rhea/lib/terminus.js').source({}).described(), target: require('rhea/lib/terminus.js').target({ address: 'q' }).described(), initial_delivery_count: 0 }))]);
const N = 1000;
const batch = (start) => Buffer.concat(Array.from({ length: N }, (_, i) => f(frames.transfer({ handle: 0, delivery_id: start + i, delivery_tag: Buffer.from(String(i)), message_format: 0, settled: false }), payload)));
let forwarded = 0;
const g = new FrameGuard({ forward: (b) => (forwarded += b.length), refuse: (v) => { throw new Error(v.description); }, unsettled: () => undefined, oversize: () => {} }, { ...DEFAULT_GUARD_OPTIONS, maxFrameSize: 65536, maxMessageSize: 0 });
g.push(head);
const batches = Array.from({ length: 20 }, (_, k) => batch(k * N));
const one = batches[0].subarray(0, batches[0].readUInt32BE(0));
for (let r = 0; r < 3; r++) {
  let s = cpuNs();
  for (const b of batches) g.push(b);
  const guardNs = (cpuNs() - s) / (20 * N);
  s = cpuNs();
  for (let i = 0; i < 20 * N; i++) frames.read_frame(one);
  const rheaNs = (cpuNs() - s) / (20 * N);
  s = cpuNs();
  for (let i = 0; i < 2000; i++) rhea.message.decode(payload);
  const msgNs = (cpuNs() - s) / 2000;
  console.log(`guard ${guardNs.toFixed(0)} ns/transfer, rhea read_frame ${rheaNs.toFixed(0)} ns, ratio ${(guardNs / rheaNs).toFixed(2)}; rhea message.decode ${msgNs.toFixed(0)} ns`);
  batches.splice(0, 20, ...Array.from({ length: 20 }, (_, k) => batch((r + 1) * 20 * N + k * N)));
}
