// Shared fixtures for the broker model tests: a fake clock, a fake consumer that
// records deliveries, message and settings builders, and a state snapshot that
// two brokers can be compared by.
import { Broker, type BrokerEvents, type BrokerOptions, type IncomingMessage } from '../../../src/broker/broker.js';
import type { ChangeKind, LoggedChange, QueueSettings } from '../../../src/broker/changes.js';
import type { Consumer, Queue, QueueEntry } from '../../../src/broker/queue.js';
import { dedupIntegerDigest, type DedupDigest } from '../../../src/broker/dedup-key.js';
import type { DeliveryTimeReader } from '../../../src/broker/scheduled.js';
import { defaultExchangeSettings, defaultQueueSettings } from '../../../src/broker/settings.js';
import { ReplicationFilter } from '../../../src/replication/filter.js';

export { prng } from '../../../src/util/prng.js';

export class FakeClock {
  constructor(public t = 1_000_000) {}
  now = (): number => this.t;
  advance(ms: number): void {
    this.t += ms;
  }
}

export class FakeConsumer implements Consumer {
  readonly deliveries: QueueEntry[] = [];
  cursor = 0;
  constructor(
    readonly id: string,
    public credit = 1000,
    readonly browse = false,
    readonly connectionId = 'conn-1',
  ) {}
  deliver(entry: QueueEntry, _queue: Queue): void {
    this.deliveries.push(entry);
  }
  /** Everything delivered: the queue gives back those this consumer still holds. */
  held(): Iterable<QueueEntry> {
    return this.deliveries;
  }
  /** Ids of the messages delivered so far. */
  get ids(): number[] {
    return this.deliveries.map((e) => e.msg.id);
  }
  /** Bodies (as strings) of the messages delivered so far. */
  get bodies(): string[] {
    return this.deliveries.map((e) => e.msg.bytes.toString());
  }
}

/** A message's delivery time as its body says it: 'delay:MS' asks a delay (counted from each read), 'at:MS' names a time. */
export const bodyDeliveryTimes: DeliveryTimeReader = (bytes, now) => {
  const [kind, ms] = bytes.toString().split(':');
  if (kind === 'delay') return { status: 'at', at: now + Number(ms), fixed: false };
  if (kind === 'at') return { status: 'at', at: Math.max(now, Number(ms)), fixed: true };
  return { status: 'none' };
};

export function msg(body: string, opts: Partial<IncomingMessage> = {}): IncomingMessage {
  return {
    bytes: Buffer.from(body),
    headerLength: 0,
    durable: false,
    priority: 4,
    ttlMs: undefined,
    absoluteExpiry: undefined,
    deliveryCount: 0,
    subject: undefined,
    ...opts,
  };
}

export function qs(overrides: Partial<QueueSettings> = {}): QueueSettings {
  return { ...defaultQueueSettings, ...overrides };
}

/** The digest of the integer key `v`, from its 9-byte big-endian two's complement (as a window's digest holds an integer). */
export function integerKey(v: bigint): DedupDigest {
  const b = Buffer.alloc(9);
  let u = BigInt.asUintN(72, v);
  for (let i = 8; i >= 0; i--, u >>= 8n) b[i] = Number(u & 0xffn);
  return dedupIntegerDigest(b, 0, 9, true);
}

export const xs = (overrides: Partial<typeof defaultExchangeSettings> = {}) => ({ ...defaultExchangeSettings, ...overrides });

/** Feed `backup` what `primary` logs, through the replication filter as the live stream does; returns what went out. */
export function feedBackup(primary: Broker, backup: Broker): LoggedChange[] {
  const filter = new ReplicationFilter('all');
  const passed: LoggedChange[] = [];
  primary.log.attach({
    append: (entry) => {
      const out = filter.pass(entry);
      if (!out) return;
      passed.push(out);
      backup.apply(out);
    },
  });
  return passed;
}

/** A broker with a fake clock whose log is captured. */
export function newBroker(options: { clock?: FakeClock; events?: BrokerEvents; groupKeys?: BrokerOptions['groupKeys'] } = {}): {
  broker: Broker;
  clock: FakeClock;
  logged: LoggedChange[];
} {
  const clock = options.clock ?? new FakeClock();
  const broker = new Broker({ now: clock.now, events: options.events, groupKeys: options.groupKeys });
  const logged: LoggedChange[] = [];
  broker.log.attach({ append: (e) => logged.push(e) });
  return { broker, clock, logged };
}

export const kinds = (entries: LoggedChange[]): ChangeKind[] => entries.map((e) => e.change.kind);

/**
 * Each record's enqueues and dequeues as 'kind queue' (a transaction's joined by ' + ',
 * a message's body after an enqueue when `withBody`); other records left out.
 */
export function messageRecords(entries: LoggedChange[], withBody = false): string[] {
  const op = (c: LoggedChange['change']): string =>
    c.kind === 'enqueue' ? `enqueue ${c.queue}${withBody ? ` ${c.message.bytes.toString()}` : ''}` : c.kind === 'dequeue' ? `dequeue ${c.queue}` : c.kind;
  return entries.flatMap((e) =>
    e.change.kind === 'transaction' ? [e.change.changes.map(op).join(' + ')] : e.change.kind === 'enqueue' || e.change.kind === 'dequeue' ? [op(e.change)] : [],
  );
}

/** Bodies of a queue's messages, in id order. */
export function bodies(queue: Queue): string[] {
  return queue.entries().map((e) => e.msg.bytes.toString());
}

/** Everything two brokers must agree on after the same log. */
export function brokerState(broker: Broker): unknown {
  const queues = [...broker.queues.values()]
    .map((q) => ({
      name: q.name,
      settings: q.settings,
      ids: q.entries().map((e) => e.msg.id),
      depth: q.depth,
      bytes: q.byteDepth,
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
  const exchanges = [...broker.exchanges.values()]
    .map((e) => ({
      name: e.name,
      type: e.type,
      settings: e.settings,
      bindings: [...e.bindings].sort((a, b) => `${a.queue}\0${a.key}`.localeCompare(`${b.queue}\0${b.key}`)),
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
  return { queues, exchanges, epoch: broker.epoch };
}

/**
 * Dispatch `q` again while its host asks (moreToDispatch, counted in `host.more`), as the
 * broker does, at most `limit` times or until `until()`; how many dispatches ran, and the
 * most rows one of them passed over (by the rise of `walked()`, a counter of the queue's).
 */
export function dispatchUntilIdle(
  q: Queue,
  host: { more: number },
  options: { limit?: number; walked?: () => number; until?: () => boolean } = {},
): { dispatches: number; mostWalked: number } {
  const { limit = 1000, walked = () => 0, until = () => false } = options;
  let dispatches = 0;
  let mostWalked = 0;
  do {
    const before = walked();
    host.more = 0;
    q.dispatch(0);
    mostWalked = Math.max(mostWalked, walked() - before);
    dispatches++;
  } while (host.more > 0 && !until() && dispatches < limit);
  return { dispatches, mostWalked };
}
