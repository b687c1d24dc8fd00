// Link-level conformance (AMQP 1.0 parts 2.6-2.7 and 3.5) against a real tandemd, in
// raw frames where no client library lets a test say exactly what it sends: what the
// broker's answering attach says of its source and target (what is in force, not an
// echo of what was asked), settle modes, outcomes, dispositions over several links,
// aborted and odd transfers, flow and detach.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Composite } from '../../src/amqp/engine/composite.js';
import { Decoder } from '../../src/amqp/engine/decoder.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { AMQP_HEADER, CODE, composite, frame, message, perf, v } from '../helpers/amqp-frames.js';
import { RawPeer } from '../helpers/raw-amqp.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

let broker: TestBroker;

beforeAll(async () => {
  broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
});

afterAll(async () => {
  await killAllBrokers();
});

/** The credit the broker gives a client's sending link (server.ts SENDER_CREDIT). */
const SENDER_CREDIT = 1000;

interface Received {
  name: string | undefined;
  fields: Record<string, unknown>;
  payload: Buffer;
}

/** A raw client with one session (channel 0): it writes frames and reads the broker's, payloads included. */
class Raw {
  private constructor(readonly peer: RawPeer) {}

  static async open(): Promise<Raw> {
    const peer = await RawPeer.connect(broker.port);
    peer.write(AMQP_HEADER, perf.open({ maxFrameSize: 65536 }), perf.begin({ incomingWindow: 0x7fffffff }));
    return new Raw(peer);
  }

  write(...frames: Buffer[]): void {
    this.peer.write(...frames);
  }

  frames(): Received[] {
    const out: Received[] = [];
    for (const f of this.peer.frames()) if (f.body) out.push({ name: f.body.def.name, fields: f.body.fields, payload: f.payload });
    return out;
  }

  named(name: string): Received[] {
    return this.frames().filter((f) => f.name === name);
  }

  /** Waits for the `n`th frame called `name` (1-based) and returns it. */
  async nth(name: string, n = 1): Promise<Received> {
    return waitFor(() => this.named(name)[n - 1], { name: `${name} #${n}`, timeout: 10_000 });
  }

  /** The attach answering the link on `handle` (the broker picks its own handle: matched by name). */
  async attachOf(linkName: string): Promise<Record<string, unknown>> {
    return (await waitFor(() => this.named('attach').find((a) => a.fields.name === linkName), { name: `attach of ${linkName}`, timeout: 10_000 })).fields;
  }

  close(): void {
    this.peer.destroy();
  }
}

/** An array of symbols (sym32 elements), as `multiple` fields take them. */
function symbols(...names: string[]): Buffer {
  return v.array32(0xb3, names.length, Buffer.concat(names.map((n) => Buffer.concat([Buffer.from([0, 0, 0, n.length]), Buffer.from(n, 'latin1')]))));
}

/** A source (3.5.3) from its fields by name. */
function source(f: { address?: string; durable?: number; expiry?: string; timeout?: number; distribution?: string; filter?: Buffer; defaultOutcome?: Buffer; outcomes?: string[]; capabilities?: string[] }): Buffer {
  return composite(CODE.source, [
    f.address !== undefined ? v.string(f.address) : undefined,
    f.durable !== undefined ? v.uint(f.durable) : undefined,
    f.expiry !== undefined ? v.symbol(f.expiry) : undefined,
    f.timeout !== undefined ? v.uint(f.timeout) : undefined,
    undefined,
    undefined,
    f.distribution !== undefined ? v.symbol(f.distribution) : undefined,
    f.filter,
    f.defaultOutcome,
    f.outcomes ? symbols(...f.outcomes) : undefined,
    f.capabilities ? symbols(...f.capabilities) : undefined,
  ]);
}

