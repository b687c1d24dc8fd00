// What the round trip's peer operations (DR-FENCE, DR-UNFENCE, DR-FOLLOW, DR-PEER-STATE,
// and DR-DEMOTE, DR-REATTACH) take from an admin who sends them hostile bodies: `queues`
// that is no list, entries of the wrong shape, held id ranges unsorted, overlapping,
// negative, fractional, past 2^53, of odd length or over the cap, floors and exchange
// filters of the wrong type or size, run ids that are no uuid, epochs out of range,
// numbers as strings, `__proto__` and `constructor` keys, nesting too deep to write back,
// huge strings. A hand-written table names the cases, then a seeded mutation of valid
// bodies. Each is refused with the client's error (never an internal one); nothing
// changes (roles, epochs, filters, kept passwords); the broker logs no error and serves
// on. Half of it runs with site A fenced by a switchover whose other site it cannot
// reach, where a request taken by mistake would unfence A or make it follow.
//
// Found on the old code: a run id that is no uuid was taken as "no run" and unfenced a
// queue any run had fenced; a floor without held ranges was ignored and A followed; a
// refused DR-FOLLOW or DR-DEMOTE kept the password of its URL (dr-credentials written);
// an epoch of 2^53 - 1 demoted A (epoch + 1 is no exact integer); a queues entry nested
// 5,000 deep was an internal error (writing it back overflowed the stack); DR-PEER-STATE
// answered `queues` of any type, and two entries for one queue were both taken; a
// DR-ACTIVATE whose `queues` was a number or a map activated every passive copy.
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import { TandemError } from '../../src/broker/errors.js';
import { prng } from '../../src/util/prng.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { drFlush, drRowOf, range, receive, send } from './helpers.js';
import { relay, type Relay } from './relay.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x5eed);
const MUTATIONS = 300;
/** The refusals a client's mistake may get. */
const CLIENT_ERRORS = ['TANDEM_ERR_INVALID_ARGUMENT', 'TANDEM_ERR_NOT_FOUND', 'TANDEM_ERR_PRECONDITION'];

let a: TestBroker;
let b: TestBroker;
/** Site A reaches B through it; refused once A is fenced, so A cannot ask how the switchover ended. */
let toB: Relay;
let toA: ManagementClient;
let toBMgmt: ManagementClient;

beforeAll(async () => {
  [a, b] = [await TestBroker.start(), await TestBroker.start()];
  toA = await ManagementClient.connect({ host: '127.0.0.1', port: a.port }, { timeoutMs: 20_000, properties: { 'qpid.ha-admin': true } });
  toBMgmt = await ManagementClient.connect({ host: '127.0.0.1', port: b.port }, { timeoutMs: 20_000, properties: { 'qpid.ha-admin': true } });
  await toA.request('CREATE', 'queue', 'orders', { durable: true });
  await send(a.port, 'orders', range('m', 0, 20));
  await toBMgmt.request('DR-ADD', 'broker', 'broker', { queue: 'orders', source: a.url, mode: 'enqueue-and-dequeue' });
  await drFlush(a.port, b.port);
  toB = await relay(b.port);
}, 60_000);

afterAll(async () => {
  toA?.close();
  toBMgmt?.close();
  toB?.close();
  await killAllBrokers();
});

/** What a request must not change: each site's roles, epochs, modes, sources and filters, the queues, the kept passwords. */
async function state(): Promise<string> {
  const sites = await Promise.all(
    [toA, toBMgmt].map(async (c, i) => {
      const rows = ((await c.request('DR-STATUS', 'broker', 'broker', {})) as { queues: Array<Record<string, unknown>> }).queues;
      const list = ((await c.request('DR-LIST', 'broker', 'broker', {})) as { queues: unknown[] }).queues;
      const queues = ((await c.request('QUERY', 'queue', undefined, {})) as unknown[]).length;
      const file = join([a, b][i]!.dataDir, 'dr-credentials');
      return {
        roles: rows.map((r) => [r.queue, r.role, r.state, r.epoch, r.source, r.mode, r['divergence-point'], r.quarantined]),
        list,
        queues,
        credentials: existsSync(file) ? readFileSync(file, 'utf8') : null,
      };
    }),
  );
  return JSON.stringify(sites);
}

