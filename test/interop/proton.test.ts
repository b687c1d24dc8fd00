// Interop with a foreign client: Debian's python3-qpid-proton (BlockingConnection)
// against a real tandemd, and mixed with rhea on the other end. Proton sends its
// receiver attach and flow in one write, which is what exposes link-ordering bugs.
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

const python = '/usr/bin/python3';
const script = resolve(import.meta.dirname, 'py', 'client.py');
const dir = mkdtempSync(join(tmpdir(), 'tandem-interop-'));

interface PyResult {
  ok: boolean;
  error?: string;
  stage?: string;
  outcomes?: Array<{ state: string; description?: string }>;
  messages?: Array<{ body: string; durable: boolean; delivery_count: number; priority: number; subject: string | null }>;
  reply_to?: string;
  reply?: { body: string; correlation_id: string };
}

/** Run client.py and parse the JSON line it prints. */
function py(args: string[], timeoutMs = 30_000): Promise<PyResult> {
  return new Promise((resolvePromise, reject) => {
    execFile(python, [script, ...args], { timeout: timeoutMs }, (err, stdout, stderr) => {
      const line = String(stdout).trim().split('\n').pop() ?? '';
      try {
        resolvePromise(JSON.parse(line) as PyResult);
      } catch {
        reject(new Error(`client.py ${args.join(' ')} printed no JSON (${err?.message})\nstdout: ${stdout}\nstderr: ${stderr}`));
      }
    });
  });
}

let broker: TestBroker;
let rhea: TestClient;
const url = () => `127.0.0.1:${broker.port}`;

beforeAll(async () => {
  broker = await TestBroker.start();
  rhea = await TestClient.connect({ port: broker.port });
});

