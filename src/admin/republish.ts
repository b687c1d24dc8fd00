// Publish stored messages again, each to the queue it was on, marked redelivered:
// the broker that stored them may have delivered them, so the header's delivery-count
// goes one above the stored one (JMSRedelivered), and its ttl is what its stored expiry
// leaves; the rest goes as stored (the header's other fields, and the bare message byte
// for byte: same message id, properties and body, so duplicate detection still knows
// them). It reports how many of them, counted from the first, the broker has accepted:
// a caller that records that count can stop at any point and go on later without
// sending any message twice.
import { AmqpClient, AmqpClientError } from '../amqp/engine/client.js';
import type { Link } from '../amqp/engine/link.js';
import type { Session } from '../amqp/engine/session.js';
import { ConnectError, clientOptions, connectFailure, type BrokerAddress } from './client.js';
import { withDeliveryCount } from '../amqp/message-codec.js';
import type { MessageRecord } from '../broker/changes.js';
import { TandemError } from '../broker/errors.js';
import { oneMoreDelivery } from '../broker/delivery-count.js';
import { hostPort } from '../util/host-port.js';

export interface StoredMessage {
  queue: string;
  /** The message as the broker stored it: its sender's bytes, the delivery-count it had reached, and when it expires (0: never). */
  message: Pick<MessageRecord, 'bytes' | 'headerLength' | 'deliveryCount' | 'expiresAt'>;
}

/**
 * What is sent for a stored message: in doubt, so counted as delivered once more; and
 * with the ttl its stored expiry leaves (at least 1 ms: one already past expires on
 * arrival, dead-lettered as it would have been), so neither its own ttl nor its queue's
 * default starts again on the primary.
 */
const redelivered = (m: StoredMessage['message']): Buffer => withDeliveryCount(m, oneMoreDelivery(m.deliveryCount), m.expiresAt > 0 ? m.expiresAt - Date.now() : undefined);

/** Transfers in flight at once. */
const WINDOW = 100;

/**
 * Send `messages` in order; `onAccepted(n)` is called whenever the first n are all
 * accepted (n only grows). Resolves with the count once every one is accepted;
 * rejects, after reporting what was accepted, on the first one the broker does not
 * accept, when the connection fails, or at a stored message it cannot read (once the
 * ones before it are settled). At most WINDOW messages are held at once.
 */
export async function republish(address: BrokerAddress, messages: Iterable<StoredMessage>, onAccepted: (n: number) => void, timeoutMs = 30_000): Promise<number> {
  const source = messages[Symbol.iterator]();
  let pending = source.next();
  if (pending.done) return 0;
  let client: AmqpClient;
  try {
    // The connect has its own deadline: a host that drops SYNs would hold it for minutes.
    client = await AmqpClient.connect(clientOptions(address, `tandem-republish-${process.pid}`, timeoutMs));
  } catch (err) {
    throw connectFailure(address, err);
  }
  return new Promise((resolve, reject) => {
    let next = 0;
    let contiguous = 0;
    let inFlight = 0;
    let finished = false;
    /**
     * A stored message that could not be read or sent again: none from it on is sent, and
     * the run ends with this error once the ones in flight are settled, so that every
     * message the broker accepted is counted (a later run would send it twice otherwise).
     */
    let unreadable: Error | undefined;
    const stopAt = (err: Error) => {
      unreadable = err;
      if (inFlight === 0) finish(err);
    };
    /** Accepted, but not all before them yet: bounded by WINDOW. */
    const acceptedAhead = new Set<number>();
    const senders = new Map<string, Promise<Link>>();
    let session: Promise<Session> | undefined;
    let idle: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => finish(new ConnectError(`no answer from ${hostPort(address.host, address.port)} within ${timeoutMs} ms`)), timeoutMs);
    };
    const finish = (err?: Error) => {
      if (finished) return;
      finished = true;
      clearTimeout(idle);
      client.onClosed = undefined;
      client.close().catch(() => undefined);
      if (err) reject(err);
      else resolve(contiguous);
    };
    client.onClosed = () => finish(new ConnectError(`connection to ${hostPort(address.host, address.port)} lost after ${contiguous} messages were accepted`));
    const senderFor = (queue: string): Promise<Link> => {
      let s = senders.get(queue);
      if (!s) {
        session ??= client.openSession();
        s = session.then((opened) => client.openSender(opened, queue));
        senders.set(queue, s);
      }
      return s;
    };
    const refused = (queue: string, err: Error) => {
      const why = err instanceof AmqpClientError ? (err.reason ?? err.condition ?? err.message) : err.message;
      finish(new TandemError('TANDEM_ERR_PRECONDITION', `the broker refused to take messages for queue '${queue}': ${why ?? 'no reason given'}`));
    };
    const onOutcome = (i: number, queue: string, outcome: string) => {
      inFlight--;
      if (finished) return;
      arm();
      if (outcome !== 'accepted') return finish(new TandemError('TANDEM_ERR_PRECONDITION', `the broker ${outcome} message ${i + 1} (queue '${queue}'); the ${contiguous} before it were accepted`));
      acceptedAhead.add(i);
      const before = contiguous;
      while (acceptedAhead.delete(contiguous)) contiguous++;
      if (contiguous > before) onAccepted(contiguous);
      if ((pending.done || unreadable) && inFlight === 0) return finish(unreadable);
      pump();
    };
    const pump = (): void => {
      // Bounded: at most WINDOW transfers in flight.
      while (!finished && !unreadable && !pending.done && inFlight < WINDOW) {
        const { queue, message } = pending.value;
        let bytes: Buffer;
        try {
          bytes = redelivered(message);
        } catch (err) {
          return stopAt(new TandemError('TANDEM_ERR_PRECONDITION', `message ${next + 1} (queue '${queue}') cannot be sent: its stored header does not parse (${(err as Error).message})`));
        }
        const i = next++;
        inFlight++;
        // Sends on one link keep their order: each waits for the link, then for credit, in turn.
        senderFor(queue)
          .then((link) => client.send(link, bytes))
          .then(
            (state) => onOutcome(i, queue, state?.def.name ?? 'accepted'),
            (err: Error) => refused(queue, err),
          );
        try {
          pending = source.next();
        } catch (err) {
          return stopAt(err as Error);
        }
      }
    };
    arm();
    pump();
  });
}
