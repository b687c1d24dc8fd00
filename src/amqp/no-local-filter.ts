// JMS noLocal as qpid-jms asks for it: the source filter apache.org:no-local-filter:list
// (code 0x0000468c00000003), sent by createConsumer(dest, selector, true),
// createSubscriber and createDurableSubscriber/createDurableConsumer with noLocal true.
// Its presence is the request: qpid-jms' value is the string "NoLocalFilter{}", whatever
// the name says, so the value is not read. What it means here (docs/jms.md, noLocal):
// on a subscription to an exchange (a topic) its queue does not take what the
// subscriber's side publishes (QueueSettings.noLocal); on a queue it is not applied
// (JMS leaves it unspecified there), and the attach's answer does not name it.
import { TandemError } from '../broker/errors.js';
import type { NoLocal } from '../broker/changes.js';
import type { AmqpValue } from './engine/types.js';
import type { Subscription } from './subscriptions.js';

const NO_LOCAL_SYMBOL = 'apache.org:no-local-filter:list';
const NO_LOCAL_CODE = 0x0000468c00000003n;

/** The source's no-local filter entry (our attach names it as in force where it is applied), or undefined. */
export function noLocalEntry(filter: [AmqpValue, AmqpValue][]): [AmqpValue, AmqpValue] | undefined {
  return filter.find(([, v]) => v.type === 'described' && isNoLocalDescriptor(v.descriptor));
}

/**
 * Whose messages a subscription with noLocal does not take. A private subscription: its
 * connection's, as JMS says of a topic subscriber. A durable or shared one: those of every
 * connection with the subscriber's container-id, which qpid-jms sets to the JMS clientID,
 * as JMS 2.0 says of a durable subscription ("this session's connection, or any other
 * connection with the same client identifier"); the subscription's name holds that
 * clientID, so every consumer of it has the same one. A subscription without a clientID
 * (shared and global) has nobody to be local to: JMS refuses noLocal without a clientID,
 * and so does this.
 */
export function noLocalOf(sub: Subscription | undefined, connectionId: string, containerId: string | undefined): NoLocal {
  if (sub === undefined) return { by: 'connection', id: connectionId };
  if (sub.global || containerId === undefined) {
    throw new TandemError('TANDEM_ERR_PRECONDITION', `noLocal (${NO_LOCAL_SYMBOL}) needs a clientID: a subscription without one (global) has no publisher to leave out; set a clientID, or consume with noLocal false`);
  }
  return { by: 'container', id: containerId };
}

function isNoLocalDescriptor(d: AmqpValue): boolean {
  return (d.type === 'symbol' && d.value === NO_LOCAL_SYMBOL) || (d.type === 'ulong' && d.value === NO_LOCAL_CODE);
}
