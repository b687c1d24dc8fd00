// What a coordinator answered one delivery, for unit tests that drive Coordinator
// with no engine: it stands in for the Delivery and records the outcome.
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import type { AmqpValue } from '../../../src/amqp/engine/types.js';

/** What the coordinator told one delivery. */
export class Told {
  outcome: 'accepted' | 'rejected' | 'declared' | 'transactional' | undefined;
  error: { condition: string; description?: string } | undefined;
  txnId: Buffer | undefined;

  get delivery(): Delivery {
    return this as unknown as Delivery;
  }
  update(state: AmqpValue): void {
    // declared (0x33) carries the new txn-id; transactional-state (0x34) answers a send.
    if (state.type !== 'described' || state.value.type !== 'list') throw new Error('not a described list');
    const code = (state.descriptor as { value: unknown }).value;
    this.outcome = code === 0x33n ? 'declared' : code === 0x34n ? 'transactional' : undefined;
    if (this.outcome === 'declared') this.txnId = (state.value.value[0] as { value: Buffer }).value;
  }
  accept(): void {
    this.outcome = 'accepted';
  }
  reject(error: { condition: string; description?: string }): void {
    this.outcome = 'rejected';
    this.error = error;
  }
}