/** An attach of ours: role receiver (the broker sends) or sender (the broker receives). */
function attach(o: { name: string; handle: number; role: 'sender' | 'receiver'; source?: Buffer; target?: Buffer; snd?: number; rcv?: number; unsettled?: Buffer; initialDeliveryCount?: number }): Buffer {
  return frame(
    composite(CODE.attach, [
      v.string(o.name),
      v.uint(o.handle),
      v.bool(o.role === 'receiver'),
      o.snd !== undefined ? v.ubyte(o.snd) : undefined,
      o.rcv !== undefined ? v.ubyte(o.rcv) : undefined,
      o.source ?? composite(CODE.source, []),
      o.target ?? composite(CODE.target, []),
      o.unsettled,
      undefined,
      o.role === 'sender' ? v.uint(o.initialDeliveryCount ?? 0) : undefined,
    ]),
  );
}


/** A disposition of ours as the receiver, with any state (or none). */
function disposition(o: { first: number; last?: number; settled: boolean; state?: Buffer }): Buffer {
  return frame(composite(CODE.disposition, [v.bool(true), v.uint(o.first), o.last !== undefined ? v.uint(o.last) : undefined, v.bool(o.settled), o.state]));
}

function flow(o: { handle: number; deliveryCount: number; credit: number; drain?: boolean; echo?: boolean }): Buffer {
  return frame(
    composite(CODE.flow, [v.uint(0), v.uint(0x7fffffff), v.uint(0), v.uint(2048), v.uint(o.handle), v.uint(o.deliveryCount), v.uint(o.credit), undefined, v.bool(o.drain ?? false), v.bool(o.echo ?? false)]),
  );
}

function detach(handle: number, closed: boolean): Buffer {
  return frame(composite(CODE.detach, [v.uint(handle), v.bool(closed)]));
}

const terminus = (attachFields: Record<string, unknown>, kind: 'source' | 'target'): Record<string, unknown> => (attachFields[kind] as Composite).fields;

/** The delivery-count in a message's header section (0 when it has none). */
function deliveryCountOf(payload: Buffer): number {
  const first = new Decoder(payload, 0, payload.length).value();
  if (first.type !== 'described' || first.descriptor.value !== 0x70n || first.value.type !== 'list') return 0;
  const count = first.value.value[4];
  return count && count.type !== 'null' ? Number(count.value) : 0;
}

async function depth(_client: TestClient, queue: string): Promise<number> {
  return Number(((await manage(broker.port, 'READ', 'queue', queue)) as Record<string, unknown>).depth);
}

