// 100 processes start at once on one data directory whose lock is stale (its broker
// died): exactly one may take it. Real processes, since the race is between them.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/broker.js';
import { LOCK_FILE_NAME } from '../../../src/store/lock.js';

const RACERS = 100;
const lockModule = path.join(repoRoot, 'dist', 'store', 'lock.js');

// Each racer loads the lock module, says "ready", waits for "go" on stdin, tries once,
// says "got" or "locked", and holds what it got until stdin closes.
const racer = `
import(${JSON.stringify(lockModule)}).then(async ({ DataDirLock }) => {
  process.stdout.write('ready\\n');
  process.stdin.once('data', async () => {
    try {
      const lock = await DataDirLock.acquire(process.argv[1]);
      process.stdout.write('got\\n');
      process.stdin.on('end', async () => { await lock.release(); process.exit(0); });
      process.stdin.resume();
    } catch (err) {
      process.stdout.write(err.code === 'TANDEM_ERR_DATA_DIR_LOCKED' ? 'locked\\n' : 'error ' + err.message + '\\n');
      process.exit(0);
    }
  });
});`;

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** A racer's output lines, and a wait until it has written `count` of them. */
function output(child: ChildProcess): { lines: string[]; upTo(count: number): Promise<void> } {
  const lines: string[] = [];
  let buf = '';
  let wake = () => {};
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    const parts = buf.split('\n');
    buf = parts.pop()!;
    lines.push(...parts);
    wake();
  });
  // 'close', not 'exit': it comes after the racer's output has all been read.
  let closed = false;
  const ended = new Promise<void>((resolve) => child.once('close', () => resolve((closed = true) && undefined)));
  const upTo = async (count: number) => {
    while (lines.length < count) {
      if (closed) throw new Error(`racer ended after: ${lines.join(' | ')}`);
      await Promise.race([new Promise<void>((resolve) => (wake = resolve)), ended]);
    }
  };
  return { lines, upTo };
}

describe('data directory lock', () => {
  it(`lock race - ${RACERS} simultaneous starts on a stale lock: exactly one wins, the others are told who holds it`, async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'tandem-lock-race-'));
    dirs.push(dataDir);
    // A PID above pid_max: a broker killed long ago.
    await writeFile(path.join(dataDir, LOCK_FILE_NAME), '2147483646\n');
    const racers = Array.from({ length: RACERS }, () => spawn(process.execPath, ['--input-type=module', '-e', racer, dataDir], { stdio: ['pipe', 'pipe', 'inherit'] }));
    const outputs = racers.map(output);
    try {
      await Promise.all(outputs.map((o) => o.upTo(1)));
      for (const r of racers) r.stdin!.write('go\n');
      await Promise.all(outputs.map((o) => o.upTo(2)));
      const verdicts = outputs.map((o) => o.lines[1]);
      expect(verdicts.filter((v) => v === 'got')).toHaveLength(1);
      expect(verdicts.filter((v) => v === 'locked')).toHaveLength(RACERS - 1);
    } finally {
      for (const r of racers) r.stdin!.end();
      await Promise.all(racers.map((r) => (r.exitCode !== null || r.signalCode !== null ? undefined : new Promise((resolve) => r.once('exit', resolve)))));
    }
  }, 120_000);
});
