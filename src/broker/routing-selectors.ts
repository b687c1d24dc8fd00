// Topic subscriptions with a JMS message selector (QueueSettings.selector): a message
// routed to such a queue goes in only when the selector selects it, so a subscription
// keeps nothing its consumers would never take. The AMQP edge compiles selectors (the
// model knows no wire); each queue's is compiled once, at its first routed message.
// A subscription with JMS noLocal (QueueSettings.noLocal, no-local.ts) is left out the
// same way for a message its own side published.
import type { MessageRecord, QueueSettings } from './changes.js';
import { messageExpiry } from './message-expiry.js';
import { isLocal, type Publisher } from './no-local.js';
import type { Queue } from './queue.js';

/**
 * What a selector reads of a message: its bytes, the header fields kept beside them
 * (durable, priority), its delivery count (AMQP delivery-count: JMSXDeliveryCount is one
 * more, JMSRedelivered whether above 0) and its absolute expiry (0: none; JMSExpiration
 * when properties.absolute-expiry-time is not set).
 */
export type SelectableMessage = Pick<MessageRecord, 'bytes' | 'durable' | 'priority' | 'deliveryCount' | 'expiresAt'>;

/**
 * A selector's predicate. `deliveryCount` stands for the message's own when a queue has
 * raised it since (QueueEntry.deliveryCount, after releases).
 */
export type SelectorPredicate = (msg: SelectableMessage, deliveryCount?: number) => boolean;

/** Makes a selector's text into its predicate; throws for a selector it does not take. */
export type SelectorCompiler = (text: string) => SelectorPredicate;

/** A message as it is routed: its expiry still as its sender set it (ttl from now, or an absolute time). */
export type RoutedMessage = Omit<SelectableMessage, 'expiresAt'> & { ttlMs: number | undefined; absoluteExpiry: number | undefined };

/** Passes every message: a selector that no longer compiles (a journal of another version) loses nothing. */
const EVERY_MESSAGE = (): boolean => true;

export class RoutingSelectors {
  /** By the settings object (replaced, never changed in place, when a queue's settings change). */
  private readonly compiled = new WeakMap<QueueSettings, SelectorPredicate>();

  constructor(
    private readonly compile: SelectorCompiler | undefined,
    private readonly now: () => number,
  ) {}

  /**
   * The queues of `queues` that take `msg` from `publisher`: whose selector (if any) selects
   * it and whose noLocal (if any) is not the publisher's. The same array when none has either.
   */
  filter(queues: Queue[], msg: RoutedMessage, publisher?: Publisher): Queue[] {
    if (!queues.some((q) => q.settings.selector !== undefined || q.settings.noLocal !== undefined)) return queues;
    let selectable: SelectableMessage | undefined;
    return queues.filter((q) => {
      const { noLocal, selector } = q.settings;
      if (noLocal !== undefined && isLocal(noLocal, publisher)) return false;
      if (selector === undefined || this.compile === undefined) return true;
      // Its expiry as a consumer would be told it (the header ttl then counts from now).
      selectable ??= { bytes: msg.bytes, durable: msg.durable, priority: msg.priority, deliveryCount: msg.deliveryCount, expiresAt: messageExpiry(msg, this.now()) };
      return this.selects(q.settings, selectable);
    });
  }

  private selects(settings: QueueSettings, msg: SelectableMessage): boolean {
    let predicate = this.compiled.get(settings);
    if (predicate === undefined) {
      try {
        predicate = this.compile!(settings.selector!);
      } catch {
        predicate = EVERY_MESSAGE;
      }
      this.compiled.set(settings, predicate);
    }
    try {
      return predicate(msg);
    } catch {
      // Bytes the selector cannot read: not selected, as on a queue consumer.
      return false;
    }
  }
}
