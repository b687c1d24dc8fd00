// Named subscriptions to an exchange: JMS durable and shared topic subscriptions as
// qpid-jms asks for them. A durable subscription is a source with durable > 0 and
// expiry-policy "never"; a shared one carries the "shared" capability. Each names a
// queue that outlives the link (durable: across detach, restart and failover; shared
// and not durable: while any of its consumers is attached), found again by the link
// name and the client's container-id (its JMS clientID), or by the link name alone
// for a "global" one (a shared subscription made without a clientID).
import type { Broker } from '../broker/broker.js';

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
  return { queue: subscriptionQueue(linkName, containerId, shared, caps.includes('global'), durable), durable, shared };
}

/** The `exchange/key` address a subscription queue was made for (its one binding). */
export function subscriptionAddress(broker: Broker, queue: string): string | undefined {
  for (const exchange of broker.exchanges.values()) {
    const [key] = exchange.keysOf(queue);
    if (key !== undefined) return `${exchange.name}/${key}`;
  }
  return undefined;
}