afterAll(async () => {
  await rhea?.close();
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('interop', () => {
  it('interop - an administrator closing a proton receiver\'s connection: proton notices and reconnects', async () => {
    // failover_receive.py: Container.connect(urls=[...]) with reconnect on, as in ha.test.ts.
    const receiving = new Promise<{ bodies: string[]; opens: number; done: boolean }>((resolvePromise, reject) => {
      execFile(python, [resolve(import.meta.dirname, 'py', 'failover_receive.py'), url(), 'admin.closed', '2', '25'], { timeout: 40_000 }, (err, stdout, stderr) => {
        try {
          resolvePromise(JSON.parse(String(stdout).trim().split('\n').pop() ?? ''));
        } catch {
          reject(new Error(`failover_receive.py printed no JSON (${err?.message})\nstdout: ${stdout}\nstderr: ${stderr}`));
        }
      });
    });
    const consumers = async () => {
      try {
        return ((await manage(broker.port, 'READ', 'queue', 'admin.closed')) as { consumers: number }).consumers;
      } catch {
        return 0;
      }
    };
    await waitFor(async () => (await consumers()) === 1, { timeout: 20_000, name: 'proton consumer attached' });
    await rhea.send('admin.closed', [{ body: 'before' }]);
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'admin.closed')) as { depth: number }).depth === 0, { name: 'first message taken' });
    const list = await tandem(['connection', 'list', '--json', '-b', url()]);
    expect(list.code, list.stderr).toBe(0);
    const proton = (JSON.parse(list.stdout) as Array<{ id: string; container: string; links: number }>).filter((c) => c.links > 0 && !c.container.startsWith('test-') && !c.container.startsWith('tandem-cli-'));
    expect(proton).toHaveLength(1);
    const closed = await tandem(['connection', 'close', proton[0]!.id, '-b', url()]);
    expect(closed.code, closed.stderr).toBe(0);
    // Proton only learns of it if it reads on: it must come back, on a new connection.
    await waitFor(async () => {
      const again = await tandem(['connection', 'list', '--json', '-b', url()]);
      return (JSON.parse(again.stdout) as Array<{ id: string }>).every((c) => c.id !== proton[0]!.id) && (await consumers()) === 1;
    }, { timeout: 20_000, interval: 200, name: 'proton reconnected' }).catch(async (err: Error) => {
      const again = await tandem(['connection', 'list', '--json', '-b', url()]);
      throw new Error(`${err.message}: consumers ${await consumers()}, connections ${again.stdout}; closed ${proton[0]!.id}`);
    });
    await rhea.send('admin.closed', [{ body: 'after' }]);
    const got = await receiving;
    expect(got.done).toBe(true);
    expect(got.bodies).toEqual(['before', 'after']);
    expect(got.opens).toBeGreaterThanOrEqual(2);
  });

  it('interop - proton sends and receives in order', async () => {
    const sent = await py(['send', url(), 'py.sr', '--count', '5']);
    expect(sent.ok, sent.error).toBe(true);
    expect(sent.outcomes!.map((o) => o.state)).toEqual(Array(5).fill('accepted'));
    const got = await py(['receive', url(), 'py.sr', '--count', '5']);
    expect(got.ok, got.error).toBe(true);
    expect(got.messages!.map((m) => m.body)).toEqual(['py0', 'py1', 'py2', 'py3', 'py4']);
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'py.sr')) as { depth: number }).depth === 0, { name: 'drained' });
  });

  it('interop - a proton receiver attaching to a full queue with credit gets every message (attach and flow in one read)', async () => {
    await rhea.send('py.backlog', 200);
    const got = await py(['receive', url(), 'py.backlog', '--count', '200', '--credit', '200']);
    expect(got.ok, got.error).toBe(true);
    expect(got.messages).toHaveLength(200);
    expect(got.messages!.map((m) => m.body)).toEqual(Array.from({ length: 200 }, (_, i) => `m${i}`));
  });

  it('interop - proton release puts messages back for the next receiver', async () => {
    await rhea.send('py.release', 2);
    const first = await py(['receive', url(), 'py.release', '--count', '2', '--outcome', 'release']);
    expect(first.ok, first.error).toBe(true);
    const again = await py(['receive', url(), 'py.release', '--count', '2']);
    expect(again.messages!.map((m) => m.body)).toEqual(['m0', 'm1']);
  });

  it('interop - proton reject sends the message to the alternate exchange', async () => {
    await manage(broker.port, 'CREATE', 'exchange', 'py.dlx', { 'exchange-type': 'fanout' });
    await manage(broker.port, 'CREATE', 'queue', 'py.dlq');
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'py.dlx', queue: 'py.dlq' });
    await manage(broker.port, 'CREATE', 'queue', 'py.reject', { 'alternate-exchange': 'py.dlx' });
    await rhea.send('py.reject', ['poison']);
    const r = await py(['receive', url(), 'py.reject', '--count', '1', '--outcome', 'reject']);
    expect(r.messages!.map((m) => m.body)).toEqual(['poison']);
    expect((await rhea.receiveAndAccept('py.dlq', 1)).map(bodyOf)).toEqual(['poison']);
    expect(((await manage(broker.port, 'READ', 'queue', 'py.reject')) as { depth: number }).depth).toBe(0);
  });

  it('interop - proton browse sees messages and leaves them', async () => {
    await rhea.send('py.browse', 3);
    const seen = await py(['browse', url(), 'py.browse', '--count', '3']);
    expect(seen.ok, seen.error).toBe(true);
    expect(seen.messages!.map((m) => m.body)).toEqual(['m0', 'm1', 'm2']);
    expect(((await manage(broker.port, 'READ', 'queue', 'py.browse')) as { depth: number }).depth).toBe(3);
  });

  it('interop - proton request with a dynamic reply queue gets a rhea responder\'s answer', async () => {
    await manage(broker.port, 'CREATE', 'queue', 'py.requests');
    const responder = await rhea.openReceiver('py.requests');
    responder.receiver.add_credit(1);
    const request = py(['request', url(), 'py.requests', '--body', 'ping']);
    const [req] = await responder.next(1);
    expect(bodyOf(req.message)).toBe('ping');
    const replyTo = req.message.reply_to as string;
    expect(replyTo).toMatch(/^tmp\./);
    await rhea.send(replyTo, [{ body: 'pong', correlation_id: req.message.correlation_id }]);
    req.delivery.accept();
    const result = await request;
    expect(result.ok, result.error).toBe(true);
    expect(result.reply).toMatchObject({ body: 'pong', correlation_id: 'req-1' });
    await responder.close();
    // The reply queue went with the proton connection.
    await waitFor(async () => {
      try {
        await manage(broker.port, 'READ', 'queue', replyTo);
        return false;
      } catch {
        return true;
      }
    }, { name: 'reply queue deleted' });
  });

  it('interop - a proton sender sees the rejected outcome on a full queue', async () => {
    await manage(broker.port, 'CREATE', 'queue', 'py.full', { 'max-count': 2 });
    const sent = await py(['send', url(), 'py.full', '--count', '4']);
    expect(sent.ok, sent.error).toBe(true);
    expect(sent.outcomes!.map((o) => o.state)).toEqual(['accepted', 'accepted', 'rejected', 'rejected']);
  });

  it('interop - a proton sender and a rhea receiver', async () => {
    const r = await rhea.openReceiver('py.to.rhea');
    r.receiver.add_credit(3);
    const sent = await py(['send', url(), 'py.to.rhea', '--count', '3', '--subject', 's']);
    expect(sent.ok, sent.error).toBe(true);
    const got = await r.next(3);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['py0', 'py1', 'py2']);
    expect(got[0].message.subject).toBe('s');
    for (const g of got) g.delivery.accept();
    await r.close();
  });

  it('interop - a rhea sender and a proton receiver (waiting before messages arrive)', async () => {
    const receiving = py(['receive', url(), 'rhea.to.py', '--count', '3']);
    await waitFor(async () => {
      try {
        return ((await manage(broker.port, 'READ', 'queue', 'rhea.to.py')) as { consumers: number }).consumers === 1;
      } catch {
        return false;
      }
    }, { name: 'proton consumer attached' });
    await rhea.send('rhea.to.py', [{ body: 'a', priority: 7 }, { body: 'b' }, { body: 'c', durable: true }]);
    const got = await receiving;
    expect(got.ok, got.error).toBe(true);
    expect(got.messages!.map((m) => m.body)).toEqual(['a', 'b', 'c']);
    expect(got.messages![0].priority).toBe(7);
    expect(got.messages![2].durable).toBe(true);
  });

  it('interop - proton pre-settled sends are enqueued', async () => {
    const sent = await py(['send', url(), 'py.presettled', '--count', '3', '--presettled']);
    expect(sent.ok, sent.error).toBe(true);
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'py.presettled')) as { depth: number }).depth === 3, { name: 'three enqueued' });
  });

  it('interop - proton to an exchange, routed by subject', async () => {
    await manage(broker.port, 'CREATE', 'queue', 'py.news');
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.topic', queue: 'py.news', key: 'news.#' });
    await py(['send', url(), 'amq.topic', '--count', '1', '--subject', 'news.today']);
    await py(['send', url(), 'amq.topic', '--count', '1', '--subject', 'sport', '--body-prefix', 'no']);
    const got = await py(['receive', url(), 'py.news', '--count', '2', '--timeout', '1']);
    expect(got.messages!.map((m) => m.body)).toEqual(['py0']);
  });
});

