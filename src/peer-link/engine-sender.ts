// The serving side of the peer-link transport over tandem's own engine: a peer
// (an HA backup, a DR bridge) attached a receiving link to one of our special
// addresses. The one place where replication and DR sources touch the server's
// link: its attach, its credit and the session's window (link.sendable).
import type { Delivery } from '../amqp/engine/delivery.js';
import type { Link } from '../amqp/engine/link.js';
import { fromAmqp, toAmqp, type Plain } from '../amqp/engine/message.js';
import { describedList } from '../amqp/engine/performative.js';
import type { AmqpValue } from '../amqp/engine/types.js';
import type { DeliveryRef, PeerError, PeerSender } from './transport.js';

export class EnginePeerSender implements PeerSender {
  private listener: ((d: DeliveryRef, accepted: boolean) => void) | undefined;

  constructor(private readonly link: Link) {}

  get hello(): Record<string, unknown> {
    const p = this.link.remoteAttach?.fields.properties as AmqpValue | undefined;
    const plain = p ? fromAmqp(p) : undefined;
    return plain && typeof plain === 'object' ? (plain as Record<string, unknown>) : {};
  }

  accept(address: string, properties: Record<string, unknown>): void {
    this.link.accept({
      source: describedList('source', { address }),
      target: this.link.target ?? describedList('target', {}),
      properties: fieldsOf(properties),
    });
  }

  refuse(error: PeerError): void {
    this.link.refuse({ condition: error.condition ?? 'amqp:internal-error', description: error.description });
  }

  credit(): number {
    // Sendable covers the session's window, the socket and this tick's output budget.
    return this.link.sendable ? this.link.credit : 0;
  }

  send(bytes: Buffer, presettled: boolean): DeliveryRef {
    return this.link.send(bytes, { settled: presettled });
  }

  onOutcome(listener: (d: DeliveryRef, accepted: boolean) => void): void {
    this.listener = listener;
  }

  /** The server heard the peer's outcome for one of our transfers: settled here, then reported. */
  outcome(delivery: Delivery, accepted: boolean): void {
    delivery.settle();
    this.listener?.(delivery, accepted);
  }

  close(error?: PeerError): void {
    if (this.link.detachSent) return;
    this.link.detach(error ? { condition: error.condition ?? 'amqp:internal-error', description: error.description } : undefined);
  }
}

/** Link properties: a map with symbol keys (spec 2.7.3, fields). */
function fieldsOf(record: Record<string, unknown>): AmqpValue {
  return { type: 'map', value: Object.entries(record).map(([k, v]) => [{ type: 'symbol', value: k }, toAmqp(v as Plain)]) };
}
