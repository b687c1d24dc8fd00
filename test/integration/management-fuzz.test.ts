// A seeded fuzz of AMQP management against a real tandemd: requests of every
// operation the broker registers (and some it does not), on every entity type, with
// names and attribute values of hostile types and sizes. Each must be answered with a
// result or a refusal naming the client's error, never an internal error, and the
// broker must log no error line. Found: a queue argument named 'constructor' was a
// TypeError (an internal error, with its stack in the log): 17 of these 2,000 on the old code.
import { afterAll, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import { TandemError } from '../../src/broker/errors.js';
import { prng } from '../../src/util/prng.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x3a9e);
const REQUESTS = 2000;

const OPERATIONS = ['CREATE', 'READ', 'UPDATE', 'DELETE', 'QUERY', 'PURGE', 'MOVE', 'HA-STATUS', 'HA-PROMOTE', 'HA-SETTLE-ALONE', 'DR-SWITCHOVER', 'DR-FENCE', 'DR-UNFENCE', 'DR-FOLLOW', 'DR-PEER-STATE', 'DR-ADD', 'DR-DEL', 'DR-LIST', 'DR-STATUS', 'DR-ACTIVATE', 'DR-DEMOTE', 'DR-REATTACH', 'NO-SUCH-OPERATION'];
const TYPES = ['queue', 'exchange', 'binding', 'user', 'connection', 'broker', undefined, 'no-such-type'];
const KEYS = ['name', 'durable', 'max-count', 'max-size', 'alternate-exchange', 'exchange', 'queue', 'key', 'exchange-type', 'confirm', 'queues', 'source', 'mode', 'peer', 'password', 'epoch', 'qpid.dedup-window', 'dedup-ttl', 'dedup-key', 'default-ttl', 'auto-delete-delay', 'priorities', 'replicate', 'policy', 'exclusive', 'to', 'count', 'constructor', '__proto__', 'toString'];
const VALUES: unknown[] = [42, -1, 1e300, 2 ** 53 + 2, 0.5, '', 'x'.repeat(5000), '\u0000', '10m', '-5', 'constructor', '__proto__', [], [1, 'a'], {}, { a: { b: [] } }, null, true, Buffer.from('bin'), 'fuzz.q', 'amq.fanout'];

afterAll(async () => {
  await killAllBrokers();
});

describe('management - seeded fuzz', () => {
  it(`answers ${REQUESTS} hostile requests with results or the client's errors, never an internal error, and logs no error`, async () => {
    const broker = await TestBroker.start();
    const client = await ManagementClient.connect({ host: '127.0.0.1', port: broker.port }, { timeoutMs: 10_000 });
    const random = prng(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
    const answers = new Map<string, number>();
    const internal: string[] = [];
    try {
      for (let i = 0; i < REQUESTS; i++) {
        // Mostly declares and changes of queues, exchanges and bindings (where arguments are parsed), with fresh names.
        const operation = random() < 0.6 ? pick(['CREATE', 'UPDATE']) : pick(OPERATIONS);
        const type = random() < 0.7 ? pick(['queue', 'exchange', 'binding']) : pick(TYPES);
        const name = random() < 0.5 ? `fuzz-${i}` : pick(VALUES);
        // defineProperty: a key '__proto__' is an attribute of that name, as it is on the wire, not this object's prototype.
        const body: Record<string, unknown> = {};
        for (let k = Math.floor(random() * 5); k > 0; k--) Object.defineProperty(body, pick(KEYS), { value: pick(VALUES), enumerable: true, configurable: true, writable: true });
        let answer: string;
        try {
          await client.request(operation, type, name as string, body);
          answer = 'ok';
        } catch (err) {
          // A refusal is the broker's answer with its error code; anything else (no reply, a lost connection) is a failure.
          if (!(err instanceof TandemError)) throw err;
          answer = err.code;
          if (err.code === 'TANDEM_ERR_INTERNAL') internal.push(`${operation} ${type} ${JSON.stringify(name)?.slice(0, 40)} ${JSON.stringify(body).slice(0, 200)}: ${err.message}`);
        }
        answers.set(answer, (answers.get(answer) ?? 0) + 1);
      }
    } finally {
      client.close();
    }
    console.log(`management fuzz: ${JSON.stringify(Object.fromEntries(answers))}`);
    expect(internal.slice(0, 5), 'requests answered with an internal error').toEqual([]);
    // The mix reaches past the argument checks: some requests succeed, several kinds of refusal come back.
    expect(answers.get('ok') ?? 0).toBeGreaterThan(REQUESTS / 20);
    expect(answers.size).toBeGreaterThan(3);
    expect(broker.alive).toBe(true);
    expect(broker.errorLogLines.slice(0, 3), 'error lines in the broker log').toEqual([]);
    await broker.stop();
  });
});
