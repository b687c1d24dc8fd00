// A tandemd whose wall clock a test steps while it runs, as NTP at boot, a VM resumed
// after hours or an admin's `date -s` step a production machine's. libfaketime (Debian's
// faketime package, installed by test/setup.sh) is preloaded into the broker: it reads the
// offset from a file at every clock read (FAKETIME_NO_CACHE) and leaves CLOCK_MONOTONIC
// alone (DONT_FAKE_MONOTONIC), as a real step does.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IN_CI } from '../packaging/packages.js';

/** The preloadable library, or undefined when the faketime package is not installed. */
export const libfaketime: string | undefined = (() => {
  try {
    return execFileSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
      .split('\n')
      .find((path) => path.endsWith('/libfaketime.so.1') && existsSync(path));
  } catch {
    return undefined;
  }
})();

/**
 * Whether tests that step clocks skip: only where the library is absent and not in CI,
 * where setup.sh installs it (a missing one there fails the tests that need it instead).
 */
export const skipClockSteps = libfaketime === undefined && !IN_CI;
if (skipClockSteps) console.warn('clock-step tests skipped: libfaketime is not installed (apt-get install faketime, or run test/setup.sh)');

/** The directories of every clock made, for removeClockFiles(). */
const dirs = new Set<string>();

/** One broker's wall clock: its environment, and the offset from the real time it shows. */
export class SteppedClock {
  private readonly file: string;

  constructor() {
    if (!libfaketime) throw new Error('libfaketime is not installed: apt-get install faketime (test/setup.sh installs it)');
    const dir = mkdtempSync(join(tmpdir(), 'tandem-faketime-'));
    dirs.add(dir);
    this.file = join(dir, 'offset');
    this.set(0);
  }

  /** What the broker's process needs in its environment. */
  get env(): NodeJS.ProcessEnv {
    return { LD_PRELOAD: libfaketime, FAKETIME_TIMESTAMP_FILE: this.file, FAKETIME_NO_CACHE: '1', DONT_FAKE_MONOTONIC: '1' };
  }

  /** Show the real time plus `seconds` from now on (not cumulative: 0 puts the clock right). */
  set(seconds: number): void {
    // Renamed into place: a clock read never sees a half-written file.
    const next = `${this.file}.next`;
    writeFileSync(next, `${seconds >= 0 ? '+' : ''}${Math.trunc(seconds)}\n`);
    renameSync(next, this.file);
  }
}

/** Remove every clock's file: once the brokers reading them are gone. */
export function removeClockFiles(): void {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  dirs.clear();
}
