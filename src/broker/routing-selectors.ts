// Topic subscriptions with a JMS message selector (QueueSettings.selector): a message
// routed to such a queue goes in only when the selector selects it, so a subscription
// keeps nothing its consumers would never take. The AMQP edge compiles selectors (the
// model knows no wire); each queue's is compiled once, at its first routed message.
// A subscription with JMS noLocal (QueueSettings.noLocal, no-local.ts) is left out the
// same way for a message its own side published.
import type { MessageRecord, QueueSettings } from './changes.js';
import { isLocal, type Publisher } from './no-local.js';
import type { Queue } from './queue.js';

/** What a selector reads of a message: its bytes, and the header fields kept beside them (durable, priority). */
export type SelectableMessage = Pick<MessageRecord, 'bytes' | 'durable' | 'priority'>;

/** Makes a selector's text into its predicate; throws for a selector it does not take. */
export type SelectorCompiler = (text: string) => (msg: SelectableMessage) => boolean;

/** Passes every message: a selector that no longer compiles (a journal of another version) loses nothing. */
const EVERY_MESSAGE = (): boolean => true;

export class RoutingSelectors {
  /** By the settings object (replaced, never changed in place, when a queue's settings change). */
  private readonly compiled = new WeakMap<QueueSettings, (msg: SelectableMessage) => boolean>();

  constructor(private readonly compile: SelectorCompiler | undefined) {}

  /**
   * The queues of `queues` that take `msg` from `publisher`: whose selector (if any) selects
   * it and whose noLocal (if any) is not the publisher's. The same array when none has either.
   */
  filter(queues: Queue[], msg: SelectableMessage, publisher?: Publisher): Queue[] {
    if (!queues.some((q) => q.settings.selector !== undefined || q.settings.noLocal !== undefined)) return queues;
    return queues.filter((q) => {
      const { noLocal, selector } = q.settings;
      if (noLocal !== undefined && isLocal(noLocal, publisher)) return false;
      return selector === undefined || this.compile === undefined || this.selects(q.settings, msg);
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
