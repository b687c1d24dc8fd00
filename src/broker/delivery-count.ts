// A message's delivery-count (AMQP 1.0 3.2.1: deliveries that did not end it, a uint in
// its header): counted up by the broker that delivers it, and by whoever sends again a
// message another broker may have delivered (tandem ha diverged republish).

/** The largest delivery-count a header holds. */
export const MAX_DELIVERY_COUNT = 0xffffffff;

/**
 * A delivery-count raised by one delivery, stopping at the header's largest: a sender may
 * write that one, and one more would go out as 0 (not redelivered).
 */
export function oneMoreDelivery(count: number): number {
  return Math.min(MAX_DELIVERY_COUNT, count + 1);
}
