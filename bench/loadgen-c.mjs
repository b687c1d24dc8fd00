// The Proton C load generator (bench/proton-c/, issue 20) from the bench drivers:
// built once per process by bench/proton-c/build.sh (which rebuilds only what changed),
// then run against a broker with the broker's CPU accounted around it.
import { join } from 'node:path';
import { benchDir, log, measuredClient, run, tryRun } from './lib.mjs';

// What build.sh needs; libraries and tools only (no service starts on install).
const BUILD_PACKAGES = ['libqpid-proton11-dev', 'pkg-config', 'gcc'];

/** Installs the build's Debian packages with apt-get if one is missing (BENCH_INSTALL_PROTON=no: fail instead). */
async function ensureBuildPackages() {
  const missing = [];
  for (const p of BUILD_PACKAGES) {
    const status = await tryRun('dpkg-query', ['-W', '-f', '${Status}', p]);
    if (!status?.includes('install ok installed')) missing.push(p);
  }
  if (!missing.length) return;
  if (process.env.BENCH_INSTALL_PROTON === 'no') throw new Error(`tandem-loadgen needs ${missing.join(', ')} and BENCH_INSTALL_PROTON=no`);
  log(`installing ${missing.join(' ')} with apt-get (the Proton C load generator's build)`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () => run('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { env, timeout: 600_000 });
  try {
    await install();
  } catch {
    await run('apt-get', ['update'], { env, timeout: 300_000 });
    await install();
  }
}

let built;
/** Path of the tandem-loadgen binary, built if needed (its packages installed first if missing). */
export function buildLoadgen() {
  built ??= ensureBuildPackages()
    .then(() => run(join(benchDir, 'proton-c', 'build.sh'), [], { timeout: 300_000 }))
    .then((out) => out.split('\n').pop());
  return built;
}

/**
 * One load by tandem-loadgen against `broker` (its loadArgs: user, addresses). The
 * result is the generator's JSON plus CPU accounting, and the figure issue 20 asks
 * for: the broker's CPU microseconds per message received.
 */
export async function runProtonLoad(broker, args, opts = {}) {
  const bin = await buildLoadgen();
  const r = await measuredClient(broker, bin, ['--host', '127.0.0.1', '--port', String(broker.port), ...broker.loadArgs, ...args], { what: 'tandem-loadgen', ...opts });
  return { ...r, brokerUsPerMessage: r.received > 0 ? Math.round((r.brokerCpuSeconds * 1e6 * 10) / r.received) / 10 : NaN };
}