type Body = Record<string, unknown>;
interface Case {
  op: string;
  body: Body;
  why: string;
  /** Sent to site B (its passive copy) instead of A. */
  toB?: boolean;
}

/** Send to site A; the refusal's code, or 'accepted'. Anything but an answer (a lost connection, no reply) throws. */
async function ask(c: Case): Promise<string> {
  try {
    await (c.toB ? toBMgmt : toA).request(c.op, 'broker', 'broker', c.body);
    return 'accepted';
  } catch (err) {
    if (!(err instanceof TandemError)) throw new Error(`${c.op} (${c.why}): no answer: ${(err as Error).message}`);
    return err.code;
  }
}

/** Send each case; each must be refused with a client's error and change nothing. Returns the codes seen. */
async function refusedUnchanged(cases: Case[]): Promise<Map<string, number>> {
  const before = await state();
  const codes = new Map<string, number>();
  const wrong: string[] = [];
  for (const c of cases) {
    const code = await ask(c);
    codes.set(code, (codes.get(code) ?? 0) + 1);
    if (!CLIENT_ERRORS.includes(code)) wrong.push(`${c.op} (${c.why}): ${code}`);
    const after = await state();
    if (after !== before) wrong.push(`${c.op} (${c.why}) changed the state:\n  ${before}\n  ${after}`);
    if (wrong.length >= 5) break;
  }
  expect(wrong).toEqual([]);
  return codes;
}

/** A body with a key set as an own property (as it arrives on the wire), even '__proto__'. */
function withKey(body: Body, key: string, value: unknown): Body {
  const out = { ...body };
  Object.defineProperty(out, key, { value, enumerable: true, configurable: true, writable: true });
  return out;
}

const deep = (n: number): string => `[${'['.repeat(n)}${']'.repeat(n)}]`;
const huge = 'x'.repeat(100_000);
/** 10,001 ranges: one over the cap. */
const overCap = Array.from({ length: 20_002 }, (_, i) => i * 2);

const fenceEntry = { queue: 'orders', mode: 'enqueue-and-dequeue', epoch: 1 };
const list = (...entries: unknown[]): string => JSON.stringify(entries);

/** Structurally bad `queues` for any of the JSON-list operations. */
const BAD_LISTS: Array<[unknown, string]> = [
  ['{"queue":"orders","epoch":1}', 'an object, not a list'],
  ['"orders"', 'a JSON string'],
  ['42', 'a JSON number'],
  ['null', 'JSON null'],
  ['not json', 'not JSON'],
  ['', 'empty'],
  ['[', 'cut short'],
  [42, 'an AMQP number'],
  [true, 'an AMQP boolean'],
  [{ queue: 'orders' }, 'an AMQP map'],
  ['[]', 'an empty list'],
  ['[null]', 'a null entry'],
  ['[42]', 'a number entry'],
  ['["orders"]', 'a name, not an entry'],
  ['[[]]', 'a list entry'],
  ['[{}]', 'an empty entry'],
  [deep(5000), 'an entry nested 5,000 deep'],
  [JSON.stringify(Array.from({ length: 10_001 }, () => fenceEntry)), '10,001 entries'],
  [`[${JSON.stringify(withKey({}, '__proto__', fenceEntry))}]`, 'the entry under __proto__'],
  [`[${JSON.stringify(withKey({}, 'constructor', fenceEntry))}]`, 'the entry under constructor'],
];

