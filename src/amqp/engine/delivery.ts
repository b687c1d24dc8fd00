// One delivery (spec 2.6.12): a message on a link, its delivery-id in the
// session, its state and settlement on both sides. Its payload is the message
// as encoded on the wire, never re-encoded; a presettled delivery is never
// kept by the session, so it is freed as soon as the host drops it.
import type { Composite } from './composite.js';
import { constantValue } from './frame-output.js';
import type { Link } from './link.js';
import { type ErrorInfo, describedList } from './performative.js';
import type { AmqpValue } from './types.js';

// One value each, shared: the connection joins dispositions of the same state
// object into one range (connection.ts, queueDisposition), and frames copy their
// encoding instead of encoding them again (frame-output.ts).
const ACCEPTED = constantValue(describedList('accepted', {}));
const RELEASED = constantValue(describedList('released', {}));

/** Delivery states and outcomes (3.4) to give update(). */
export const Outcome = {
  accepted: (): AmqpValue => ACCEPTED,
  released: (): AmqpValue => RELEASED,
  rejected: (error?: ErrorInfo): AmqpValue => describedList('rejected', { error }),
  modified: (o: { deliveryFailed?: boolean; undeliverableHere?: boolean } = {}): AmqpValue =>
    describedList('modified', { 'delivery-failed': o.deliveryFailed, 'undeliverable-here': o.undeliverableHere }),
};

export class Delivery {
  /** Settled on our side: no disposition of ours follows. */
  settled: boolean;
  /** The peer settled it (in its transfer, or a disposition). */
  remoteSettled: boolean;
  /** The peer's last state for it (an outcome such as accepted), decoded. */
  remoteState: Composite | undefined;

  constructor(
    readonly link: Link,
    readonly id: number,
    readonly tag: Buffer,
    /** The encoded message: for one we send, as given; for one we receive, once complete. */
    public payload: Buffer,
    readonly messageFormat: number,
    settledAtStart: boolean,
    /** Who sent it: true for one the peer sent us. */
    readonly incoming: boolean,
  ) {
    this.settled = incoming ? false : settledAtStart;
    this.remoteSettled = incoming ? settledAtStart : false;
  }

  /** The name of the peer's outcome (accepted, rejected, released, modified...), if it gave one. */
  get outcome(): string | undefined {
    return this.remoteState?.def.name;
  }

  /** Send this state (and settle, by default). Nothing is sent for a delivery already settled here or presettled. */
  update(state: AmqpValue | undefined, settle = true): void {
    if (this.settled) return;
    this.settled = settle;
    // Once the peer has settled, it has forgotten the delivery: nothing more to say.
    if (this.remoteSettled) {
      this.settled = true;
      this.link.session.forget(this);
      return;
    }
    this.link.session.sendDisposition(this, state);
  }

  accept(): void {
    this.update(Outcome.accepted());
  }

  release(): void {
    this.update(Outcome.released());
  }

  reject(error?: ErrorInfo): void {
    this.update(Outcome.rejected(error));
  }

  /** Settle without a state (a sender settling once the receiver said what became of it). */
  settle(): void {
    this.update(undefined, true);
  }
}
