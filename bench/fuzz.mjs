#!/usr/bin/env node
// A long run of the suite's frame fuzzer (test/fuzz/frame-fuzz.test.ts): the same
// fuzzer, witnesses and verdict as in `npm test`, for a million frames or more, with
// more connections at once. Runs the test file under the repository's vitest (so the
// fuzzer is the suite's own, not a copy) against the work tree's build (`npm run build`
// first). Exits as the test does; the verdict line ("frame fuzz: {...}") is on stdout.
//
//   node bench/fuzz.mjs                      # 1,000,000 frames, seed 1
//   BENCH_FUZZ_FRAMES=3000000 BENCH_FUZZ_SEED=7 node bench/fuzz.mjs
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const frames = Number(process.env.BENCH_FUZZ_FRAMES ?? 1_000_000);
const seed = Number(process.env.BENCH_FUZZ_SEED ?? 1);
const concurrency = Number(process.env.BENCH_FUZZ_CONCURRENCY ?? 16);
if (!(frames > 0) || !Number.isInteger(seed) || !(concurrency > 0)) {
  process.stderr.write('BENCH_FUZZ_FRAMES and BENCH_FUZZ_CONCURRENCY must be positive numbers, BENCH_FUZZ_SEED an integer\n');
  process.exit(2);
}
process.stderr.write(`fuzz: ${frames} frames, seed ${seed}, ${concurrency} connections at once\n`);
const child = spawn(process.execPath, [join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', 'test/fuzz/frame-fuzz.test.ts'], {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    TANDEM_FUZZ_FRAMES: String(frames),
    TANDEM_FUZZ_SEED: String(seed),
    TANDEM_FUZZ_CONCURRENCY: String(concurrency),
  },
});
const stop = (signal) => child.kill(signal);
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
