// Browse a queue (tandem queue browse): a receiver attached as a browser
// (source distribution-mode copy), credit given with drain so the broker sends
// what the queue holds now and no more, then detached. Nothing is acquired,
// consumed or redelivered: the broker settles a browser's copies itself and no
// message's delivery-count changes.
import { AmqpClientError, type AmqpClient } from '../amqp/engine/client.js';
import { terminus, type Link } from '../amqp/engine/link.js';
import { TandemError, errorOfCondition, invalidArgument } from '../broker/errors.js';
import { ConnectError } from './client.js';
import { monotonicNow } from '../util/monotonic-clock.js';

/** Most messages one browse shows (--count): each is read whole, and an operator reads them. */
export const MAX_BROWSE_COUNT = 10_000;

export interface BrowseOptions {
  /** At most this many messages, from the head of the queue. */
  count: number;
  /** Give up (as the broker not answering) after this long. */
  timeoutMs: number;
  /** Each message's bytes as they come, in queue order; position counts from 1. */
  onMessage(payload: Buffer, position: number): void;
}

/** Browse `queue` on an open connection; resolves with how many messages were shown. */
export async function browseQueue(client: AmqpClient, queue: string, o: BrowseOptions): Promise<number> {
  if (!Number.isSafeInteger(o.count) || o.count < 1 || o.count > MAX_BROWSE_COUNT) throw invalidArgument(`a browse shows 1 to ${MAX_BROWSE_COUNT} messages, not ${o.count}`);
  const deadline = monotonicNow() + o.timeoutMs;
  const link = await withDeadline(attachBrowser(client, queue), deadline);
  let seen = 0;
  try {
    // A drain is answered with what the broker could send at once (its output per turn is
    // bounded): asked again for the rest until an answer brings nothing or the count is reached.
    while (seen < o.count) {
      const got = await withDeadline(
        client.fetch(link, o.count - seen, (d) => {
          seen++;
          o.onMessage(d.payload, seen);
          // The broker sends a browser's copies settled (we asked): one it did not is settled here.
          if (!d.remoteSettled) d.settle();
        }),
        deadline,
      ).catch((err: unknown) => {
        throw err instanceof AmqpClientError ? refusal(queue, err, 'browsing') : err;
      });
      if (got === 0) break;
    }
  } finally {
    client.detach(link);
  }
  return seen;
}

async function attachBrowser(client: AmqpClient, queue: string): Promise<Link> {
  let link: Link;
  try {
    const session = await client.openSession();
    link = await client.openReceiver(session, queue, {
      source: terminus('source', { address: queue, distributionMode: 'copy' }),
      // Settled by the broker as sent: nothing for us to settle, no unsettled state kept.
      sndSettleMode: 1,
    });
  } catch (err) {
    throw err instanceof AmqpClientError ? refusal(queue, err, 'attaching') : err;
  }
  // A broker attaches a consumer, not a browser, where no queue's messages can be browsed
  // (an exchange: a private subscription queue): detached before any credit is given.
  const mode = link.source?.fields['distribution-mode'];
  if (mode !== 'copy') {
    client.detach(link);
    throw invalidArgument(`'${queue}' cannot be browsed: the broker attached a consumer, not a browser (is it an exchange?); name a queue`);
  }
  return link;
}

/** The broker's refusal as the CLI's error: its condition names the exit code, its words the reason. */
function refusal(queue: string, err: AmqpClientError, doing: string): Error {
  if (err.kind === 'socket' || err.kind === 'closed' || err.kind === 'timeout') return new ConnectError(`connection lost while ${doing} queue '${queue}': ${err.message}`);
  const why = err.reason ?? err.condition ?? 'no reason given';
  return new TandemError(errorOfCondition(err.condition), `cannot browse queue '${queue}': ${why}`);
}

function withDeadline<T>(p: Promise<T>, deadline: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ConnectError(`no answer from the broker within the timeout while browsing`)), Math.max(1, deadline - monotonicNow()));
  });
  // The loser of the race may still reject later: not an unhandled rejection.
  p.catch(() => undefined);
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
