// Every broker connection starts here: the socket is handed to a rhea connection,
// but the bytes it reads go to tandem's frame guard (engine/frame-guard.ts) first,
// and rhea reads only what the guard lets through. This is the seam between the
// socket and the library, not a change to the library: rhea's own 'data' listener
// is taken off the socket and called by the guard instead.
//
// On a violation the guard stops for good and the client gets the spec's answer:
// before the AMQP layer, our protocol header (if nothing went out yet) and the
// end of the socket (2.2; SASL has no error frame to carry a reason); after it, a
// close carrying the condition and what was wrong (after our open, which a close
// must follow). The reason is logged as fields of one structured line.
import type { Socket } from 'node:net';
import type { Connection, ConnectionOptions, Container } from 'rhea';
import type { Logger } from '../ops/log.js';
import type { AmqpError } from './engine/errors.js';
import { DEFAULT_GUARD_OPTIONS, FrameGuard, type GuardOptions, type GuardViolation, type UnsettledRange } from './engine/frame-guard.js';
import { ProtocolId, protocolHeader } from './engine/frames.js';

/** How long a refused client may keep its half of the socket before it is dropped. */
const REFUSED_LINGER_MS = 2000;

export interface GuardedAcceptOptions {
  maxFrameSize: number;
  maxMessageSize: number;
  /** A delivery on a link outgrew max-message-size: detach that link with `error`. */
  onOversize(connection: Connection, channel: number, handle: number, error: AmqpError): void;
  log: Logger;
}

/** The parts of rhea's connection the guard's answers need (a session by the client's channel, open and close). */
interface RheaConnectionInternals {
  socket?: Socket;
  remote_channel_map?: Record<number, RheaSessionInternals | undefined>;
  state: { local_open: boolean; close_requests: number };
  open(): void;
  close(error?: { condition: string; description: string }): void;
  _process(): void;
  transport?: { write(socket: unknown): void };
  accept(socket: Socket): Connection;
}

interface RheaDeliveries {
  size: number;
  head: number;
  entries: ({ id?: number } | undefined)[];
}

interface RheaSessionInternals {
  outgoing?: { deliveries?: RheaDeliveries };
  incoming?: { deliveries?: RheaDeliveries };
}

/** Hand `socket` to a new rhea connection of `container`, reading through a frame guard. */
export function acceptGuarded(container: Container, socket: Socket, connectionOptions: ConnectionOptions, options: GuardedAcceptOptions): Connection {
  const conn = container.create_connection(connectionOptions) as unknown as RheaConnectionInternals;
  conn.accept(socket);
  const rheaInputs = socket.listeners('data') as ((b: Buffer) => void)[];
  if (rheaInputs.length !== 1) {
    // Not the rhea this was written against: refuse to run unguarded.
    socket.destroy();
    throw new Error(`expected rhea to read the socket with one 'data' listener, found ${rheaInputs.length}`);
  }
  const rheaInput = rheaInputs[0]!;
  socket.removeListener('data', rheaInput);
  const remote = `${socket.remoteAddress}:${socket.remotePort}`;
  const guard = new FrameGuard(
    {
      forward: (bytes) => rheaInput(bytes),
      refuse: (v) => refuse(conn, socket, v, remote, options.log),
      unsettled: (channel, sentByBroker) => unsettledOf(conn, channel, sentByBroker),
      oversize: (channel, handle, error) => options.onOversize(conn as unknown as Connection, channel, handle, error),
    },
    { ...DEFAULT_GUARD_OPTIONS, maxFrameSize: options.maxFrameSize, maxMessageSize: options.maxMessageSize },
  );
  socket.on('data', (chunk: Buffer) => guard.push(chunk));
  return conn as unknown as Connection;
}

function unsettledOf(conn: RheaConnectionInternals, channel: number, sentByBroker: boolean): UnsettledRange | undefined {
  const session = conn.remote_channel_map?.[channel];
  const deliveries = sentByBroker ? session?.outgoing?.deliveries : session?.incoming?.deliveries;
  if (!deliveries || deliveries.size === 0) return undefined;
  const first = deliveries.entries[deliveries.head]?.id;
  if (typeof first !== 'number') return undefined;
  return { first, last: first + deliveries.size - 1 };
}

function refuse(conn: RheaConnectionInternals, socket: Socket, v: GuardViolation, remote: string, log: Logger): void {
  log.info({ remote, condition: v.condition, reason: v.description, stage: v.stage }, 'connection refused: bad input from the client');
  if (socket.destroyed || socket.writableEnded) return;
  try {
    if (v.stage !== 'header' && v.stage !== 'sasl') {
      // rhea has the client's AMQP header. A close must follow our open: rhea writes
      // its header and open first if they have not gone out yet.
      if (!conn.state.local_open && conn.state.close_requests === 0) conn.open();
      conn.close({ condition: v.condition, description: v.description });
      conn._process();
      conn.transport?.write(socket);
    } else if (socket.bytesWritten === 0) {
      // 2.2: a header we cannot take is answered with one we support, then the socket ends.
      socket.write(protocolHeader(ProtocolId.sasl));
    }
  } finally {
    socket.end();
    setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref();
  }
}
