// Management operations on the broker, shared by the $management node (and so
// by the tandem CLI, which speaks AMQP Management) and by anything in-process.
// Each takes plain arguments and returns plain data; errors are TandemErrors.
import type { Broker } from '../broker/broker.js';
import { TandemError, invalidArgument } from '../broker/errors.js';
import type { Exchange } from '../broker/exchange.js';
import type { Queue } from '../broker/queue.js';
import { parseBoolean, parseCount, parseExchangeSettings, parseExchangeType, parseQueueSettings } from '../broker/settings.js';
import { deleteQueueInSlices, purgeInSlices } from '../broker/queue-slices.js';
import { moveInSlices } from '../broker/queue-move.js';
import { refuseBrokerNode } from './acl.js';

export type Attributes = Record<string, unknown>;

export interface ConnectionInfo {
  id: string;
  remote: string;
  user: string | undefined;
  admin: boolean;
  container: string | undefined;
  links: number;
  /** Deliveries out with it as a consumer, plus its messages not yet settled as a publisher. */
  unsettled: number;
}

/** What the admin layer needs from the rest of the broker process. */
export interface AdminContext {
  broker: Broker;
  connections(): ConnectionInfo[];
  closeConnection(id: string): boolean;
  status(): Attributes;
}

export const entityTypes = ['queue', 'exchange', 'binding', 'connection', 'broker'] as const;
export type EntityType = (typeof entityTypes)[number];

export function entityType(value: unknown): EntityType {
  const short = typeof value === 'string' ? value.replace(/^org\.apache\.qpid\.broker:/, '') : value;
  if ((entityTypes as readonly unknown[]).includes(short)) return short as EntityType;
  throw invalidArgument(`unknown type ${JSON.stringify(value)}; known: ${entityTypes.join(', ')}`);
}

export function describeQueue(broker: Broker, q: Queue): Attributes {
  const s = q.settings;
  return {
    name: q.name,
    durable: s.durable,
    'auto-delete': s.autoDelete,
    'auto-delete-delay': s.autoDeleteDelayMs,
    exclusive: s.exclusive,
    'max-count': s.maxCount,
    'max-size': s.maxSize,
    policy: s.limitPolicy,
    'default-ttl': s.defaultTtlMs,
    'alternate-exchange': s.alternateExchange,
    priorities: s.priorities,
    'qpid.replicate': broker.replicationOf(s),
    depth: q.depth,
    'byte-depth': q.byteDepth,
    'paged-depth': q.pagedDepth,
    'paged-bytes': q.pagedByteDepth,
    unreadable: q.unreadableDepth,
    // Held until their delivery time (JMS delivery delay): in the depth, not delivered or browsed yet.
    scheduled: q.scheduledDepth,
    acquired: q.acquired,
    consumers: q.consumerCount,
    enqueued: q.enqueued,
    dequeued: q.dequeued,
    // New messages a full ring lost because the rest were out with consumers or held until their delivery time.
    ...(s.limitPolicy === 'ring' ? { 'ring-overflow': q.ringOverflow } : {}),
    'qpid.dedup-window': s.dedupWindow,
    'qpid.dedup-ttl': s.dedupTtlMs,
    'qpid.dedup-key': s.dedupKey === '' ? 'message-id' : s.dedupKey,
    ...(q.dedup
      ? {
          'dedup-keys': q.dedup.size,
          'dedup-duplicates': q.dedupCounts.duplicates,
          'dedup-without-key': q.dedupCounts.withoutKey,
          'dedup-invalid-key': q.dedupCounts.invalidKey,
          'dedup-memory-bytes': q.dedup.memoryBytes,
        }
      : {}),
    // A JMS durable subscription's queue: the kind that made it (the other kind of its name is refused).
    ...(s.subscription ? { subscription: s.subscription } : {}),
    // Message groups: how many groups have messages here, and how many a consumer owns now.
    ...(s.messageGroups ? { 'qpid.message-groups': true, groups: q.groupCount ?? 0, 'groups-owned': q.ownedGroupCount ?? 0 } : {}),
    // A topic subscription's JMS selector: only messages it selects are routed here.
    ...(s.selector !== undefined ? { selector: s.selector } : {}),
    // JMS noLocal: what that connection, or the connections of that container-id (clientID), publish is not routed here.
    ...(s.noLocal !== undefined ? { 'no-local': `${s.noLocal.by} ${s.noLocal.id}` } : {}),
  };
}

/**
 * Names of the temporary queues a connection makes (a dynamic link's, an exchange
 * subscriber's private one). Such a queue may be written by anyone who knows its
 * name (client-connection.ts, checkWrite): its name is a capability, a random uuid
 * only its connection is told. client-connection.ts names them with it.
 */
export const TEMPORARY_QUEUE_PREFIX = 'tmp.';

