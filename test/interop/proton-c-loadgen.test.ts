// The benchmark's Proton C load generator (bench/proton-c/, issue 20) against a real
// tandemd: it builds from Debian's libqpid-proton11-dev, moves every message it says
// it moved, and reports loss when there is some. bench/engine.mjs trusts its JSON, so
// this is what keeps those numbers honest.
import { execFile, execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, repoRoot } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

interface LoadgenResult {
  client: string;
  queue: string;
  durable: boolean;
  senders: number;
  receivers: number;
  sent: number;
  accepted: number;
  rejected: number;
  released: number;
  modified: number;
  unsettled: number;
  received: number;
  duplicates: number;
  lost: number;
  foreign: number;
  duration: number;
  rate?: number;
  throughput: number;
  errorCount: number;
  errors: string[];
}

let loadgen: string;
let broker: TestBroker;

/** Runs tandem-loadgen against the broker; its exit code and the JSON line it prints. */
function runLoadgen(args: string[], timeoutMs = 90_000): Promise<{ code: number; result: LoadgenResult }> {
  return new Promise((resolvePromise, reject) => {
    execFile(loadgen, ['--port', String(broker.port), ...args], { timeout: timeoutMs }, (err, stdout, stderr) => {
      const line = String(stdout).trim().split('\n').pop() ?? '';
      try {
        resolvePromise({ code: err ? Number((err as { code?: unknown }).code ?? -1) : 0, result: JSON.parse(line) as LoadgenResult });
      } catch {
        reject(new Error(`tandem-loadgen ${args.join(' ')} printed no JSON (${err?.message})\nstdout: ${stdout}\nstderr: ${stderr}`));
      }
    });
  });
}

const depth = async (queue: string) => ((await manage(broker.port, 'READ', 'queue', queue)) as { depth: number }).depth;

beforeAll(async () => {
  // The build script prints the binary's path last.
  loadgen = execFileSync(resolve(repoRoot, 'bench', 'proton-c', 'build.sh'), { encoding: 'utf8', timeout: 180_000 }).trim().split('\n').pop()!;
  broker = await TestBroker.start();
});

afterAll(async () => {
  await killAllBrokers();
});

describe('proton-c load generator', () => {
  for (const durable of [false, true]) {
    it(`proton-c loadgen - 2,000 ${durable ? 'durable' : 'non-durable'} 1 KiB messages: every one sent is accepted and received once`, async () => {
      const queue = `loadgen.${durable ? 'durable' : 'transient'}`;
      const { code, result } = await runLoadgen(['--queue', queue, '--count', '2000', ...(durable ? ['--durable'] : [])]);
      expect(result.errors).toEqual([]);
      expect(code).toBe(0);
      expect(result).toMatchObject({ client: 'proton-c', durable, sent: 2000, accepted: 2000, received: 2000, unsettled: 0, duplicates: 0, lost: 0, foreign: 0, rejected: 0, released: 0, modified: 0 });
      expect(await depth(queue)).toBe(0);
    });
  }

  it('proton-c loadgen - 4 senders and 4 receivers on two threads share one queue and lose nothing', async () => {
    const { code, result } = await runLoadgen(['--queue', 'loadgen.four', '--senders', '4', '--count', '500', '--threads', '2', '--durable']);
    expect(result.errors).toEqual([]);
    expect(code).toBe(0);
    expect(result).toMatchObject({ senders: 4, receivers: 4, sent: 2000, accepted: 2000, received: 2000, duplicates: 0, lost: 0 });
    expect(await depth('loadgen.four')).toBe(0);
  });

  /** Two runs with `idOption` into a queue with a window: every id new, within a run and across them. */
  async function expectUniqueIdsTwice(queue: string, idOption: string): Promise<void> {
    await manage(broker.port, 'CREATE', 'queue', queue, { 'qpid.dedup-window': 100_000 });
    for (const run of [1, 2]) {
      const { code, result } = await runLoadgen(['--queue', queue, '--senders', '2', '--count', '1000', idOption]);
      expect(result.errors).toEqual([]);
      expect(code).toBe(0);
      expect(result).toMatchObject({ sent: 2000, accepted: 2000, received: 2000, duplicates: 0, lost: 0 });
      // A window that took ids twice would hold fewer keys and count duplicates.
      const q = (await manage(broker.port, 'READ', 'queue', queue)) as Record<string, number>;
      expect(q).toMatchObject({ 'dedup-keys': 2000 * run, 'dedup-duplicates': 0, 'dedup-without-key': 0, 'dedup-invalid-key': 0 });
    }
  }

  it('proton-c loadgen - --message-id gives every message its own id, new in each run (a window takes them all, twice)', async () => {
    await expectUniqueIdsTwice('loadgen.keyed', '--message-id');
  });

  it('proton-c loadgen - --message-id-string gives every message its own qpid-jms-shaped string id, new in each run', async () => {
    await expectUniqueIdsTwice('loadgen.jms-keyed', '--message-id-string');
    // What the ids look like, read by rhea from a queue the generator's receivers do not read.
    await runLoadgen(['--send-address', 'loadgen.jms-kept', '--recv-address', 'loadgen.jms-unread', '--count', '3', '--message-id-string', '--drain-timeout', '1']);
    const c = await TestClient.connect({ port: broker.port });
    try {
      const ids = (await c.receiveAndAccept('loadgen.jms-kept', 3)).map((m) => m.message_id);
      for (const id of ids) expect(id).toMatch(/^ID:[0-9a-f]{8}-[0-9a-f]{4}-4000-8000-[0-9a-f]{12}:1:1:1-[0-9a-f]{16}$/);
      expect(new Set(ids).size).toBe(3);
    } finally {
      await c.close();
    }
  });

  it('proton-c loadgen - --rate holds the senders to it (never ahead of rate x sending time)', async () => {
    const rate = 2000;
    const { code, result } = await runLoadgen(['--queue', 'loadgen.rated', '--senders', '2', '--rate', String(rate), '--duration', '1']);
    expect(result.errors).toEqual([]);
    expect(code).toBe(0);
    expect(result).toMatchObject({ rate, lost: 0, duplicates: 0 });
    expect(result.received).toBe(result.sent);
    // An upper bound, not a timing: each sender may run one message ahead, and its last
    // send may fall a little after the clock that ended the sending phase was read.
    expect(result.sent).toBeLessThanOrEqual(Math.ceil(rate * (result.duration + 0.05)) + 2);
    expect(result.sent).toBeGreaterThan(0);
  });

  it('proton-c loadgen - messages accepted but never received are counted as lost and fail the run', async () => {
    // Receivers on another queue: the broker accepts all 200 and keeps them where nobody reads.
    const { code, result } = await runLoadgen(['--send-address', 'loadgen.kept', '--recv-address', 'loadgen.unread', '--count', '200', '--drain-timeout', '1']);
    expect(code).toBe(1);
    expect(result).toMatchObject({ sent: 200, accepted: 200, received: 0, lost: 200 });
    expect(result.errors.join('\n')).toMatch(/200 accepted messages never received/);
    expect(await depth('loadgen.kept')).toBe(200);
  });

  it('proton-c loadgen - a broker that is not there is an error, not a result', async () => {
    const { code, result } = await runLoadgen(['--port', '1', '--count', '10']); // the later --port wins
    expect(code).toBe(1);
    expect(result.sent).toBe(0);
    expect(result.errors.join('\n')).toMatch(/connection lost/);
  });
});
