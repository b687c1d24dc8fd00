// How much memory this broker may use: the machine's, or less when its cgroup
// (a systemd unit's MemoryMax=, a container's limit) allows less. The default
// memory-limit is a share of it, as RabbitMQ's vm_memory_high_watermark is.
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';

/** The default share of the available memory a broker's live memory may reach. */
export const DEFAULT_MEMORY_SHARE = 0.4;

/** Where the cgroup files are (tests point these at a directory of their own). */
export interface CgroupPaths {
  /** This process's cgroup membership, /proc/self/cgroup. */
  self: string;
  /** The cgroup file systems' mount point, /sys/fs/cgroup. */
  root: string;
}

const SYSTEM: CgroupPaths = { self: '/proc/self/cgroup', root: '/sys/fs/cgroup' };

/** A cgroup limit, or undefined for "max", an unreadable file or a value past the machine's memory. */
function readLimit(file: string): number | undefined {
  try {
    const text = readFileSync(file, 'utf8').trim();
    if (!/^\d+$/.test(text)) return undefined;
    const n = Number(text);
    return n > 0 && n < totalmem() ? n : undefined;
  } catch {
    return undefined;
  }
}

/** The smallest memory limit on the way from this process's cgroup up to the root (cgroup v2, then v1). */
export function cgroupLimit(paths: CgroupPaths = SYSTEM): number | undefined {
  let lines: string[];
  try {
    lines = readFileSync(paths.self, 'utf8').split('\n');
  } catch {
    return undefined;
  }
  const limits: number[] = [];
  const v2 = lines.find((l) => l.startsWith('0::'))?.slice(3);
  if (v2 !== undefined) {
    for (let dir = v2; ; dir = dir.slice(0, dir.lastIndexOf('/'))) {
      const limit = readLimit(`${paths.root}${dir === '/' ? '' : dir}/memory.max`);
      if (limit !== undefined) limits.push(limit);
      if (dir === '' || dir === '/') break;
    }
  }
  const v1 = lines.find((l) => /^\d+:(?:[^:]*,)?memory(?:,[^:]*)?:/.test(l))?.split(':')[2];
  if (v1 !== undefined) {
    const limit = readLimit(`${paths.root}/memory${v1 === '/' ? '' : v1}/memory.limit_in_bytes`);
    if (limit !== undefined) limits.push(limit);
  }
  return limits.length > 0 ? Math.min(...limits) : undefined;
}

/** Memory this process may use: the machine's, or its cgroup's limit if that is lower. */
export function availableMemory(): number {
  return Math.min(totalmem(), cgroupLimit() ?? Infinity);
}
