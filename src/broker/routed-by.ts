// The key a message was routed by, kept for its dead letter. A message sent to
// `exchange/key` is routed by that key, not by its subject (docs/jms.md, Topics), and
// its bare message goes on unchanged, subject and all. When it later leaves its queue
// for the queue's alternate exchange (reroute in broker.ts), its dead letter is routed
// by the same key, as RabbitMQ and qpidd route theirs. The key is what the queues'
// records keep as their subject (MessageRecord.subject): the record is what the
// journal, HA backups and DR copies hold, so it is there after a restart, on a promoted
// backup and on a DR copy, without a byte of the message written anew on the publish
// path, and no client can name it but by the address it is permitted to send to.

/**
 * The longest key (UTF-8 bytes) a record keeps in place of the message's subject: the
 * address a link names may be as long as a frame (up to 16 MiB), and a record's key is
 * counted against no queue limit, which count the message's bytes. As long as a topic
 * binding key may be (exchange.ts, MAX_TOPIC_KEY_BYTES). A longer one is not kept: that
 * message's dead letter is routed by its subject, as before keys were kept.
 */
export const MAX_KEPT_ROUTING_KEY_BYTES = 1024;

/**
 * What the records of a message whose subject is `subject`, sent to an address that
 * named `key` (undefined: none), keep as their subject: that key, unless there is none
 * or it is too long to keep; then the subject. Nothing is made: the publish passes it
 * beside the message to each record it writes.
 */
export function keptRoutingKey(subject: string | undefined, key: string | undefined): string | undefined {
  return key === undefined || key === subject || !keptLength(key) ? subject : key;
}

function keptLength(key: string): boolean {
  // A UTF-16 unit is at most 3 UTF-8 bytes: the count is only needed between the two.
  if (key.length * 3 <= MAX_KEPT_ROUTING_KEY_BYTES) return true;
  return key.length <= MAX_KEPT_ROUTING_KEY_BYTES && Buffer.byteLength(key, 'utf8') <= MAX_KEPT_ROUTING_KEY_BYTES;
}
