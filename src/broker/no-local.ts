// JMS noLocal: a topic subscription that must not get what its own side published. Its
// queue says whose messages to skip (QueueSettings.noLocal); each publish and each
// committed transaction says who published (a Publisher, from the AMQP edge), and
// routing (routing-selectors.ts) leaves the subscription's queue out for a message of
// that publisher. A message without a publisher (a dead letter, a management reply,
// one the broker sends itself) is local to nobody.
import type { NoLocal } from './changes.js';

/** Who published a message: the connection (the broker's id of it) and its container-id (qpid-jms: the JMS clientID, when one is set). */
export interface Publisher {
  connection: string;
  container: string | undefined;
}

/** Whether a queue with `noLocal` must not take what `publisher` published. */
export function isLocal(noLocal: NoLocal, publisher: Publisher | undefined): boolean {
  if (publisher === undefined) return false;
  return noLocal.by === 'connection' ? publisher.connection === noLocal.id : publisher.container === noLocal.id;
}

/** Whether two noLocal settings skip the same publishers (both absent included). */
export function sameNoLocal(a: NoLocal | undefined, b: NoLocal | undefined): boolean {
  return a === b || (a !== undefined && b !== undefined && a.by === b.by && a.id === b.id);
}