describe('link conformance - the answering attach says what is in force', () => {
  it('a filter the broker does not apply is not in its source, nor are outcomes and capabilities it does not know; default-outcome is its own', async () => {
    const raw = await Raw.open();
    const filter = v.map([v.symbol('mine'), v.described(v.symbol('example.org:unknown-filter'), v.string('colour = red'))]);
    raw.write(
      attach({
        name: 'c1',
        handle: 0,
        role: 'receiver',
        source: source({ address: 'conf.src', durable: 2, expiry: 'never', timeout: 30, filter, defaultOutcome: composite(CODE.released, []), outcomes: ['amqp:accepted:list', 'example.org:bogus:list'], capabilities: ['example-cap'] }),
      }),
    );
    const s = terminus(await raw.attachOf('c1'), 'source');
    expect(s.address).toBe('conf.src');
    expect(s.filter).toBeUndefined();
    expect(s.outcomes).toEqual(['amqp:accepted:list']);
    expect(s.capabilities).toBeUndefined();
    expect((s['default-outcome'] as Composite).def.name).toBe('modified');
    expect((s['default-outcome'] as Composite).fields['delivery-failed']).toBe(true);
    // Nothing of a queue consumer's link outlives it: no durable terminus, whatever was asked.
    expect(s.durable).toBe(0);
    expect(s['expiry-policy']).toBe('link-detach');
    expect(s['distribution-mode']).toBe('move');
    raw.close();
  });

  it('a binding filter it applies to an exchange subscription is in its source, an unknown one beside it is not (and is no binding key)', async () => {
    const raw = await Raw.open();
    const filter = v.map([
      v.symbol('unknown'), v.described(v.symbol('example.org:unknown-filter'), v.string('conf.none')),
      v.symbol('topic'), v.described(v.symbol('apache.org:legacy-amqp-topic-binding:string'), v.string('conf.a.*')),
    ]);
    raw.write(attach({ name: 'c2', handle: 0, role: 'receiver', source: source({ address: 'amq.topic', filter, capabilities: ['topic'] }) }), flow({ handle: 0, deliveryCount: 0, credit: 10 }));
    const s = terminus(await raw.attachOf('c2'), 'source');
    const entries = (s.filter as { type: string; value: [{ value: string }, { descriptor: { value: string }; value: { value: string } }][] }).value;
    expect(entries.map(([k, e]) => [k.value, e.descriptor.value, e.value.value])).toEqual([['topic', 'apache.org:legacy-amqp-topic-binding:string', 'conf.a.*']]);
    expect(s.capabilities).toEqual(['topic']);

    // Only the binding's key decides what arrives.
    const client = await TestClient.connect({ port: broker.port });
    const sender = await client.openSender('amq.topic');
    for (const subject of ['conf.a.x', 'conf.none', 'conf.b.y', 'conf.a.last']) await client.send(sender, [{ subject, body: subject }]);
    await raw.nth('transfer', 2);
    expect(raw.named('transfer').map((t) => /conf\.[a-z.]+/.exec(t.payload.toString('latin1'))?.[0])).toEqual(['conf.a.x', 'conf.a.last']);
    await client.close();

    // An unknown filter whose value is a string is not taken as a binding key either: all of the topic arrives.
    const other = await Raw.open();
    other.write(attach({ name: 'c3', handle: 0, role: 'receiver', source: source({ address: 'amq.topic', filter: v.map([v.symbol('unknown'), v.described(v.symbol('example.org:unknown-filter'), v.string('conf.none'))]) }) }));
    expect(terminus(await other.attachOf('c3'), 'source').filter).toBeUndefined();
    raw.close();
    other.close();
  });

  it('a browser is answered distribution-mode copy; a durable subscription keeps durable and expiry never', async () => {
    const raw = await Raw.open();
    raw.write(
      attach({ name: 'b1', handle: 0, role: 'receiver', source: source({ address: 'conf.browse', distribution: 'copy' }) }),
      attach({ name: 'durable-sub-1', handle: 1, role: 'receiver', source: source({ address: 'amq.topic/conf.durable', durable: 2, expiry: 'never', capabilities: ['topic', 'shared'] }) }),
    );
    expect(terminus(await raw.attachOf('b1'), 'source')['distribution-mode']).toBe('copy');
    const sub = terminus(await raw.attachOf('durable-sub-1'), 'source');
    expect([sub.durable, sub['expiry-policy'], sub['distribution-mode'], sub.capabilities]).toEqual([1, 'never', 'move', ['topic', 'shared']]);
    raw.close();
  });

  it('a target keeps no capability the broker does not act on; a dynamic one says its node goes with the link', async () => {
    const raw = await Raw.open();
    raw.write(
      attach({ name: 's1', handle: 0, role: 'sender', target: composite(CODE.target, [v.string('conf.tgt'), v.uint(2), v.symbol('never'), undefined, undefined, undefined, symbols('queue', 'example-cap')]) }),
      attach({ name: 'd1', handle: 1, role: 'sender', target: composite(CODE.target, [undefined, undefined, undefined, undefined, v.bool(true), undefined, symbols('temporary-queue', 'example-cap')]) }),
    );
    const t = terminus(await raw.attachOf('s1'), 'target');
    expect([t.address, t.durable, t['expiry-policy'], t.capabilities]).toEqual(['conf.tgt', 0, 'link-detach', ['queue']]);
    const d = terminus(await raw.attachOf('d1'), 'target');
    expect(d.address).toMatch(/^tmp\./);
    expect([d.dynamic, d.capabilities]).toEqual([true, ['temporary-queue']]);
    const lifetime = (d['dynamic-node-properties'] as { value: [{ value: string }, { descriptor: { value: bigint } }][] }).value;
    expect(lifetime.map(([k, p]) => [k.value, p.descriptor.value])).toEqual([['lifetime-policy', 0x2bn]]);
    raw.close();
  });
});

