// The OCF agent (resource-agents/tandemd and its TypeScript helper) and `tandem ha -c`
// with TLS-only brokers: listen-plain=no, an amqps: ha-brokers-url, auth on. The agent
// reaches its own broker on the TLS port, verified against ha-tls-ca, and the other
// brokers as the brokers reach each other. Real openssl certificates.
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { HA_PASSWORD, HA_USER, haIdentity, type HaIdentity } from '../helpers/ha-identity.js';
import { brokerDir, freePort, haAvailable, killFromPidfile, ocfEnv, run, runAgent, tandemBin, waitFor } from './helpers.js';

let certs: TestCerts;
let identity: HaIdentity;
const brokers: Array<ReturnType<typeof brokerDir>> = [];

beforeAll(async () => {
  certs = makeCerts();
  identity = await haIdentity(certs.dir);
});

afterAll(async () => {
  for (const b of brokers) {
    await killFromPidfile(b.pidfile);
    rmSync(b.dir, { recursive: true, force: true });
  }
  certs.remove();
});

/** A broker dir whose tandemd is TLS-only on `tlsPort`, in a cluster of `tlsPorts`. */
async function tlsBrokerDir(tlsPort: number, tlsPorts: number[]): Promise<ReturnType<typeof brokerDir>> {
  const b = brokerDir(await freePort(), [], [
    'listen-plain=no',
    `tls-port=${tlsPort}`,
    `tls-cert=${certs.brokerCert}`,
    `tls-key=${certs.brokerKey}`,
    `ha-tls-ca=${certs.ca}`,
    `ha-brokers-url=amqps:${tlsPorts.map((p) => `127.0.0.1:${p}`).join(',')}`,
    'auth=yes',
    `users-file=${identity.usersFile}`,
    `ha-username=${HA_USER}`,
    `ha-password-file=${identity.passwordFile}`,
  ].join('\n'));
  brokers.push(b);
  return b;
}

const stateOf = async (conf: string): Promise<string> => {
  const r = await run(tandemBin, ['ha', 'status', '-c', conf, '--timeout', '3']);
  return r.code === 0 ? r.stdout.trim() : `unreachable: ${r.stderr}`;
};

describe('resource agent - TLS-only brokers', () => {
  it('agent tls - start, monitor, promote and stop TLS-only brokers; tandem ha -c reaches them over TLS', async ({ skip }) => {
    if (!(await haAvailable())) skip('tandemd on this tree has no HA yet');
    const ports = [await freePort(), await freePort()];
    const [b1, b2] = [await tlsBrokerDir(ports[0]!, ports), await tlsBrokerDir(ports[1]!, ports)];
    for (const b of [b1!, b2!]) {
      const start = await runAgent('start', ocfEnv(b));
      expect(start.code, start.stdout + start.stderr).toBe(0);
      expect((await runAgent('monitor', ocfEnv(b))).code, 'a backup').toBe(0);
    }
    const promote = await runAgent('promote', ocfEnv(b1!));
    expect(promote.code, promote.stdout + promote.stderr).toBe(0);
    expect((await runAgent('monitor', ocfEnv(b1!))).code, 'the primary').toBe(8);
    await waitFor(async () => (await stateOf(b2!.conf)) === 'ready', { timeoutMs: 30_000, name: 'b2 ready' });
    expect((await runAgent('monitor', ocfEnv(b2!))).code).toBe(0);
    const all = await run(tandemBin, ['ha', 'status', '-c', b2!.conf, '--all', '--json', '--timeout', '3']);
    expect(all.code, all.stderr).toBe(0);
    expect((JSON.parse(all.stdout) as Array<{ state: string }>).map((s) => s.state).sort()).toEqual(['active', 'ready']);
    expect(all.stdout + all.stderr).not.toContain(HA_PASSWORD);
    for (const b of [b2!, b1!]) expect((await runAgent('stop', ocfEnv(b))).code).toBe(0);
  }, 120_000);
});
