// AMQP 1.0 3.4.5: a modified outcome's message-annotations are merged into the
// message's own when it is redelivered (the outcome's keys replace same-named ones),
// on a real tandemd, with Debian's python3-qpid-proton as consumer and decoder: the
// next consumer and a browser get the merged annotations and the raised
// delivery-count; two outcomes merge; a message without message-annotations gets the
// section in its place in the section order; a body paged out to the journal keeps
// them; outcomes over the bound or with keys of the wrong type are handled as documented.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';
import { manage } from '../helpers/tandem-cli.js';

interface Got {
  body: string | number;
  delivery_count: number;
  annotations: Record<string, unknown>;
  sections: number[];
}
interface Out {
  ok: boolean;
  error?: string;
  got?: Got;
}

/** One command of test/interop/py/annotations.py. */
function proton(port: number, cmd: string, address: string, arg: object = {}): Promise<Out> {
  return runPython<Out>('annotations.py', [cmd, `127.0.0.1:${port}`, address, JSON.stringify(arg)]);
}

/** Modify, then wait until the message is back on its queue (the disposition was taken). */
async function modify(port: number, queue: string, arg: object): Promise<Out> {
  const out = await proton(port, 'modify', queue, arg);
  await waitFor(async () => ((await manage(port, 'READ', 'queue', queue)) as { acquired?: number; depth: number }).acquired === 0, { name: `${queue} released` });
  return out;
}

const HEADER = 0x70;
const DELIVERY_ANNOTATIONS = 0x71;
const MESSAGE_ANNOTATIONS = 0x72;
const PROPERTIES = 0x73;
const APPLICATION_PROPERTIES = 0x74;
const AMQP_VALUE = 0x77;

let broker: TestBroker;

beforeAll(async () => {
  broker = await TestBroker.start();
});

afterAll(async () => {
  await killAllBrokers();
});

describe('modified outcome - message-annotations merged into the redelivered message (3.4.5)', () => {
  it('modified annotations - the next consumer and a browser get the message\'s annotations with the outcome\'s merged over them, and the raised delivery-count', async () => {
    await proton(broker.port, 'send', 'ma.merge', { annotations: { 'x-opt-own': 'own', 'x-opt-replace': 'before' } });
    const first = await modify(broker.port, 'ma.merge', { annotations: { 'x-opt-added': 'a1', 'x-opt-replace': 'after' } });
    expect(first.got).toMatchObject({ delivery_count: 0, annotations: { 'x-opt-own': 'own', 'x-opt-replace': 'before' } });
    const expected = { delivery_count: 1, annotations: { 'x-opt-own': 'own', 'x-opt-replace': 'after', 'x-opt-added': 'a1' }, body: 'hello' };
    // Old code: {x-opt-own, x-opt-replace: before} only.
    expect((await proton(broker.port, 'browse', 'ma.merge')).got).toMatchObject(expected);
    expect((await proton(broker.port, 'receive', 'ma.merge')).got).toMatchObject(expected);
  });

  it('modified annotations - modified twice: both merge, the second outcome\'s keys winning; a message without message-annotations gets the section after delivery-annotations, before properties', async () => {
    await proton(broker.port, 'send', 'ma.twice', { subject: 'subj', instructions: { 'x-opt-da': 'd' }, properties: { app: 'p' } });
    const before = await modify(broker.port, 'ma.twice', { annotations: { 'x-opt-one': 1, 'x-opt-both': 'first' } });
    expect(before.got!.sections).toEqual([HEADER, DELIVERY_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, AMQP_VALUE]);
    const second = await modify(broker.port, 'ma.twice', { annotations: { 'x-opt-two': 2, 'x-opt-both': 'second' } });
    expect(second.got).toMatchObject({ delivery_count: 1, annotations: { 'x-opt-one': 1, 'x-opt-both': 'first' } });
    const got = (await proton(broker.port, 'receive', 'ma.twice')).got!;
    expect(got.annotations).toEqual({ 'x-opt-one': 1, 'x-opt-both': 'second', 'x-opt-two': 2 });
    expect(got.delivery_count).toBe(2);
    expect(got.sections).toEqual([HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, AMQP_VALUE]);
  });

  it('modified annotations - a merge that would hold more than 64 KiB is not kept, all or nothing: the rest of the outcome applies, what was held stays, and it is logged once', async () => {
    const big = 'x'.repeat(40_000);
    await proton(broker.port, 'send', 'ma.big');
    await modify(broker.port, 'ma.big', { annotations: { 'x-opt-first': big } });
    const second = await modify(broker.port, 'ma.big', { annotations: { 'x-opt-second': big, 'x-opt-small': 's' } });
    expect(second.ok).toBe(true);
    const got = (await proton(broker.port, 'receive', 'ma.big')).got!;
    expect(got.delivery_count).toBe(2);
    expect(Object.keys(got.annotations)).toEqual(['x-opt-first']);
    expect((got.annotations['x-opt-first'] as string).length).toBe(40_000);
    expect(broker.stdout + broker.stderr).toMatch(/message-annotations were not kept \(they would make \d+ bytes, over the 65536/);
  });

  it('modified annotations - an outcome whose annotation keys are not symbols (a ulong, a string) is refused by the engine as an invalid field; the message comes back without them', async () => {
    for (const keys of ['ulong', 'string']) {
      const queue = `ma.keys.${keys}`;
      await proton(broker.port, 'send', queue);
      // The outcome's field is of type fields (3.5.7): symbol keys only.
      await proton(broker.port, 'modify', queue, { keys, annotations: keys === 'ulong' ? { '7': 'v' } : { 'x-opt-string': 'v' } });
      await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', queue)) as { acquired?: number }).acquired === 0, { name: `${queue} back` });
      const got = (await proton(broker.port, 'receive', queue)).got!;
      expect(got.annotations).toEqual({});
      // Given back with its link, which counts as delivery-failed.
      expect(got.delivery_count).toBe(1);
    }
    expect(broker.stdout + broker.stderr).toMatch(/amqp:invalid-field/);
  });
});

describe('modified outcome - annotations of a message whose body is paged out', () => {
  it('modified annotations - an annotated message paged out to the journal comes back with its body and annotations', async () => {
    const paging = await TestBroker.start({ args: ['--max-memory', '1MiB'] });
    try {
      await proton(paging.port, 'send', 'ma.paged', { durable: true, size: 300_000 });
      // Not delivery-failed: its count is unchanged, only the annotations differ from the journal's record.
      await modify(paging.port, 'ma.paged', { failed: false, annotations: { 'x-opt-paged': 'kept' } });
      // Non-durable messages cannot be paged: they push the durable one out.
      await proton(paging.port, 'send', 'ma.filler', { size: 300_000, count: 4 });
      await waitFor(async () => ((await manage(paging.port, 'READ', 'broker', undefined)) as Record<string, number>)['paged-messages'] === 1, { name: 'annotated message paged out' });
      const got = (await proton(paging.port, 'receive', 'ma.paged')).got!;
      expect(got).toMatchObject({ body: 300_000, delivery_count: 0, annotations: { 'x-opt-paged': 'kept' } });
    } finally {
      await paging.stop();
    }
  });
});