describe('DR peer operations - hostile bodies', () => {
  it('DR peer operations - site A serving: every hostile request is refused with the client error, nothing changes', async () => {
    const run = randomUUID();
    const fence = (queues: unknown, extra: Body = {}): Body => ({ queues, peer: b.url, run, ...extra });
    const cases: Case[] = [
      ...BAD_LISTS.map(([q, why]) => ({ op: 'DR-FENCE', body: fence(q), why })),
      ...BAD_LISTS.map(([q, why]) => ({ op: 'DR-UNFENCE', body: { queues: q, run }, why })),
      ...BAD_LISTS.map(([q, why]) => ({ op: 'DR-FOLLOW', body: { queues: q, source: b.url }, why })),
      ...BAD_LISTS.map(([q, why]) => ({ op: 'DR-DEMOTE', body: { queues: q }, why })),
      // Entries of a good list, one field wrong.
      ...[0, -1, 1.5, '1', null, true, [], {}, 2 ** 53, 2 ** 53 - 1, 1e308, 2 ** 32 + 1].map((epoch) => ({ op: 'DR-FENCE', body: fence(list({ ...fenceEntry, epoch })), why: `epoch ${JSON.stringify(epoch)}` })),
      ...['mirror', '', 42, null, 'ENQUEUE-ONLY', {}].map((mode) => ({ op: 'DR-FENCE', body: fence(list({ ...fenceEntry, mode })), why: `mode ${JSON.stringify(mode)}` })),
      ...['', 42, null, [], {}, ['orders']].map((queue) => ({ op: 'DR-FENCE', body: fence(list({ ...fenceEntry, queue })), why: `queue ${JSON.stringify(queue)}` })),
      ...['__proto__', 'constructor', huge].map((queue) => ({ op: 'DR-FENCE', body: fence(list({ ...fenceEntry, queue })), why: `queue '${queue.slice(0, 20)}'` })),
      { op: 'DR-FENCE', body: fence(list(fenceEntry, { ...fenceEntry, mode: 'enqueue-only' })), why: 'one queue named twice' },
      // The run: a uuid or nothing (taken as none, it would be any run's).
      ...['', 'x', '-'.repeat(36), 'g'.repeat(36), `${randomUUID()}x`, `x${randomUUID().slice(1)}z`, 42, null, true, [], {}, huge].map((r) => ({ op: 'DR-FENCE', body: fence(list(fenceEntry), { run: r }), why: `run ${JSON.stringify(r).slice(0, 40)}` })),
      ...['', '-'.repeat(36), 42, null, {}, huge].map((r) => ({ op: 'DR-UNFENCE', body: { queues: list({ queue: 'orders', epoch: 2 }), run: r }, why: `run ${JSON.stringify(r).slice(0, 40)}` })),
      // The peer this site would follow and ask.
      ...['', 42, null, [], {}, '127.0.0.1:0', '127.0.0.1:99999', ':5672', 'a b:1', '127.0.0.1:1'].map((peer) => ({ op: 'DR-FENCE', body: fence(list(fenceEntry), { peer }), why: `peer ${JSON.stringify(peer).slice(0, 40)}` })),
      // Not fenced here: a follow must not change anything, nor keep its URL's password.
      { op: 'DR-FOLLOW', body: { queues: list({ ...fenceEntry, epoch: 2, from: 0 }), source: 'dr/kept-by-mistake@127.0.0.1:1' }, why: 'refused, with a password in its URL' },
      // DR-DEMOTE: a site that serves must not be demoted by a bad request, nor keep a password from one.
      ...[0, '2', 1.5, null, 2 ** 53, 2 ** 53 - 1, 2 ** 32 + 1].map((epoch) => ({ op: 'DR-DEMOTE', body: { queues: list({ queue: 'orders', epoch }) }, why: `demote epoch ${JSON.stringify(epoch)}` })),
      { op: 'DR-DEMOTE', body: { queues: 'orders', mode: 'mirror', peer: 'dr/kept-by-demote@127.0.0.1:2' }, why: 'demote with a bad mode and a password' },
      { op: 'DR-DEMOTE', body: { queues: '__proto__', peer: 'dr/kept-by-demote@127.0.0.1:2' }, why: 'demote of no queue, with a password' },
      ...[42, {}, '', ',', [], [{}]].map((queues) => ({ op: 'DR-DEMOTE', body: { queues }, why: `demote queues ${JSON.stringify(queues)}` })),
      ...[42, {}, [], 'a b:1', '127.0.0.1:0'].map((peer) => ({ op: 'DR-DEMOTE', body: { queues: 'orders', peer }, why: `demote peer ${JSON.stringify(peer)}` })),
      // DR-REATTACH: names, a source, a password.
      ...[42, {}, '', [], ['__proto__']].map((queues) => ({ op: 'DR-REATTACH', body: { queues, source: b.url }, why: `reattach queues ${JSON.stringify(queues)}` })),
      ...[42, '', null, huge, 'dr/kept-by-mistake@127.0.0.1:1'].map((source) => ({ op: 'DR-REATTACH', body: { queues: 'orders', source }, why: `reattach source ${JSON.stringify(source).slice(0, 40)}` })),
      { op: 'DR-REATTACH', body: { queues: 'orders', source: b.url, password: 42 }, why: 'reattach password a number' },
      // DR-PEER-STATE answers what it is asked about, and only that.
      ...[42, {}, [], '', ',', [42], [''], [{}], null, true, Array.from({ length: 10_001 }, (_, i) => `q${i}`)].map((queues) => ({
        op: 'DR-PEER-STATE',
        body: { queues },
        why: `peer-state queues ${JSON.stringify(queues).slice(0, 40)}`,
      })),
      ...['yes', 42, {}, [], 'TRUE', null].map((held) => ({ op: 'DR-PEER-STATE', body: { queues: 'orders', held }, why: `peer-state held ${JSON.stringify(held)}` })),
      // DR-ACTIVATE on B, whose copy is passive: a list it cannot read is no "every queue" (on the old code 42 activated them all).
      ...[42, {}, true, [42], [''], [{}], Array.from({ length: 10_001 }, (_, i) => `q${i}`)].map((queues) => ({
        op: 'DR-ACTIVATE',
        body: { queues },
        why: `activate queues ${JSON.stringify(queues).slice(0, 40)}`,
        toB: true,
      })),
    ];
    const codes = await refusedUnchanged(cases);
    console.log(`hostile peer operations, A serving: ${cases.length} refused ${JSON.stringify(Object.fromEntries(codes))}`);
    expect(a.errorLogLines.slice(0, 3)).toEqual([]);
    expect(b.errorLogLines.slice(0, 3)).toEqual([]);
  }, 120_000);

  it('DR peer operations - site A fenced: hostile unfences, follows and fences are refused (seeded mutation too), A stays fenced', async () => {
    const run = randomUUID();
    // A fenced by a run whose site it reaches through the relay, then cut off: A cannot ask how it ended.
    await toA.request('DR-FENCE', 'broker', 'broker', { queues: list(fenceEntry), peer: toB.url, run });
    toB.refuseNew();
    expect((await drRowOf(a.port, 'orders')).role).toBe('fenced');

    const followEntry = { queue: 'orders', mode: 'enqueue-and-dequeue', epoch: 2, from: 0, floor: 30, held: [0, 9, 12, 19], exchanges: '*' };
    const follow = (entry: Body, source: unknown = b.url): Body => ({ queues: list(entry), source });
    const held: Array<[unknown, string]> = [
      [[5, 6, 1, 2], 'unsorted'],
      [[1, 5, 3, 8], 'overlapping'],
      [[5, 1], 'high below low'],
      [[-1, 2], 'negative'],
      [[null, 2], 'NaN (JSON null)'],
      [[1.5, 2], 'not an integer'],
      [[1, 2 ** 53 + 2], 'above 2^53'],
      [[1, 2, 3], 'odd length'],
      [overCap, 'over the range cap'],
      [['1', '2'], 'numbers as strings'],
      [[[1, 2]], 'nested'],
      [{}, 'an object'],
      ['0-9', 'a string'],
      [true, 'a boolean'],
      [null, 'null'],
    ];
    const cases: Case[] = [
      // An unfence whose run is no uuid is no run's: refused, the fence stays.
      ...['', 'x', '-'.repeat(36), 'g'.repeat(36), `${run}x`, 42, null, true, {}, [], huge].map((r) => ({ op: 'DR-UNFENCE', body: { queues: list({ queue: 'orders', epoch: 2 }), run: r }, why: `unfence run ${JSON.stringify(r).slice(0, 40)}` })),
      ...['2', 2.5, 0, null, 2 ** 53].map((epoch) => ({ op: 'DR-UNFENCE', body: { queues: list({ queue: 'orders', epoch }), run }, why: `unfence epoch ${JSON.stringify(epoch)}` })),
      { op: 'DR-UNFENCE', body: { queues: `[${JSON.stringify(withKey({}, '__proto__', { queue: 'orders', epoch: 2 }))}]`, run }, why: 'unfence entry under __proto__' },
      ...held.map(([h, why]) => ({ op: 'DR-FOLLOW', body: follow({ ...followEntry, held: h }), why: `held ${why}` })),
      ...['30', -1, 1.5, null, [30], {}, 2 ** 53, true].map((floor) => ({ op: 'DR-FOLLOW', body: follow({ ...followEntry, floor }), why: `floor ${JSON.stringify(floor)}` })),
      ...['30', 'abc', -1, 30].map((floor) => ({ op: 'DR-FOLLOW', body: follow({ ...followEntry, floor, held: undefined }), why: `floor ${JSON.stringify(floor)} without held ranges` })),
      ...[42, null, {}, [], true, ' a', 'a,,b', 'a, b', `${'x'.repeat(300)}`, `a,${'y'.repeat(256)}`].map((exchanges) => ({
        op: 'DR-FOLLOW',
        body: follow({ ...followEntry, exchanges }),
        why: `exchanges ${JSON.stringify(exchanges).slice(0, 40)}`,
      })),
      ...[-1, '0', 1.5, null, 2 ** 53, {}, true].map((from) => ({ op: 'DR-FOLLOW', body: follow({ ...followEntry, from }), why: `from ${JSON.stringify(from)}` })),
      ...['', 42, null, {}, [], '127.0.0.1:0', 'a b:1'].map((source) => ({ op: 'DR-FOLLOW', body: follow(followEntry, source), why: `source ${JSON.stringify(source).slice(0, 40)}` })),
      { op: 'DR-FOLLOW', body: follow({ ...followEntry, epoch: 3 }, 'dr/kept-by-mistake@127.0.0.1:1'), why: 'another epoch, with a password in its URL' },
      { op: 'DR-FOLLOW', body: { queues: list(followEntry, followEntry), source: b.url }, why: 'one queue named twice' },
      // A fence that names no run's uuid does not take this run's fence over.
      ...['', '-'.repeat(36), 42].map((r) => ({ op: 'DR-FENCE', body: { queues: list(fenceEntry), peer: toB.url, run: r }, why: `fence again, run ${JSON.stringify(r)}` })),
      // Demote of a fenced queue to an absurd epoch.
      { op: 'DR-DEMOTE', body: { queues: list({ queue: 'orders', epoch: 2 ** 53 - 1 }) }, why: 'demote to epoch 2^53 - 1' },
    ];
    // The seeded part: valid bodies with one to three fields replaced by values no peer sends.
    const random = prng(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
    const pools: Record<string, unknown[]> = {
      queue: ['', 42, null, true, [], {}, ['orders']],
      mode: ['mirror', '', 42, null, 'ENQUEUE-ONLY', {}],
      epoch: [0, -1, 1.5, '2', null, 2 ** 53, 1e308, true, [], {}, 2 ** 32 + 1],
      from: [-1, 1.5, '0', null, 2 ** 53, {}, true],
      held: held.map(([h]) => h),
      floor: ['30', -1, 1.5, null, {}, [], 2 ** 53],
      exchanges: [42, null, {}, [], ' a', 'a,,b', 'x'.repeat(300), true],
      run: ['', 'x', '-'.repeat(36), 42, null, {}, [], huge],
      source: ['', 42, null, {}, [], '127.0.0.1:0', '127.0.0.1:99999', ':5672', 'a b:1'],
      held_flag: ['yes', 42, {}, [], 'TRUE', null],
      names: [42, {}, [], '', ',', [42], [''], null],
    };
    const valid: Array<{ op: string; entry?: Body; top: Body }> = [
      { op: 'DR-UNFENCE', entry: { queue: 'orders', epoch: 2 }, top: { run } },
      { op: 'DR-FOLLOW', entry: followEntry, top: { source: b.url } },
      { op: 'DR-FENCE', entry: fenceEntry, top: { peer: toB.url, run } },
      { op: 'DR-PEER-STATE', top: { queues: 'orders', held: true } },
      { op: 'DR-DEMOTE', entry: { queue: 'orders', epoch: 2 }, top: {} },
    ];
    for (let i = 0; i < MUTATIONS; i++) {
      const base = pick(valid);
      const entry: Body = { ...(base.entry ?? {}) };
      let top: Body = { ...base.top };
      /** A `queues` no entry's field makes: the entry hidden under a key, named twice, or nested. */
      let queues: string | undefined;
      const what: string[] = [];
      for (let k = 1 + Math.floor(random() * 3); k > 0; k--) {
        const fields = [...Object.keys(entry), ...Object.keys(top).map((f) => `.${f}`), ...(base.entry ? ['!proto', '!dup', '!nest', '!string'] : [])];
        const f = pick(fields);
        what.push(f);
        if (f === '!proto') queues = `[${JSON.stringify(withKey({}, pick(['__proto__', 'constructor']), entry))}]`;
        else if (f === '!dup') queues = list(entry, entry);
        else if (f === '!nest') queues = deep(1000 + Math.floor(random() * 9000));
        else if (f === '!string') {
          // A number of the entry as a string (every valid entry has an epoch).
          const key = pick(Object.keys(entry).filter((key) => typeof entry[key] === 'number'));
          if (key !== undefined) entry[key] = String(entry[key]);
          else queues = list({ ...entry, epoch: '2' });
        } else if (f.startsWith('.')) {
          const key = f.slice(1);
          top = withKey(top, key, pick(key === 'peer' ? pools.source! : key === 'queues' ? pools.names! : key === 'held' ? pools.held_flag! : pools[key]!));
        } else entry[f] = pick(pools[f]!);
      }
      const body = base.entry ? { ...top, queues: queues ?? list(entry) } : top;
      cases.push({ op: base.op, body, why: `mutation ${i} (seed ${SEED}): ${what.join(' ')}` });
    }
    const codes = await refusedUnchanged(cases);
    console.log(`hostile peer operations, A fenced: ${cases.length} refused ${JSON.stringify(Object.fromEntries(codes))}`);
    expect((await drRowOf(a.port, 'orders')).role).toBe('fenced');

    // The run's own unfence ends the fence: A serves again, B copies it.
    expect(((await toA.request('DR-UNFENCE', 'broker', 'broker', { queues: list({ queue: 'orders', epoch: 2 }), run })) as { unfenced: string[] }).unfenced).toEqual(['orders']);
    await waitFor(async () => (await send(a.port, 'orders', ['after']).then(() => true)), { timeout: 10_000, name: 'A takes publishes again' });
    await drFlush(a.port, b.port);
    expect((await receive(a.port, 'orders', 21)).slice(-1)).toEqual(['after']);
    expect(a.alive && b.alive).toBe(true);
    expect(a.errorLogLines.slice(0, 3)).toEqual([]);
    expect(b.errorLogLines.slice(0, 3)).toEqual([]);
  }, 180_000);
});
