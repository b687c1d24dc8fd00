// How a broker that does not serve clients (an HA backup) turns a client away
// so that the client learns why and still moves on to its next address.
//
// The natural answer is an open frame followed by a close carrying
// amqp:connection:forced and a description. rhea handles it well: it reports
// the error (connection_error), treats `forced` as non-fatal and reconnects to
// the next of its connection_details. python-qpid-proton 0.37 does not, for two
// reasons found in proton/_reactor.py and _handlers.py:
//
//  1. MessagingHandler.on_connection_remote_close ignores a `forced` close (it
//     neither reports it nor closes its end), so the transport's output side
//     stays open and _Connector.on_transport_closed, which is what reconnects,
//     never runs: the client hangs. It only moves on when a write to the dead
//     socket fails. So our refusing open frame asks for heartbeats (a short
//     idle-time-out, which proton honours whatever the application set) and we
//     close the socket soon after the close frame: proton's next heartbeats fail
//     and it reconnects.
//  2. _Connector.on_connection_remote_open restarts its list of URLs from the
//     first one on every open frame it receives, refusals included. A client
//     whose list starts with a backup would come back to it for ever and never
//     reach a primary further down the list. So the open + close answer is given
//     once per client container within REMEMBER_MS; a client that comes back
//     sooner gets its transport dropped without a frame, which proton counts as
//     a failed attempt and so goes on down its list.
//
// amqp:connection:redirect is not used: proton (Python and C++) does not follow
// it and rhea treats it as fatal, so both would stop failing over. The
// primary's address goes into the forced error's info instead (network-host,
// port, as redirect would carry them), for tools and people who read it.
import type { Socket } from 'node:net';
import type { Connection } from './engine/connection.js';
import { fieldsValue, type Plain } from './engine/message.js';
import { monotonicNow } from '../util/monotonic-clock.js';

export interface Refusal {
  condition: string;
  description: string;
  info?: Record<string, unknown>;
}

/** How long a refused client container gets dropped transports instead of a close frame. */
const REMEMBER_MS = 30_000;
const MAX_REMEMBERED = 4096;
/** idle-time-out (ms) of the refusing open frame: proton sends heartbeats every half of it. */
const REFUSAL_IDLE_MS = 100;
/** How long the socket stays after the close frame, for clients that answer it. */
const LINGER_MS = 100;

export class ConnectionRefuser {
  /** Container id (and remote host) → when it was last told why, in ms. */
  private readonly told = new Map<string, number>();

  constructor(private readonly now: () => number = monotonicNow) {}

  /**
   * Turn the client of a just-opened connection away: with an AMQP close saying
   * why, or, if this client was told recently, by dropping the transport.
   */
  refuse(conn: Connection, socket: Socket, key: string, refusal: Refusal): 'closed' | 'dropped' {
    const now = this.now();
    const last = this.told.get(key);
    if (last !== undefined && now - last < REMEMBER_MS) {
      socket.destroy();
      return 'dropped';
    }
    this.remember(key, now);
    answerAndClose(conn, socket, refusal);
    return 'closed';
  }

  private remember(key: string, now: number): void {
    this.told.delete(key);
    this.told.set(key, now);
    // Oldest first (insertion order): forget expired entries and keep the map bounded.
    for (const [k, at] of this.told) {
      if (this.told.size <= MAX_REMEMBERED && now - at < REMEMBER_MS) break;
      this.told.delete(k);
    }
  }
}

/**
 * Answer a just-opened connection with our open and a close carrying `refusal`, then
 * end the socket (for clients that ignore the close, as proton does with `forced`).
 */
export function answerAndClose(conn: Connection, socket: Socket, refusal: Refusal): void {
  // Our open has not gone out yet (the engine sends it after the host saw the client's): it takes this idle-time-out.
  conn.advertiseIdleTimeout(REFUSAL_IDLE_MS);
  // The transport writes open + close and ends our side; the socket goes soon after
  // (a client that answers the close, like rhea, has long gone by then).
  forceClose(conn, socket, refusal);
}

/**
 * Close an open connection on purpose: a close frame carrying `error`, our end of the
 * socket once it is written, and the socket destroyed LINGER_MS later for clients that
 * neither answer the close nor end their side (proton with `forced`): their next write
 * fails, and they reconnect.
 */
export function forceClose(conn: Connection, socket: Socket, error: Refusal): void {
  conn.close({ condition: error.condition, description: error.description, info: error.info ? fieldsValue(error.info as Record<string, Plain>) : undefined });
  setImmediate(() => {
    if (socket.destroyed) return;
    setTimeout(() => socket.destroy(), LINGER_MS).unref();
  });
}
