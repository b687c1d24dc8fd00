// Sockets still in their handshake, per client address: one address may not hold
// every socket slot of a listener with sockets that never open. Each listener takes
// at most max-connections + 64 sockets (Node closes the rest at accept), and a socket
// that has not sent its AMQP open holds its slot until handshake-timeout; the admin
// reserve is checked only at the open. So one host that opened sockets and said
// nothing (a flood, a port scanner, a load balancer's health check gone wrong), again
// as each was closed, locked every other client out, and with them the backups
// reconnecting to their primary, DR bridges, the agent and the CLI.
//
// A socket is counted from its TCP accept (before TLS) to its AMQP open, or its close.
// Past its address's share a new socket is closed at once, before a byte of it is
// read (as nginx's limit_conn or HAProxy's src_conn_cur do), and counted. A client
// that opens quickly holds its count for milliseconds, so a failover storm from
// behind one NAT address (hundreds at once) passes; past that its clients are closed
// and retry, which also keeps a storm of logins from queueing past the deadline.
import type { Server, Socket } from 'node:net';
import type { Logger } from '../ops/log.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import { AddressTally } from '../util/address-tally.js';
import { addressGroup } from '../util/host-port.js';

/** The most handshakes one address holds by default; a quarter of a smaller max-connections. */
export const DEFAULT_HANDSHAKES_PER_ADDRESS = 256;
/**
 * The fewest by default: a quarter of a small max-connections (1 for a limit under 8)
 * refused the second of two clients one host opened at once (the agent and the CLI, an
 * application's pool). Half the free slots bound an address on a small listener anyway.
 */
export const FEWEST_HANDSHAKES_PER_ADDRESS = 8;

/** max-handshakes-per-address when tandemd.conf sets none. */
export function defaultHandshakesPerAddress(maxConnections: number): number {
  return Math.max(FEWEST_HANDSHAKES_PER_ADDRESS, Math.min(DEFAULT_HANDSHAKES_PER_ADDRESS, Math.floor(maxConnections / 4)));
}

export class HandshakeGate {
  private readonly handshakes = new AddressTally();
  private readonly refusals = new LogThrottle();
  /** Sockets closed at accept for their address's share, since the start. */
  refused = 0;

  /** `perAddress`: max-handshakes-per-address (0: no share is kept). */
  constructor(
    private readonly perAddress: number,
    private readonly log: Logger,
  ) {}

  /**
   * Take the sockets `server` accepts, at most `maxSockets` at once: each one its address
   * may start is handed to `deliver` with `opened`, to call at its AMQP open (its close
   * calls it too). The share is the lesser of `perAddress` and half the slots still free,
   * so that when other clients fill the listener (up to the admin reserve) one address
   * still cannot take the last slots from the admins.
   */
  guard(server: Server, maxSockets: number, deliver: (socket: Socket, opened: () => void) => void): void {
    server.maxConnections = maxSockets;
    let live = 0;
    server.on('connection', (socket: Socket) => {
      live++;
      socket.once('close', () => live--);
      const address = addressGroup(socket.remoteAddress);
      const held = this.handshakes.count(address);
      // Slots free before this socket took one.
      const free = maxSockets - live + 1;
      if (this.perAddress > 0 && (held >= this.perAddress || 2 * (held + 1) > free)) {
        socket.destroy();
        this.refused++;
        this.logRefusal(address, held);
        return;
      }
      const opened = this.handshakes.take(address);
      socket.once('close', opened);
      deliver(socket, opened);
    });
  }

  /** One line per interval for each of the two reasons, naming the address that was refused first. */
  private logRefusal(address: string, held: number): void {
    const reason = held >= this.perAddress ? `max-handshakes-per-address is ${this.perAddress}` : 'half the connection slots still free';
    const suppressed = this.refusals.admit(held >= this.perAddress ? 'cap' : 'share');
    if (suppressed === undefined) return;
    this.log.warn({ remote: address, handshakes: held, reason, ...suppressedField(suppressed) }, 'connection refused at accept: its address holds its share of connections that have not opened');
  }
}