/**
 * Whether a queue's attributes (describeQueue) are a temporary queue's, whose name is
 * shown to admins only: the metrics sum them without names for the same reason.
 */
export function isTemporaryQueue(q: Attributes): boolean {
  return typeof q.name === 'string' && q.name.startsWith(TEMPORARY_QUEUE_PREFIX) && q.exclusive === true && q['auto-delete'] === true;
}

/** A queue list as a user who is not an admin may see it: without temporary queues (their names are capabilities). */
export function withoutTemporaryQueues(queues: Attributes[]): Attributes[] {
  return queues.filter((q) => !isTemporaryQueue(q));
}

export function describeExchange(broker: Broker, e: Exchange): Attributes {
  return {
    name: e.name,
    type: e.type,
    durable: e.settings.durable,
    'alternate-exchange': e.settings.alternateExchange,
    'qpid.replicate': broker.replicationOf(e.settings),
    bindings: e.bindingCount,
    'built-in': e.builtIn,
    // A DR secondary's exchange its bridge made: the source's delete of it deletes it here (bridge.ts).
    ...(e.settings.madeByDr !== undefined ? { 'made-by-dr': e.settings.madeByDr } : {}),
  };
}

function bindingName(exchange: string, queue: string, key: string): string {
  return `${exchange}/${queue}/${key}`;
}

/** "exchange/queue/key" (key may contain '/'), or the attributes. */
function bindingArgs(name: unknown, attrs: Attributes): { exchange: string; queue: string; key: string } {
  if (typeof attrs.exchange === 'string' && typeof attrs.queue === 'string') {
    return { exchange: attrs.exchange, queue: attrs.queue, key: typeof attrs.key === 'string' ? attrs.key : '' };
  }
  if (typeof name === 'string') {
    const [exchange, queue, ...rest] = name.split('/');
    if (exchange && queue) return { exchange, queue, key: rest.join('/') };
  }
  throw invalidArgument('a binding needs exchange and queue (and optional key), or the name exchange/queue/key');
}

function requireName(name: unknown, type: string): string {
  if (typeof name !== 'string' || name === '') throw invalidArgument(`${type} operations need a name`);
  return name;
}

export function create(ctx: AdminContext, type: EntityType, name: unknown, attrs: Attributes): Attributes {
  const { broker } = ctx;
  // Queues and exchanges are memory too: under the alarm none is made, as none is for a client's attach.
  if (broker.memoryAlarm && (type === 'queue' || type === 'exchange')) {
    throw new TandemError('TANDEM_ERR_MEMORY_FULL', `no new ${type} while memory is short: ${broker.memoryAlarm}`);
  }
  // Not even an admin names a queue or exchange after the broker's own nodes (acl.ts).
  if (type === 'queue' || type === 'exchange') refuseBrokerNode(requireName(name, type));
  switch (type) {
    case 'queue': {
      const settings = parseQueueSettings(withoutKeys(attrs, ['name', 'type']), broker.queueDefaults);
      if (!broker.queues.has(requireName(name, type))) broker.checkAlternateReplicated('queue', requireName(name, type), settings);
      const { queue, created } = broker.declareQueue(requireName(name, type), settings);
      if (!created) throw new TandemError('TANDEM_ERR_ALREADY_EXISTS', `queue '${queue.name}' already exists`);
      return describeQueue(broker, queue);
    }
    case 'exchange': {
      const exType = parseExchangeType(attrs['exchange-type'] ?? attrs.type ?? 'direct');
      const settings = parseExchangeSettings(withoutKeys(attrs, ['name', 'type', 'exchange-type']));
      if (!broker.exchanges.has(requireName(name, type))) broker.checkAlternateReplicated('exchange', requireName(name, type), settings);
      const { exchange, created } = broker.declareExchange(requireName(name, type), exType, settings);
      if (!created) throw new TandemError('TANDEM_ERR_ALREADY_EXISTS', `exchange '${exchange.name}' already exists`);
      return describeExchange(broker, exchange);
    }
    case 'binding': {
      const b = bindingArgs(name, attrs);
      broker.bind(b.exchange, b.queue, b.key);
      return { name: bindingName(b.exchange, b.queue, b.key), ...b };
    }
    default:
      throw new TandemError('TANDEM_ERR_NOT_IMPLEMENTED', `${type} cannot be created`);
  }
}

