// Preloaded into the broker the frame fuzz starts (node --require): on SIGUSR2, a full
// garbage collection, then one JSON line of process.memoryUsage() appended to
// $TANDEM_FUZZ_LIVE_FILE. What is left after a full collection is what the broker
// holds; RSS is not (V8 keeps up to bin/tandemd's --initial-old-space-size of garbage
// before its first full collection, and freed memory need not go back to the system).
// The broker itself never uses SIGUSR2. Only the main thread: the password-hashing
// worker runs preloads too.
'use strict';
const { isMainThread } = require('node:worker_threads');
if (isMainThread && process.env.TANDEM_FUZZ_LIVE_FILE) {
  const { appendFileSync } = require('node:fs');
  const v8 = require('node:v8');
  const vm = require('node:vm');
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  process.on('SIGUSR2', () => {
    const started = performance.now();
    gc();
    const ms = performance.now() - started;
    appendFileSync(process.env.TANDEM_FUZZ_LIVE_FILE, `${JSON.stringify({ ...process.memoryUsage(), gcMs: Math.round(ms) })}\n`);
  });
}
