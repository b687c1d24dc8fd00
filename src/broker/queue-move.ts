// tandem queue move: messages of one queue moved to another, above all a dead-letter
// queue replayed to the queue its messages came from. Each message's enqueue there and
// dequeue here are one record (Broker.moveAvailable), so a crash or an HA failover at any
// instant leaves it in exactly one of the two queues; a move of many runs in slices
// (queue-slices.ts), the event loop free between them.
import type { Broker } from './broker.js';
import { TandemError, invalidArgument } from './errors.js';
import type { Queue } from './queue.js';
import { inSlices, queueStillOn } from './queue-slices.js';

/**
 * Move `limit` available messages (0: all) of `from` to `to`, in slices; returns how many
 * moved. It moves at most as many as were available when it began (a steady publisher
 * cannot keep it going). A delete of either queue meanwhile ends it with the count so
 * far; a broker that became a backup (or is stopping) stops it with
 * TANDEM_ERR_PRECONDITION. An error of a slice (`to` full, a body that cannot be read
 * back, a memory alarm) says how many had moved before it.
 */
export async function moveInSlices(broker: Broker, from: Queue, to: Queue, limit = 0): Promise<number> {
  if (from === to) throw invalidArgument(`queue '${from.name}' cannot be moved to itself`);
  // Not out of or into a DR queue that does not serve here: its messages are the other site's.
  broker.checkDrServing([from.name, to.name]);
  const total = limit > 0 ? Math.min(limit, from.available) : from.available;
  const fromOn = queueStillOn(broker, from);
  const toOn = queueStillOn(broker, to);
  let moved = 0;
  const step = (n: number): number => {
    try {
      // A moved message's body is read back into memory (a paged one too), as a publish's
      // is taken in: checked at each step, as the alarm may come while a long move runs.
      if (broker.memoryAlarm) throw new TandemError('TANDEM_ERR_MEMORY_FULL', `no move while memory is short: ${broker.memoryAlarm}`);
      let did = broker.moveAvailable(from, to, n);
      moved += did;
      if (did > 0 && did < n) {
        // Fewer than asked: none is left (this moves none), or `to` refused the next (this throws why).
        const more = broker.moveAvailable(from, to, n - did);
        moved += more;
        did += more;
      }
      return did;
    } catch (err) {
      if (!(err instanceof TandemError)) throw err;
      throw new TandemError(err.code, `${err.message}; ${moved} messages were moved from '${from.name}' to '${to.name}' before`, { cause: err });
    }
  };
  return inSlices(total, step, () => {
    const on = fromOn();
    return on === true ? toOn() : on;
  });
}
