// The console's tls-cert and tls-key (src/console/server.ts) are read as the AMQP listener
// reads them (src/ops/tls-file-read.ts): bounded, refused naming the key and the path.
// readFileSync took /dev/zero until the heap was full and answered a directory with a
// bare EISDIR. The whole broker's console over HTTPS is in test/console/api.test.ts.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AdminOperations } from '../../../src/admin/dispatcher.js';
import type { UserDirectory } from '../../../src/admin/users.js';
import { LoginThrottle } from '../../../src/amqp/login-throttle.js';
import { ConsoleServer } from '../../../src/console/server.js';
import type { Logger } from '../../../src/ops/log.js';
import { makeCerts, type TestCerts } from '../../helpers/certs.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet } as unknown as Logger;

let certs: TestCerts;
let dir: string;
const servers: ConsoleServer[] = [];

beforeAll(() => {
  certs = makeCerts();
  dir = mkdtempSync(join(tmpdir(), 'tandem-console-tls-'));
});
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});
afterAll(() => {
  certs.remove();
  rmSync(dir, { recursive: true, force: true });
});

/** A console on loopback with these TLS files, listening (or the refusal of listen()). */
async function consoleWith(cert: string, key: string): Promise<number> {
  const server = new ConsoleServer({
    host: '127.0.0.1',
    port: 0,
    tls: { cert, key },
    auth: false,
    users: { authenticate: async () => undefined, role: () => undefined } as unknown as UserDirectory,
    throttle: new LoginThrottle(),
    ops: { perform: async () => ({}) } as unknown as AdminOperations,
    cluster: () => ({ ha: false, brokers: [], primary: null, warnings: [], at: 0 }),
    log: quiet,
    uiDir: '/nonexistent-console-ui',
  });
  servers.push(server);
  return server.listen();
}

describe('console TLS files', () => {
  it('console - good tls-cert and tls-key: the console answers over HTTPS', async () => {
    const port = await consoleWith(certs.brokerCert, certs.brokerKey);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      request({ host: '127.0.0.1', port, path: '/api/session', ca: readFileSync(certs.ca), servername: 'localhost', headers: { host: `127.0.0.1:${port}` } }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
        .on('error', reject)
        .end();
    });
    expect(answer.status, answer.body).toBe(200);
    expect(JSON.parse(answer.body)).toBeTypeOf('object');
  });

  it('console - a tls-cert or tls-key that is a directory or too large is refused at start, naming the key and the path', async () => {
    const sub = join(dir, 'a-directory');
    mkdirSync(sub);
    const big = join(dir, 'big.pem');
    writeFileSync(big, '');
    truncateSync(big, 5 * 1024 * 1024);
    await expect(consoleWith(sub, certs.brokerKey)).rejects.toThrow(`tls-cert ${sub} is a directory, not a file`);
    await expect(consoleWith(certs.brokerCert, big)).rejects.toThrow(`tls-key ${big} is larger than 4 MiB: is it the right file?`);
    await expect(consoleWith(join(dir, 'missing.pem'), certs.brokerKey)).rejects.toThrow(`cannot read tls-cert ${join(dir, 'missing.pem')}: ENOENT`);
  });

  it('console - tls-cert /dev/zero is refused after 4 MiB, not read until the heap is full', async () => {
    await expect(consoleWith('/dev/zero', certs.brokerKey)).rejects.toThrow('tls-cert /dev/zero is larger than 4 MiB: is it the right file?');
    await expect(consoleWith(certs.brokerCert, '/dev/zero')).rejects.toThrow('tls-key /dev/zero is larger than 4 MiB');
  });
});