describe('link conformance - settle modes and outcomes', () => {
  it('rcv-settle-mode second on a consumer: the client says accepted unsettled, the broker settles, the message is gone', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('conf.second', ['one']);
    const raw = await Raw.open();
    raw.write(attach({ name: 'r2', handle: 0, role: 'receiver', rcv: 1, source: source({ address: 'conf.second' }) }), flow({ handle: 0, deliveryCount: 0, credit: 1 }));
    expect((await raw.attachOf('r2'))['rcv-settle-mode']).toBe(1);
    const t = await raw.nth('transfer');
    expect(t.fields.settled).toBe(false);
    raw.write(disposition({ first: t.fields['delivery-id'] as number, settled: false, state: composite(CODE.accepted, []) }));
    const d = await raw.nth('disposition');
    expect(d.fields.settled).toBe(true);
    await waitFor(async () => (await depth(client, 'conf.second')) === 0, { name: 'dequeued' });
    raw.close();
    await client.close();
  });

  it('a sender asking rcv-settle-mode second is told first, and its messages are settled by the broker', async () => {
    const raw = await Raw.open();
    raw.write(attach({ name: 's2', handle: 0, role: 'sender', rcv: 1, target: composite(CODE.target, [v.string('conf.second.in')]) }));
    expect((await raw.attachOf('s2'))['rcv-settle-mode']).toBe(0);
    await raw.nth('flow');
    raw.write(perf.transfer({ handle: 0, deliveryId: 0, tag: 't0' }, message('in')));
    const d = await raw.nth('disposition');
    expect([d.fields.settled, (d.fields.state as Composite).def.name]).toEqual([true, 'accepted']);
    raw.close();
  });

  it('one disposition over a range of delivery-ids settles the deliveries of every link it names', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('conf.range.a', ['a']);
    await client.send('conf.range.b', ['b']);
    const raw = await Raw.open();
    raw.write(
      attach({ name: 'ra', handle: 0, role: 'receiver', source: source({ address: 'conf.range.a' }) }),
      attach({ name: 'rb', handle: 1, role: 'receiver', source: source({ address: 'conf.range.b' }) }),
      flow({ handle: 0, deliveryCount: 0, credit: 1 }),
      flow({ handle: 1, deliveryCount: 0, credit: 1 }),
    );
    await raw.nth('transfer', 2);
    const ids = raw.named('transfer').map((t) => t.fields['delivery-id'] as number).sort();
    raw.write(disposition({ first: ids[0]!, last: ids[1]!, settled: true, state: composite(CODE.accepted, []) }));
    await waitFor(async () => (await depth(client, 'conf.range.a')) + (await depth(client, 'conf.range.b')) === 0, { name: 'both dequeued' });
    raw.close();
    await client.close();
  });

  it('a delivery settled with no outcome takes the default-outcome the broker named: back on the queue, delivery-count raised', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('conf.nooutcome', ['x']);
    const raw = await Raw.open();
    raw.write(attach({ name: 'n1', handle: 0, role: 'receiver', source: source({ address: 'conf.nooutcome' }) }), flow({ handle: 0, deliveryCount: 0, credit: 2 }));
    const first = await raw.nth('transfer');
    expect(deliveryCountOf(first.payload)).toBe(0);
    raw.write(disposition({ first: first.fields['delivery-id'] as number, settled: true }));
    const again = await raw.nth('transfer', 2);
    expect(deliveryCountOf(again.payload)).toBe(1);
    raw.close();
    await client.close();
  });
});

