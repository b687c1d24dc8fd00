// What a real tandemd takes from the ANSWERS of the other DR site, when a hostile (or
// buggy, or other-version) AMQP peer sits at the DR address and answers $management with
// garbage (test/dr/hostile-site.ts): NaN, negative, strings, 2^60, missing fields, rows
// of the wrong shape, two rows for one queue, 20,000 rows, nesting, a map with its own
// `toString`. As the other site of a fenced source (its question every 2 s), of a
// reattach, of a switchover (the fence, unfence and follow answers), and as the old
// source told to stop serving. Each garbled answer is refused with a clear reason (the
// fence stays, nothing is activated or reattached), the roles in dr status stay
// consistent, no error is logged, and the brokers keep serving.
//
// Found on the old code: a fenced source recorded a position of NaN, -5, '7' or 2^60
// and followed; a row with an unknown state, no state, switching 'false' or epoch 1.5
// unfenced it (both sites serving); held ranges unsorted were ignored and it followed
// without dropping; {queues: 5}, [null] or a row whose queue was a map with a
// `toString` key threw in the timer and ended the process (exit 70); a switchover
// took DR-FENCE's lsn null, '0' or -1 as 0 and activated without draining; a
// DR-FOLLOW answer that named nothing was reported as confirmed; a DR-DEMOTE
// answer that named nothing stopped the telling; a reattach journaled NaN positions.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import type { TandemError } from '../../src/broker/errors.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { HostileSite, type HostileAnswer, type HostileRequest } from './hostile-site.js';
import { depthOf, drRowOf, drStatus, receive, send } from './helpers.js';

let a: TestBroker;
let b: TestBroker;
let h: HostileSite;
/** What the hostile site answers now, per operation (default: a plain refusal). */
const answers = new Map<string, (r: HostileRequest) => HostileAnswer | undefined>();

beforeAll(async () => {
  h = await new HostileSite((r) => (answers.get(r.op) ?? (() => ({ status: 501, description: 'not here' })))(r)).start();
  [a, b] = [await TestBroker.start(), await TestBroker.start()];
}, 60_000);

afterAll(async () => {
  await h?.stop();
  await killAllBrokers();
});

async function request(broker: TestBroker, op: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const c = await ManagementClient.connect({ host: '127.0.0.1', port: broker.port }, { timeoutMs: 20_000, properties: { 'qpid.ha-admin': true } });
  try {
    return (await c.request(op, 'broker', 'broker', body)) as Record<string, unknown>;
  } finally {
    c.close();
  }
}

async function refusal(p: Promise<unknown>): Promise<TandemError> {
  try {
    await p;
  } catch (err) {
    return err as TandemError;
  }
  throw new Error('expected a refusal');
}

/** What must hold on a broker after any answer: alive, no error logged, dr status positions numbers, a plain queue served. */
async function healthy(broker: TestBroker): Promise<void> {
  expect(broker.alive, `tandemd exited: ${broker.stderr.slice(-2000)}`).toBe(true);
  expect(broker.errorLogLines).toEqual([]);
  for (const row of await drStatus(broker.port)) {
    for (const k of ['applied-position', 'source-position', 'lag-changes', 'epoch'] as const) expect(Number.isSafeInteger((row as unknown as Record<string, unknown>)[k]), `${row.queue} ${k}`).toBe(true);
  }
  await send(broker.port, 'plain', ['ping']);
  expect(await receive(broker.port, 'plain', 1, { timeoutMs: 10_000 })).toEqual(['ping']);
}

const row = (queue: string, fields: Record<string, unknown> = {}) => ({ queue, state: 'active', epoch: 2, since: 5, divergence: 0, mode: 'enqueue-and-dequeue', switching: false, exchanges: '*', ...fields });

