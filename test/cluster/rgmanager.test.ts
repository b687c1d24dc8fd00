// resource-agents/tandemd-primary (rgmanager's script for the primary role)
// against three real clustered brokers on loopback: status tells primary from
// not, start promotes only when that is safe, stop gives the role up.
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { brokerDir, freePort, haAvailable, killFromPidfile, ocfEnv, primaryScript, run, runAgent, tandemBin, waitFor } from './helpers.js';

const brokers: Array<ReturnType<typeof brokerDir>> = [];

afterAll(async () => {
  for (const b of brokers) {
    await killFromPidfile(b.pidfile);
    rmSync(b.dir, { recursive: true, force: true });
  }
});

const primary = (b: ReturnType<typeof brokerDir>, action: string, env: Record<string, string> = {}) =>
  run(primaryScript, [action], { env: { TANDEM: tandemBin, TANDEM_CONFIG: b.conf, TANDEM_TIMEOUT: '5', TANDEMD_STOP: `kill ${readPid(b)}`, ...env }, timeoutMs: 60_000 });

function readPid(b: ReturnType<typeof brokerDir>): string {
  try {
    return readFileSync(b.pidfile, 'utf8').trim();
  } catch {
    return '0';
  }
}

async function stateOf(b: ReturnType<typeof brokerDir>): Promise<string> {
  const r = await run(tandemBin, ['ha', 'status', '-c', b.conf, '--timeout', '2']);
  return r.code === 0 ? r.stdout.trim() : 'unreachable';
}

describe('rgmanager - tandemd-primary', () => {
  it('usage and a missing config', async () => {
    const r = await run(primaryScript, []);
    expect(r.code).toBe(2);
    const missing = await run(primaryScript, ['status'], { env: { TANDEM: tandemBin, TANDEM_CONFIG: '/nonexistent.conf' } });
    expect(missing.code).toBe(6);
  });

  it('start promotes the local broker, status follows the role, stop gives it up to another node', async ({ skip }) => {
    if (!(await haAvailable())) skip('tandemd on this tree has no HA yet');
    const ports = [await freePort(), await freePort(), await freePort()];
    for (const port of ports) brokers.push(brokerDir(port, ports));
    const [b1, b2, b3] = brokers;
    for (const b of brokers) {
      const r = await runAgent('start', ocfEnv(b));
      expect(r.code, r.stderr).toBe(0);
    }
    expect((await primary(b1, 'status')).code, 'a backup is not the primary').toBe(3);

    const start = await primary(b1, 'start');
    expect(start.code, start.stderr).toBe(0);
    expect((await primary(b1, 'status')).code).toBe(0);
    expect((await primary(b1, 'start')).code, 'starting twice').toBe(0);
    await waitFor(async () => (await stateOf(b2)) === 'ready' && (await stateOf(b3)) === 'ready', { timeoutMs: 30_000, name: 'backups ready' });

    const refused = await primary(b2, 'start');
    expect(refused.code, 'a second primary is refused').toBe(1);
    expect(refused.stderr).toMatch(/refused/);
    expect((await primary(b2, 'stop')).code, 'stopping a backup is a no-op').toBe(0);
    expect(await stateOf(b2)).toBe('ready');

    const stop = await primary(b1, 'stop');
    expect(stop.code, stop.stderr).toBe(0);
    expect((await primary(b1, 'status')).code).toBe(3);

    const takeover = await waitFor(
      async () => {
        const r = await primary(b2, 'start');
        return r.code === 0 ? r : undefined;
      },
      { timeoutMs: 30_000, name: 'b2 to take the primary role', everyMs: 1000 },
    );
    expect(takeover.code).toBe(0);
    expect((await primary(b2, 'status')).code).toBe(0);
    expect(['recovering', 'active']).toContain(await stateOf(b2));
  }, 180_000);
});