describe('link conformance - transfers', () => {
  it(`aborted deliveries give their credit back: ${SENDER_CREDIT} of them leave the sender able to send`, async () => {
    const raw = await Raw.open();
    raw.write(attach({ name: 'ab', handle: 0, role: 'sender', target: composite(CODE.target, [v.string('conf.abort')]) }));
    await raw.nth('flow');
    const frames: Buffer[] = [];
    for (let id = 0; id < SENDER_CREDIT; id++) frames.push(perf.transfer({ handle: 0, deliveryId: id, tag: `a${id}`, more: true }, message('part')), perf.transfer({ handle: 0, aborted: true }, Buffer.alloc(0)));
    raw.write(...frames);
    raw.write(perf.transfer({ handle: 0, deliveryId: SENDER_CREDIT, tag: 'whole' }, message('whole')));
    const d = await raw.nth('disposition');
    expect([d.fields.first, (d.fields.state as Composite).def.name]).toEqual([SENDER_CREDIT, 'accepted']);
    expect(raw.named('detach')).toHaveLength(0);
    raw.close();
  });

  it(`a message-format other than 0 is rejected and its credit given back: ${SENDER_CREDIT} of them leave the sender able to send`, async () => {
    const raw = await Raw.open();
    raw.write(attach({ name: 'mf', handle: 0, role: 'sender', target: composite(CODE.target, [v.string('conf.format')]) }));
    await raw.nth('flow');
    const frames: Buffer[] = [];
    for (let id = 0; id < SENDER_CREDIT; id++) frames.push(perf.transfer({ handle: 0, deliveryId: id, tag: `f${id}`, format: 0x01020304 }, message('odd')));
    raw.write(...frames, perf.transfer({ handle: 0, deliveryId: SENDER_CREDIT, tag: 'zero', format: 0 }, message('zero')));
    const accepted = await waitFor(() => raw.named('disposition').find((d) => (d.fields.state as Composite).def.name === 'accepted'), { name: 'the format-0 message accepted', timeout: 10_000 });
    expect(accepted.fields.first).toBe(SENDER_CREDIT);
    const rejected = raw.named('disposition').find((d) => (d.fields.state as Composite).def.name === 'rejected')!;
    expect(((rejected.fields.state as Composite).fields.error as Composite).fields.condition).toBe('amqp:not-implemented');
    expect(raw.named('detach')).toHaveLength(0);
    raw.close();
  });

  it('a detach in the middle of a multi-frame delivery drops it; the session goes on', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const raw = await Raw.open();
    raw.write(attach({ name: 'half', handle: 0, role: 'sender', target: composite(CODE.target, [v.string('conf.half')]) }));
    await raw.nth('flow');
    raw.write(perf.transfer({ handle: 0, deliveryId: 0, tag: 'h', more: true }, message('half')), detach(0, true));
    await raw.nth('detach');
    raw.write(attach({ name: 'half2', handle: 0, role: 'sender', target: composite(CODE.target, [v.string('conf.half')]) }));
    await raw.attachOf('half2');
    raw.write(perf.transfer({ handle: 0, deliveryId: 1, tag: 'w' }, message('whole')));
    await raw.nth('disposition');
    expect((await client.receiveAndAccept('conf.half', 1)).map(bodyOf)).toEqual(['whole']);
    raw.close();
    await client.close();
  });
});