/** Change what an existing entity allows changing: a queue's duplicate-detection window. */
export function update(ctx: AdminContext, type: EntityType, name: unknown, attrs: Attributes): Attributes {
  const { broker } = ctx;
  if (type !== 'queue') throw new TandemError('TANDEM_ERR_NOT_IMPLEMENTED', `${type} cannot be updated`);
  const args = withoutKeys(attrs, ['name', 'type']);
  const other = Object.keys(args).filter((k) => !/dedup/.test(k));
  if (other.length > 0) throw invalidArgument(`only a queue's dedup-window, dedup-ttl and dedup-key can be changed, not ${other.join(', ')}`);
  const queue = broker.queue(requireName(name, type));
  // What is not given stays as it is (turning the window off drops its ttl and key too).
  const off = Object.entries(args).some(([k, v]) => /dedup-window$/.test(k) && Number(v) === 0);
  const current = off ? {} : { 'qpid.dedup-window': queue.settings.dedupWindow, 'qpid.dedup-ttl': `${queue.settings.dedupTtlMs}ms`, 'qpid.dedup-key': queue.settings.dedupKey };
  const s = parseQueueSettings({ ...current, ...args });
  return describeQueue(broker, broker.setQueueDedup(queue.name, s));
}

export function read(ctx: AdminContext, type: EntityType, name: unknown): Attributes {
  const { broker } = ctx;
  switch (type) {
    case 'queue':
      return describeQueue(broker, broker.queue(requireName(name, type)));
    case 'exchange':
      return describeExchange(broker, broker.exchange(requireName(name, type)));
    case 'broker':
      return ctx.status();
    case 'connection': {
      const c = ctx.connections().find((x) => x.id === name);
      if (!c) throw new TandemError('TANDEM_ERR_NOT_FOUND', `connection '${String(name)}' does not exist`);
      return { ...c };
    }
    case 'binding': {
      const b = bindingArgs(name, {});
      if (!broker.exchange(b.exchange).hasBinding(b.queue, b.key)) {
        throw new TandemError('TANDEM_ERR_NOT_FOUND', `binding '${bindingName(b.exchange, b.queue, b.key)}' does not exist`);
      }
      return { name: bindingName(b.exchange, b.queue, b.key), ...b };
    }
  }
}

export async function remove(ctx: AdminContext, type: EntityType, name: unknown, attrs: Attributes): Promise<Attributes> {
  const { broker } = ctx;
  switch (type) {
    case 'queue': {
      const removed = await deleteQueueInSlices(broker, requireName(name, type), {
        ifEmpty: attrs['if-empty'] !== undefined ? parseBoolean('if-empty', attrs['if-empty']) : false,
        ifUnused: attrs['if-unused'] !== undefined ? parseBoolean('if-unused', attrs['if-unused']) : false,
      });
      return { name, removed };
    }
    case 'exchange':
      broker.deleteExchange(requireName(name, type));
      return { name };
    case 'binding': {
      const b = bindingArgs(name, attrs);
      broker.unbind(b.exchange, b.queue, b.key);
      return { name: bindingName(b.exchange, b.queue, b.key) };
    }
    case 'connection':
      if (!ctx.closeConnection(requireName(name, type))) {
        throw new TandemError('TANDEM_ERR_NOT_FOUND', `connection '${String(name)}' does not exist`);
      }
      return { name };
    default:
      throw new TandemError('TANDEM_ERR_NOT_IMPLEMENTED', `${type} cannot be deleted`);
  }
}

export function query(ctx: AdminContext, type: EntityType): Attributes[] {
  const { broker } = ctx;
  switch (type) {
    case 'queue':
      return [...broker.queues.values()].map((q) => describeQueue(broker, q));
    case 'exchange':
      return [...broker.exchanges.values()].map((e) => describeExchange(broker, e));
    case 'binding':
      return [...broker.exchanges.values()].flatMap((e) =>
        e.bindings.map((b) => ({ name: bindingName(e.name, b.queue, b.key), exchange: e.name, queue: b.queue, key: b.key })),
      );
    case 'connection':
      return ctx.connections().map((c) => ({ ...c }));
    case 'broker':
      return [ctx.status()];
  }
}

export async function purge(ctx: AdminContext, name: unknown, attrs: Attributes): Promise<Attributes> {
  const queue = ctx.broker.queue(requireName(name, 'queue'));
  const limit = attrs.count !== undefined ? parseCount('count', attrs.count) : 0;
  return { name, purged: await purgeInSlices(ctx.broker, queue, limit) };
}

/** Move available messages of queue `name` to queue `to` (body: to, count?; tandem queue move), in slices. */
export async function move(ctx: AdminContext, name: unknown, attrs: Attributes): Promise<Attributes> {
  const from = ctx.broker.queue(requireName(name, 'queue'));
  if (typeof attrs.to !== 'string' || attrs.to === '') throw invalidArgument('a move needs to: the name of the queue to move the messages to');
  const to = ctx.broker.queue(attrs.to);
  const limit = attrs.count !== undefined ? parseCount('count', attrs.count) : 0;
  return { name, to: to.name, moved: await moveInSlices(ctx.broker, from, to, limit) };
}

function withoutKeys(attrs: Attributes, keys: string[]): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(attrs)) if (!keys.includes(k)) out[k] = v;
  return out;
}
