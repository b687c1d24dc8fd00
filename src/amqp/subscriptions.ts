// Named subscriptions to an exchange: JMS durable and shared topic subscriptions as
// qpid-jms asks for them. A durable subscription is a source with durable > 0 and
// expiry-policy "never"; a shared one carries the "shared" capability. Each names a
// queue that outlives the link (durable: across detach, restart and failover; shared
// and not durable: while any of its consumers is attached), found again by the link
// name and the client's container-id (its JMS clientID), or by the link name alone
// for a "global" one (a shared subscription made without a clientID).
//
// A durable subscription that is not shared and a shared one of the same name and
// clientID name the same queue, yet JMS 2.0 says they may not both exist:
// the queue records the kind it was made as (QueueSettings.subscription), and an
// attach asking for the other kind is refused (kindConflict).
import type { Broker } from '../broker/broker.js';
import type { SubscriptionKind } from '../broker/changes.js';

export interface SubscriptionSource {
  durable?: number;
  expiry_policy?: string;
  capabilities?: string[] | string;
}

export interface Subscription {
  /** The queue that holds it. */
  queue: string;
  durable: boolean;
  shared: boolean;
  /** Named without a clientID (the "global" capability qpid-jms gives a shared one made without one): one for every client. */
  global: boolean;
}

/** Queues of named subscriptions start with this; nothing else may. */
export const SUBSCRIPTION_PREFIX = 'sub:';

function capabilities(source: SubscriptionSource): string[] {
  const c = source.capabilities;
  return c === undefined ? [] : Array.isArray(c) ? c.map(String) : [String(c)];
}

/**
 * The queue name of a subscription. Names cannot hold '/' or '..' (address syntax), so
 * both parts are percent-encoded, '.' included. qpid-jms names the links of a shared
 * subscription `name|2`, `name|global`, `name|volatile1`, `name|global-volatile2`...:
 * all one subscription, `name`. A shared one that is not durable is a different
 * subscription from a durable one of the same name.
 */
export function subscriptionQueue(linkName: string, containerId: string | undefined, shared: boolean, global: boolean, durable = true): string {
  const name = shared ? linkName.replace(/\|.*$/s, '') : linkName;
  const encode = (s: string) => encodeURIComponent(s).replace(/\./g, '%2E');
  // The empty scope cannot be a container-id: a global name never meets a client's.
  const scope = global ? '' : encode(containerId ?? '');
  return `${SUBSCRIPTION_PREFIX}${scope}:${encode(name)}${durable ? '' : '%7Cvolatile'}`;
}

/** The named subscription a source asks for, or undefined for an ordinary (private) one. */
export function subscriptionOf(source: SubscriptionSource, linkName: string, containerId: string | undefined): Subscription | undefined {
  const caps = capabilities(source);
  const durable = (source.durable ?? 0) > 0 && source.expiry_policy === 'never';
  const shared = caps.includes('shared');
  if (!durable && !shared) return undefined;
  const global = caps.includes('global');
  return { queue: subscriptionQueue(linkName, containerId, shared, global, durable), durable, shared, global };
}

/** The kind a subscription queue is made as, to record in its settings. */
export function kindOf(sub: Subscription): SubscriptionKind {
  return sub.shared ? 'shared' : 'unshared';
}

/**
 * Why an attach for `sub` may not use its queue, made as `recorded`, or undefined
 * when it may. A queue made before kinds were recorded has none (undefined): either
 * kind is taken, as before, since nothing tells which one made it, and a guess would
 * lock out the consumers of every such subscription made as the other kind.
 */
export function kindConflict(sub: Subscription, recorded: SubscriptionKind | undefined): string | undefined {
  const wanted = kindOf(sub);
  if (recorded === undefined || recorded === wanted) return undefined;
  const [name, scope] = subscriptionName(sub.queue);
  const exists = recorded === 'shared' ? 'a shared durable subscription' : 'a durable subscription that is not shared';
  const asked = wanted === 'shared' ? 'a shared one' : 'one that is not shared';
  return `${exists} named '${name}' already exists for ${scope}, so ${asked} cannot have that name; unsubscribe it first, or pick another name`;
}

/** The subscription name and its scope ("clientID 'x'", or "no clientID (global)") of a queue subscriptionQueue named, decoded. */
export function subscriptionName(queue: string): [name: string, scope: string] {
  const rest = queue.slice(SUBSCRIPTION_PREFIX.length);
  const at = rest.indexOf(':');
  const scope = decoded(rest.slice(0, at));
  return [decoded(rest.slice(at + 1)), scope === '' ? 'no clientID (global)' : `clientID '${scope}'`];
}

/** A part subscriptionQueue encoded, decoded; as it is if it is not such a part (a queue an operator named). */
function decoded(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

/** The `exchange/key` address a subscription queue was made for (its one binding). */
export function subscriptionAddress(broker: Broker, queue: string): string | undefined {
  for (const exchange of broker.exchanges.values()) {
    const [key] = exchange.keysOf(queue);
    if (key !== undefined) return `${exchange.name}/${key}`;
  }
  return undefined;
}
