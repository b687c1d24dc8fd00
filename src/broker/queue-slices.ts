// Work that grows with a queue, done in slices: tandemd is one thread, and while it
// removes a million messages in one go it answers no client, sends no HA heartbeat and
// does not pet the systemd watchdog (a purge of 1M durable messages took 1.7 s, a
// delete of 1M paged durable messages with an alternate exchange 7.4 s;
// docs/stalls.md). Such work runs in slices of about SLICE_MS, with setImmediate
// between them so that I/O (clients, peers, timers) is served meanwhile. Used by the
// admin operations (purge, delete) and by the broker's own deletes (auto-delete).
import { performance } from 'node:perf_hooks';
import type { Broker } from './broker.js';
import { TandemError } from './errors.js';
import type { Queue } from './queue.js';

/** A slice runs steps of STEP_MESSAGES until it has taken this long. */
const SLICE_MS = 20;
const STEP_MESSAGES = 512;

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Run `step(n)` (which handles at most n messages and returns how many it did) until
 * it has done `total` or does fewer than asked, yielding the event loop every SLICE_MS.
 * Before each slice after the first, `stillOn()` says whether to go on: false stops
 * with what was done; a reason (string) throws, as a refused change does.
 */
export async function inSlices(total: number, step: (n: number) => number, stillOn: () => boolean | string): Promise<number> {
  let done = 0;
  // Bounded: every step does at least one message of `total` or ends the loop.
  for (let slice = 0; done < total; slice++) {
    if (slice > 0) {
      await nextTurn();
      const on = stillOn();
      if (typeof on === 'string') throw new TandemError('TANDEM_ERR_PRECONDITION', `stopped after ${done} of ${total} messages: ${on}`);
      if (!on) break;
    }
    const start = performance.now();
    do {
      const asked = Math.min(STEP_MESSAGES, total - done);
      const did = step(asked);
      done += did;
      if (did < asked) return done;
    } while (done < total && performance.now() - start < SLICE_MS);
  }
  return done;
}

/** Go on while `queue` is still the broker's and the broker still takes local changes (not a backup, not stopping). */
export function queueStillOn(broker: Broker, queue: Queue): () => boolean | string {
  return () => broker.localChangesRefused?.() ?? broker.queues.get(queue.name) === queue;
}

/**
 * Purge `limit` available messages (0: all), in slices. A purge has always been one
 * dequeue change per message, so slicing changes no record; what it changes is what
 * others see meanwhile: the queue empties gradually, consumers may take messages the
 * purge has not reached yet, and it removes at most as many messages as were
 * available when it began (so a steady publisher cannot keep it going). A queue
 * deleted meanwhile ends it, with the count so far.
 */
export function purgeInSlices(broker: Broker, queue: Queue, limit = 0): Promise<number> {
  const total = limit > 0 ? Math.min(limit, queue.available) : queue.available;
  return inSlices(total, (n) => queue.purge(n), queueStillOn(broker, queue));
}

/**
 * Delete a queue. One with an alternate exchange first finishes, in slices, the give-back
 * of a detached consumer's messages under way (Queue.giveBackSome), then sends on, in
 * slices, as many available and held messages as it had then (each copy and its dequeue
 * one record; Broker.moveToAlternate), then is deleted as before with what is left:
 * messages out with consumers and any that came meanwhile. The preconditions are
 * checked when it begins; a queue deleted meanwhile by someone else ends it. Returns
 * how many messages the queue held when it began, as deleteQueue does.
 */
export async function deleteQueueInSlices(broker: Broker, name: string, options: { ifEmpty?: boolean; ifUnused?: boolean } = {}): Promise<number> {
  const queue = broker.queue(name);
  // Held (delivery-delayed) messages go in the slices too: a million of them in one step
  // would stall the broker. So do those a detached consumer is still giving back (the
  // queue's last consumer leaving an auto-delete queue begins its delete): acquired, the
  // last step would send them all on at once.
  const waiting = queue.available + queue.scheduledDepth + (queue.givingBack ? queue.acquired : 0);
  if (!queue.settings.alternateExchange || !broker.exchanges.has(queue.settings.alternateExchange) || waiting <= STEP_MESSAGES || options.ifEmpty) {
    return broker.deleteQueue(name, options);
  }
  if (options.ifUnused && queue.consumerCount > 0) return broker.deleteQueue(name, options); // refused, as it says
  const depth = queue.depth;
  const stillOn = queueStillOn(broker, queue);
  // The walk ends at the last acquired row (fewer visited than asked), or earlier when a
  // consumer detaching meanwhile starts it again (what that one gives back later goes in the last step).
  if (queue.givingBack) await inSlices(queue.acquired, (n) => queue.giveBackSome(n), stillOn);
  const moved = await inSlices(queue.available + queue.scheduledDepth, (n) => broker.moveToAlternate(queue, n), stillOn);
  const on = stillOn();
  if (typeof on === 'string') throw new TandemError('TANDEM_ERR_PRECONDITION', `stopped after sending ${moved} messages on to the alternate exchange: ${on}`);
  if (!on) return depth; // deleted meanwhile
  broker.deleteQueue(name);
  return depth;
}
