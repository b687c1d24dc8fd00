// The serving side of the peer-link transport over tandem's own engine: a peer
// (an HA backup, a DR bridge) attached a receiving link to one of our special
// addresses. The one place where replication and DR sources touch the server's
// link: its attach, its credit and the session's window (link.sendable).
import type { Delivery } from '../amqp/engine/delivery.js';
import type { Link } from '../amqp/engine/link.js';
import { fieldsValue, fromAmqp, type Plain } from '../amqp/engine/message.js';
import { describedList } from '../amqp/engine/performative.js';
import type { AmqpValue } from '../amqp/engine/types.js';
import type { DeliveryRef, PeerError, PeerSender } from './transport.js';

/**
 * Transfers sent beyond the peer's credit (control messages: membership, ready) that
 * wait for it. A stream sends a handful of these between flows; a peer that grants
 * no credit while they pile up past this is detached rather than buffered for.
 */
const MAX_WAITING = 1024;

interface Waiting {
  ref: DeliveryRef;
  bytes: Buffer;
  presettled: boolean;
}

export class EnginePeerSender implements PeerSender {
  private listener: ((d: DeliveryRef, accepted: boolean) => void) | undefined;
  /** Sent before there was credit for them, in order. */
  private readonly waiting: Waiting[] = [];
  /** The ref a waiting transfer was given, by the delivery it became once sent. */
  private readonly refs = new Map<Delivery, DeliveryRef>();

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
      properties: fieldsValue(properties as Record<string, Plain>),
    });
  }

  refuse(error: PeerError): void {
    this.link.refuse({ condition: error.condition ?? 'amqp:internal-error', description: error.description });
  }

  credit(): number {
    // Sendable covers the session's window, the socket and this tick's output budget.
    return this.link.sendable ? Math.max(0, this.link.credit - this.waiting.length) : 0;
  }

  /** Send now if credit allows, else as soon as it does (flush), after what waits already. */
  send(bytes: Buffer, presettled: boolean): DeliveryRef {
    if (this.waiting.length === 0 && this.link.sendable) return this.link.send(bytes, { settled: presettled });
    const ref: DeliveryRef = {};
    if (this.waiting.length >= MAX_WAITING) {
      this.close({ condition: 'amqp:resource-limit-exceeded', description: `more than ${MAX_WAITING} transfers waited for credit` });
      return ref;
    }
    this.waiting.push({ ref, bytes, presettled });
    return ref;
  }

  /** Credit or room came back (a flow): what waited goes first, in order. */
  flush(): void {
    // Each turn sends one waiting transfer and uses one credit: bounded by both.
    while (this.waiting.length > 0 && this.link.sendable) {
      const w = this.waiting.shift()!;
      const d = this.link.send(w.bytes, { settled: w.presettled });
      if (!w.presettled) this.refs.set(d, w.ref);
    }
  }

  onOutcome(listener: (d: DeliveryRef, accepted: boolean) => void): void {
    this.listener = listener;
  }

  /** The server heard the peer's outcome for one of our transfers: settled here, then reported. */
  outcome(delivery: Delivery, accepted: boolean): void {
    delivery.settle();
    const ref = this.refs.get(delivery) ?? delivery;
    this.refs.delete(delivery);
    this.listener?.(ref, accepted);
  }

  close(error?: PeerError): void {
    this.waiting.length = 0;
    this.refs.clear();
    if (this.link.detachSent) return;
    this.link.detach(error ? { condition: error.condition ?? 'amqp:internal-error', description: error.description } : undefined);
  }
}