describe('interop security and restart', () => {
  it('interop - proton over TLS with CA verification', async () => {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { cwd: dir, stdio: 'pipe' });
    const tls = await TestBroker.start({ args: ['--tls-cert', join(dir, 'cert.pem'), '--tls-key', join(dir, 'key.pem'), '--tls-port', '0'] });
    const target = `amqps://localhost:${tls.tlsPort}`;
    const sent = await py(['send', target, 'tls.q', '--count', '2', '--ca', join(dir, 'cert.pem')]);
    expect(sent.ok, sent.error).toBe(true);
    const got = await py(['receive', target, 'tls.q', '--count', '2', '--ca', join(dir, 'cert.pem')]);
    expect(got.messages!.map((m) => m.body)).toEqual(['py0', 'py1']);
    await tls.stop();
    tls.cleanup();
  });

  it('interop - proton SASL PLAIN works and a wrong password is refused', async () => {
    const users = join(dir, 'users');
    const add = await tandem(['user', 'add', 'carol', '--password-file', '-', '-f', users], { input: 'carol-pw\n' });
    expect(add.code, add.stderr).toBe(0);
    const secured = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users] });
    const target = `127.0.0.1:${secured.port}`;
    const ok = await py(['send', target, 'sasl.q', '--user', 'carol', '--password', 'carol-pw', '--mechs', 'PLAIN']);
    expect(ok.ok, ok.error).toBe(true);
    expect(ok.outcomes![0].state).toBe('accepted');
    const bad = await py(['send', target, 'sasl.q', '--user', 'carol', '--password', 'nope', '--mechs', 'PLAIN', '--timeout', '5']);
    expect(bad.ok).toBe(false);
    expect(bad.error).toMatch(/auth|sasl|unauthorized/i);
    const anon = await py(['send', target, 'sasl.q', '--mechs', 'ANONYMOUS', '--timeout', '5']);
    expect(anon.ok).toBe(false);
    expect(secured.alive).toBe(true);
    await secured.stop();
    secured.cleanup();
  });

  it('interop - durable messages sent by proton survive a restart', async () => {
    const dataDir = join(dir, 'durable-data');
    const first = await TestBroker.start({ dataDir });
    const sent = await py(['send', `127.0.0.1:${first.port}`, 'py.durable', '--count', '3', '--durable']);
    expect(sent.ok, sent.error).toBe(true);
    expect(await first.stop()).toBe(0);
    const second = await TestBroker.start({ dataDir });
    const got = await py(['receive', `127.0.0.1:${second.port}`, 'py.durable', '--count', '3']);
    expect(got.ok, got.error).toBe(true);
    expect(got.messages!.map((m) => m.body)).toEqual(['py0', 'py1', 'py2']);
    expect(got.messages!.every((m) => m.durable)).toBe(true);
    expect(await second.stop()).toBe(0);
  });
});