describe('link conformance - flow and detach', () => {
  it('a sender whose delivery-count wraps past 2^32 keeps its credit', async () => {
    const raw = await Raw.open();
    const start = 0xffffffff - 2;
    raw.write(attach({ name: 'wrap', handle: 0, role: 'sender', initialDeliveryCount: start, target: composite(CODE.target, [v.string('conf.wrap')]) }));
    await raw.nth('flow');
    const frames: Buffer[] = [];
    for (let id = 0; id < 6; id++) frames.push(perf.transfer({ handle: 0, deliveryId: id, tag: `w${id}`, settled: false }, message(`w${id}`)));
    raw.write(...frames, flow({ handle: 0, deliveryCount: (start + 6) >>> 0, credit: 0, echo: true }));
    await waitFor(() => raw.named('disposition').length > 0 && raw.named('flow').some((f) => f.fields['delivery-count'] === 3), { name: 'a flow after the wrap', timeout: 10_000 });
    const last = raw.named('flow').filter((f) => f.fields.handle !== undefined).at(-1)!;
    expect(last.fields['delivery-count']).toBe(3);
    expect(last.fields['link-credit']).toBe(SENDER_CREDIT - 6);
    raw.close();
  });

  it('an echo is answered; a flow with a stale delivery-count gives no credit below what is outstanding; a drain uses up the rest', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('conf.flow', ['1', '2', '3', '4', '5', '6', '7', '8']);
    const raw = await Raw.open();
    raw.write(attach({ name: 'fl', handle: 0, role: 'receiver', source: source({ address: 'conf.flow' }) }), flow({ handle: 0, deliveryCount: 0, credit: 0, echo: true }));
    const echo = await raw.nth('flow');
    expect([echo.fields['delivery-count'], echo.fields['link-credit']]).toEqual([0, 0]);
    raw.write(flow({ handle: 0, deliveryCount: 0, credit: 3 }));
    await raw.nth('transfer', 3);
    // Written before the client saw the three: 0 + 1 - 3 leaves the broker no credit (2.6.7), so nothing more comes...
    raw.write(flow({ handle: 0, deliveryCount: 0, credit: 1 }));
    // ...until a drain of 2 from count 3: two more, then a flow saying the count is 5 and the credit used up.
    raw.write(flow({ handle: 0, deliveryCount: 3, credit: 2, drain: true }));
    const done = await waitFor(() => raw.named('flow').find((f) => f.fields.drain === true), { name: 'the drain answered', timeout: 10_000 });
    expect([done.fields['delivery-count'], done.fields['link-credit']]).toEqual([5, 0]);
    expect(raw.named('transfer').map((t) => t.fields['delivery-id'])).toEqual([0, 1, 2, 3, 4]);
    raw.close();
    await client.close();
  });

  it('an unsettled map at attach is answered with none (the broker keeps no link state), and a resumed transfer is taken as a new message', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const raw = await Raw.open();
    raw.write(attach({ name: 'res', handle: 0, role: 'sender', target: composite(CODE.target, [v.string('conf.resume')]), unsettled: v.map([v.binary(Buffer.from('r1')), composite(CODE.received, [v.uint(0), v.ulong(0)])]) }));
    expect((await raw.attachOf('res')).unsettled).toBeUndefined();
    await raw.nth('flow');
    raw.write(perf.transfer({ handle: 0, deliveryId: 0, tag: 'r1', resume: true }, message('resumed')));
    expect(((await raw.nth('disposition')).fields.state as Composite).def.name).toBe('accepted');
    expect((await client.receiveAndAccept('conf.resume', 1)).map(bodyOf)).toEqual(['resumed']);
    raw.close();
    await client.close();
  });

  it('a detach with closed=false of a durable subscription is answered closed=false, and the subscription stays', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const raw = await Raw.open();
    raw.write(attach({ name: 'keep-me', handle: 0, role: 'receiver', source: source({ address: 'amq.topic/conf.keep', durable: 2, expiry: 'never' }) }));
    await raw.attachOf('keep-me');
    raw.write(detach(0, false));
    const d = await raw.nth('detach');
    expect(d.fields.closed).toBe(false);
    const sender = await client.openSender('amq.topic');
    await client.send(sender, [{ subject: 'conf.keep', body: 'kept' }]);
    raw.write(attach({ name: 'keep-me', handle: 0, role: 'receiver', source: source({ address: 'amq.topic/conf.keep', durable: 2, expiry: 'never' }) }), flow({ handle: 0, deliveryCount: 0, credit: 1 }));
    const t = await raw.nth('transfer');
    expect(t.payload.toString('latin1')).toContain('kept');
    raw.close();
    await client.close();
  });

  it('a flow naming a handle that is not attached ends the session with amqp:session:unattached-handle on the end frame', async () => {
    const raw = await Raw.open();
    raw.write(flow({ handle: 7, deliveryCount: 0, credit: 1 }));
    // The server then closes the connection too (server.ts: a client that broke a session's rules).
    await raw.nth('close');
    const end = raw.named('end')[0];
    expect(end && (end.fields.error as Composite).fields.condition).toBe('amqp:session:unattached-handle');
    raw.close();
  });
});

