// The default memory-limit follows the cgroup's memory limit (a systemd unit's
// MemoryMax=, a container's limit) when it is below the machine's memory.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { availableMemory, cgroupLimit } from '../../../src/ops/system-memory.js';

const GiB = 1024 ** 3;
let dir: string | undefined;

/** A fake /proc/self/cgroup and /sys/fs/cgroup tree: files maps a path under the root to its content. */
function fakeCgroups(self: string, files: Record<string, string>): { self: string; root: string } {
  dir = mkdtempSync(join(tmpdir(), 'tandem-cgroup-'));
  const root = join(dir, 'sys');
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  writeFileSync(join(dir, 'self'), self);
  return { self: join(dir, 'self'), root };
}

afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('system memory', () => {
  it('system memory - cgroup v2: the smallest memory.max from the unit up to the root', () => {
    const paths = fakeCgroups('0::/system.slice/tandemd.service\n', {
      'system.slice/tandemd.service/memory.max': `${1 * GiB}\n`,
      'system.slice/memory.max': `${Math.floor(0.5 * GiB)}\n`,
      'memory.max': 'max\n',
    });
    expect(cgroupLimit(paths)).toBe(Math.floor(0.5 * GiB));
  });

  it('system memory - cgroup v2 without limits ("max" everywhere) and a limit above the machine are no limit', () => {
    expect(cgroupLimit(fakeCgroups('0::/a\n', { 'a/memory.max': 'max\n', 'memory.max': 'max\n' }))).toBeUndefined();
    expect(cgroupLimit(fakeCgroups('0::/a\n', { 'a/memory.max': `${2 * totalmem()}\n` }))).toBeUndefined();
  });

  it('system memory - cgroup v1: memory.limit_in_bytes of the memory hierarchy', () => {
    const paths = fakeCgroups('9:name=systemd:/x\n4:memory:/process_api/abc\n0::/\n', {
      'memory/process_api/abc/memory.limit_in_bytes': `${2 * GiB}\n`,
    });
    expect(cgroupLimit(paths)).toBe(2 * GiB);
  });

  it('system memory - what this process may use is at most the machine memory', () => {
    const m = availableMemory();
    expect(m).toBeGreaterThan(0);
    expect(m).toBeLessThanOrEqual(totalmem());
  });
});
