// When a message arriving here expires by what its sender set: the header's ttl (from
// arrival) and properties.absolute-expiry-time each say when it has expired (AMQP 1.0
// 3.2.1, 3.2.4); with both, the earlier one. 0: never (a queue's default ttl may apply).

export function messageExpiry(msg: { ttlMs: number | undefined; absoluteExpiry: number | undefined }, now: number): number {
  let expiresAt = 0;
  if (msg.ttlMs !== undefined && msg.ttlMs > 0) expiresAt = now + msg.ttlMs;
  if (msg.absoluteExpiry) {
    // A time before 1970 (a timestamp is signed) has passed: the first moment there is, not a negative time no record can hold.
    const at = Math.max(1, msg.absoluteExpiry);
    if (expiresAt === 0 || at < expiresAt) expiresAt = at;
  }
  return expiresAt;
}