describe('DR answers - a fenced source asking a hostile other site how its switchover ended', () => {
  // Per queue, the row the other site answers with; on the old code each followed or unfenced.
  const rows: Record<string, Record<string, unknown>> = {
    f0: { since: Number.NaN },
    f1: { since: -5 },
    f2: { since: '7' },
    f3: { since: 2n ** 60n },
    f4: { since: undefined },
    f5: { state: 'weird' },
    f6: { state: undefined, switching: undefined },
    f7: { state: 'passive', switching: 'false' },
    f8: { epoch: 1.5 },
    f9: { held: [3, 1], floor: 10 },
    f10: { mode: 'bogus' },
    f11: { exchanges: { a: 1 } },
  };
  const queues = Object.keys(rows);
  const lastErrors = async () => Object.fromEntries((await drStatus(a.port)).filter((r) => queues.includes(r.queue)).map((r) => [r.queue, r['last-error']]));
  const fencedStill = async () => {
    for (const q of queues) expect(await drRowOf(a.port, q), q).toMatchObject({ role: 'fenced', epoch: 2 });
  };
  /** Answer DR-PEER-STATE (held: the fenced side's question) with `body`, and wait until some queue's last-error matches. */
  async function phase(body: HostileAnswer, seen: RegExp): Promise<void> {
    answers.set('DR-PEER-STATE', (r) => (r.body.held === true || r.body.held === 'true' ? body : { body: { queues: [] } }));
    await waitFor(async () => Object.values(await lastErrors()).some((e) => e !== null && seen.test(e)), { timeout: 15_000, interval: 200, name: `answer ${seen} taken` }).catch(async (err: Error) => {
      throw new Error(`${err.message}; alive ${a.alive}; last errors ${JSON.stringify(await lastErrors().catch(() => 'unreadable'))}`);
    });
    await fencedStill();
  }

  beforeAll(async () => {
    const c = await ManagementClient.connect({ host: '127.0.0.1', port: a.port }, { timeoutMs: 20_000, properties: { 'qpid.ha-admin': true } });
    try {
      for (const q of [...queues, 'plain']) await c.request('CREATE', 'queue', q, { durable: true });
    } finally {
      c.close();
    }
    for (const q of queues) await send(a.port, q, [`${q}-m`]);
    // The coordinating secondary is the test; the other site named to A is the hostile one (it answers A's reach check).
    answers.set('DR-PEER-STATE', () => ({ body: { queues: [] } }));
    await request(a, 'DR-FENCE', { queues: JSON.stringify(queues.map((queue) => ({ queue, mode: 'enqueue-and-dequeue', epoch: 1 }))), peer: h.url, run: randomUUID() });
    await fencedStill();
  }, 60_000);

  it('a garbled row leaves its queue fenced (no NaN position, no unfence), each saying why', async () => {
    answers.set('DR-PEER-STATE', (r) => (r.body.held === true ? { body: { queues: queues.map((q) => row(q, rows[q])) } } : { body: { queues: [] } }));
    await waitFor(async () => Object.values(await lastErrors()).every((e) => e !== null && /answered DR-PEER-STATE with/.test(e)), { timeout: 15_000, interval: 200, name: 'every row refused' }).catch(async (err: Error) => {
      throw new Error(`${err.message}; alive ${a.alive}; rows ${JSON.stringify(await drStatus(a.port).catch(() => 'unreadable'))}`);
    });
    const errors = await lastErrors();
    expect(errors.f0).toMatch(/since: NaN \(not a log position\) for queue "f0"/);
    expect(errors.f3).toMatch(/since: /);
    expect(errors.f5).toMatch(/state: "weird"/);
    expect(errors.f7).toMatch(/switching: "false"/);
    expect(errors.f8).toMatch(/epoch: 1.5/);
    expect(errors.f9).toMatch(/held \[3,1\] and floor 10/);
    await fencedStill();
    for (const q of queues) expect(await depthOf(a.port, q), q).toBe(1);
    await healthy(a);
  }, 60_000);

  it('a garbled answer (no map, no list, null rows, a toString key, 20,000 rows, nesting, a huge refusal) leaves every queue fenced and the broker up', async () => {
    let nested: unknown = 'x';
    for (let i = 0; i < 25; i++) nested = [nested];
    await phase({ body: 'garbage' }, /an answer that is no map \("garbage"\)/);
    await phase({ body: { queues: 5 } }, /queues: 5 \(not a list/);
    await phase({ body: { queues: [null] } }, /a row null for no queue asked/);
    await phase({ body: { queues: [{ queue: { toString: 5 } }] } }, /a row \{"queue":\{"toString":5\}\} for no queue asked/);
    await phase({ body: { queues: [row('f0'), row('f0')] } }, /two rows for queue "f0"/);
    await phase({ body: { queues: Array.from({ length: 20_000 }, (_, i) => ({ queue: `x${i}` })) } }, /queues: \[\{"queue":"x0"\}/);
    await phase({ body: { queues: [nested] } }, /a row \[\[\[/);
    await phase({ status: 500, description: `z${'z'.repeat(10_000)}` }, /zzz\.\.\. \(10001 characters\)/);
    await healthy(a);
  }, 120_000);

  it('a well-formed answer still ends the fence (not switching, not active there: serve again)', async () => {
    answers.set('DR-PEER-STATE', () => ({ body: { queues: queues.map((q) => row(q, { state: 'none', epoch: 1, since: 0, mode: null, exchanges: null })) } }));
    await waitFor(async () => (await drStatus(a.port)).every((r) => !queues.includes(r.queue) || (r.state === 'active' && (r as unknown as { epoch: number }).epoch === 1)), { timeout: 15_000, interval: 200, name: 'unfenced' });
    await healthy(a);
    await send(a.port, 'f0', ['after']);
  }, 60_000);
});

describe('DR answers - reattach against a hostile site', () => {
  const cases: Array<[string, HostileAnswer, RegExp]> = [
    ['since NaN', { body: { queues: [row('r', { since: Number.NaN })] } }, /since: NaN/],
    ['divergence -1', { body: { queues: [row('r', { divergence: -1 })] } }, /divergence: -1/],
    ['divergence a string', { body: { queues: [row('r', { divergence: '3' })] } }, /divergence: "3"/],
    ['epoch 2^60', { body: { queues: [row('r', { epoch: 2n ** 60n })] } }, /epoch: /],
    ['epoch 2^32 + 1', { body: { queues: [row('r', { epoch: 2 ** 32 + 1 })] } }, /epoch: 4294967297/],
    ['epoch 0', { body: { queues: [row('r', { epoch: 0 })] } }, /epoch: 0/],
    ['no mode', { body: { queues: [row('r', { mode: null })] } }, /mode: null/],
    ['held without a floor', { body: { queues: [row('r', { held: [1, 2] })] } }, /held \[1,2\] and floor undefined/],
    ['a state of another spelling', { body: { queues: [row('r', { state: 'activated' })] } }, /state: "activated"/],
    ['queues a string', { body: { queues: 'r' } }, /queues: "r"/],
    ['two rows', { body: { queues: [row('r'), row('r', { epoch: 3 })] } }, /not a list of at most 1 rows/],
    ['a row for another queue', { body: { queues: [row('other')] } }, /for no queue asked/],
    ['no map', { body: null }, /no map \(null\)/],
  ];

  beforeAll(async () => {
    const c = await ManagementClient.connect({ host: '127.0.0.1', port: a.port }, { timeoutMs: 20_000, properties: { 'qpid.ha-admin': true } });
    try {
      await c.request('CREATE', 'queue', 'r', { durable: true });
    } finally {
      c.close();
    }
    await send(a.port, 'r', ['r1', 'r2', 'r3']);
  }, 30_000);

  it('each garbled answer is refused before anything changes', async () => {
    for (const [what, answer, why] of cases) {
      answers.set('DR-PEER-STATE', () => answer);
      const err = await refusal(request(a, 'DR-REATTACH', { queues: 'r', source: h.url }));
      expect(err.code, what).toBe('TANDEM_ERR_PRECONDITION');
      expect(err.message, what).toMatch(/answered DR-PEER-STATE with/);
      expect(err.message, what).toMatch(why);
      expect((await drStatus(a.port)).find((r) => r.queue === 'r'), what).toBeUndefined();
      expect(await depthOf(a.port, 'r'), what).toBe(3);
    }
    await healthy(a);
  }, 120_000);

  it('a well-formed answer reattaches (the validated path still works)', async () => {
    answers.set('DR-PEER-STATE', () => ({ body: { queues: [row('r', { divergence: 0, since: 7 })] } }));
    const out = await request(a, 'DR-REATTACH', { queues: 'r', source: h.url });
    expect(out.reattached).toEqual(['r']);
    const r = await drRowOf(a.port, 'r');
    expect(r, JSON.stringify(r)).toMatchObject({ role: 'passive copy', epoch: 2, 'applied-position': 7 });
    await healthy(a);
  }, 60_000);
});

describe('DR answers - a switchover whose old source answers garbage', () => {
  const fenceCases: Array<[string, HostileAnswer]> = [
    ['lsn null', { body: { fenced: ['sw'], lsn: null } }],
    ["lsn '0'", { body: { fenced: ['sw'], lsn: '0' } }],
    ['lsn -1', { body: { fenced: ['sw'], lsn: -1 } }],
    ['lsn 0', { body: { fenced: ['sw'], lsn: 0 } }],
    ['lsn 2^60', { body: { fenced: ['sw'], lsn: 2n ** 60n } }],
    ['lsn 1.5', { body: { fenced: ['sw'], lsn: 1.5 } }],
    ['no lsn', { body: { fenced: ['sw'] } }],
    ['fenced names nothing', { body: { fenced: [], lsn: 50 } }],
    ['no fenced', { body: { lsn: 50 } }],
    ['fenced a string', { body: { fenced: 'sw', lsn: 50 } }],
    ['a list', { body: [1, 2] }],
  ];
  const switchover = () => request(b, 'DR-SWITCHOVER', { queues: 'sw', timeout: 1500, 'reverse-source': b.url });

  beforeAll(async () => {
    const c = await ManagementClient.connect({ host: '127.0.0.1', port: b.port }, { timeoutMs: 20_000, properties: { 'qpid.ha-admin': true } });
    try {
      for (const q of ['sw', 'plain']) await c.request('CREATE', 'queue', q, { durable: true });
    } finally {
      c.close();
    }
    // B becomes a passive copy of the hostile site at its position 100 (as an old source told to follow it):
    // the drain of a switchover against it is then done for any fence position up to 100.
    answers.set('DR-PEER-STATE', () => ({ body: { queues: [row('sw', { state: 'passive', epoch: 1, switching: true })] } }));
    await request(b, 'DR-FENCE', { queues: JSON.stringify([{ queue: 'sw', mode: 'enqueue-and-dequeue', epoch: 1 }]), peer: h.url, run: randomUUID() });
    await request(b, 'DR-FOLLOW', { queues: JSON.stringify([{ queue: 'sw', mode: 'enqueue-and-dequeue', epoch: 2, from: 100 }]), source: h.url });
    expect(await drRowOf(b.port, 'sw')).toMatchObject({ role: 'passive copy', epoch: 2, 'applied-position': 100 });
  }, 60_000);

  it('a garbled DR-FENCE answer abandons the switchover: nothing activated, the source told to unfence', async () => {
    answers.set('DR-UNFENCE', () => ({ body: { unfenced: ['sw'] } }));
    for (const [what, answer] of fenceCases) {
      answers.set('DR-FENCE', () => answer);
      const unfences = h.count('DR-UNFENCE');
      const err = await refusal(switchover());
      expect(err.message, what).toMatch(/switchover of sw abandoned: the source did not fence the queues: the other DR site .* answered DR-FENCE with .*; nothing was activated here, both sites are as they were/);
      expect(h.count('DR-UNFENCE'), what).toBe(unfences + 1);
      expect(await drRowOf(b.port, 'sw'), what).toMatchObject({ role: 'passive copy', epoch: 2 });
    }
    // An unfence answer that is not one is not reported as done.
    answers.set('DR-FENCE', () => ({ body: { fenced: ['sw'] } }));
    answers.set('DR-UNFENCE', () => ({ body: { unfenced: 'sw' } }));
    const err = await refusal(switchover());
    expect(err.message).toMatch(/could not be told to unfence \(it answered DR-UNFENCE with unfenced: "sw", which is no list of queue names\)/);
    expect(await drRowOf(b.port, 'sw')).toMatchObject({ role: 'passive copy', epoch: 2 });
    await healthy(b);
  }, 120_000);

  it('a garbled DR-FOLLOW answer is not reported as the old source following', async () => {
    answers.set('DR-FENCE', () => ({ body: { fenced: ['sw'], lsn: 50 } }));
    answers.set('DR-FOLLOW', () => ({ body: { following: 'all of them' } }));
    const out = await switchover();
    expect(out).toMatchObject({ switched: ['sw'], 'fence-position': 50, 'old-source-following': false });
    expect(String(out.note)).toMatch(/DR-FOLLOW with following: "all of them"/);
    expect(await drRowOf(b.port, 'sw')).toMatchObject({ role: 'activated', epoch: 3 });
    await healthy(b);
  }, 60_000);

  it('an old source answering DR-DEMOTE without naming the queue is told again until it does', async () => {
    await request(b, 'DR-ADD', { queue: 'act', source: h.url, mode: 'enqueue-and-dequeue' });
    answers.set('DR-DEMOTE', () => ({ body: {} }));
    const before = h.count('DR-DEMOTE');
    await request(b, 'DR-ACTIVATE', { queues: 'act' });
    await waitFor(() => h.count('DR-DEMOTE') >= before + 3, { timeout: 20_000, interval: 100, name: 'told three times' });
    expect((await drRowOf(b.port, 'act'))['last-error']).toMatch(/has not yet answered that it stops serving/);
    answers.set('DR-DEMOTE', () => ({ body: { demoted: ['act'], already: [] } }));
    await waitFor(async () => (await drRowOf(b.port, 'act'))['last-error'] === null, { timeout: 20_000, interval: 200, name: 'told' });
    await healthy(b);
  }, 60_000);
});
