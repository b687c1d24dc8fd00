// The serving side of the peer-link transport over rhea: a peer (an HA backup,
// a DR bridge) attached a receiving link to one of our special addresses. The
// one place where replication and DR sources touch rhea's sender: its attach
// frames, its credit and the session's outgoing window.
import type { Delivery, Sender } from 'rhea';
import type { DeliveryRef, PeerError, PeerSender } from './transport.js';

/** What rhea keeps on a sender and does not type. */
interface RheaSenderState {
  remote: { attach: { properties?: Record<string, unknown> } };
  local: { attach: { source?: unknown; properties?: unknown } };
  credit: number;
  delivery_count: number;
  session: { outgoing: { available(): number } };
}

export class RheaPeerSender implements PeerSender {
  private sent = 0;
  private closed = false;
  private listener: ((d: DeliveryRef, accepted: boolean) => void) | undefined;

  constructor(private readonly sender: Sender) {}

  private get state(): RheaSenderState {
    return this.sender as unknown as RheaSenderState;
  }

  get hello(): Record<string, unknown> {
    return this.state.remote.attach.properties ?? {};
  }

  accept(address: string, properties: Record<string, unknown>): void {
    // rhea answers the attach on its next tick: what is set now goes out in it.
    this.state.local.attach.properties = properties;
    this.sender.set_source({ address } as never);
  }

  refuse(error: PeerError): void {
    this.state.local.attach.source = undefined;
    this.close(error);
  }

  credit(): number {
    // rhea's `credit` is what the peer granted at its last flow; our transfers since then
    // (sent minus the delivery-count it had seen) are taken off it.
    const l = this.state;
    return Math.min(l.credit - (this.sent - l.delivery_count), l.session.outgoing.available());
  }

  send(bytes: Buffer, presettled: boolean): DeliveryRef {
    const d = this.sender.send(bytes, undefined, 0);
    this.sent++;
    if (presettled && !d.settled) d.update(true);
    return d;
  }

  onOutcome(listener: (d: DeliveryRef, accepted: boolean) => void): void {
    this.listener = listener;
  }

  /** The server heard the peer's outcome for one of our transfers. */
  outcome(delivery: Delivery, accepted: boolean): void {
    if (!delivery.settled) delivery.update(true);
    this.listener?.(delivery, accepted);
  }

  close(error?: PeerError): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.sender.close(error as never);
    } catch {
      // the link is already gone
    }
  }
}
