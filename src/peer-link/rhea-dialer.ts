// The dialling side of the peer-link transport over rhea: the one place where a
// peer link reads rhea's connection, receiver and socket objects. Whatever rhea
// keeps internally (remote open, remote attach, link errors, the socket) is read
// here and handed on as plain values.
import rhea, { type Connection, type Container, type EventContext, type Receiver } from 'rhea';
import { tlsConnectOptions } from '../admin/link-tls.js';
import { externalMechanisms } from '../admin/client.js';
import { connectWithin } from '../util/tcp-reach.js';
import type { ConnectionEvents, DialOptions, PeerConnection, PeerDialer, PeerError, PeerReceiver, ReceiverEvents, ReceiverOptions } from './transport.js';
import { bodyBytes } from './sections.js';

/** What rhea keeps about the far end and does not type. */
interface RheaRemote {
  remote?: { open?: { properties?: Record<string, unknown> }; attach?: { source?: { address?: unknown } | null; properties?: Record<string, unknown> } };
  error?: PeerError;
  socket?: { on(ev: 'data', cb: () => void): void; destroy(): void };
}
const remoteOf = (x: unknown): RheaRemote => x as RheaRemote;

export class RheaDialer implements PeerDialer {
  private readonly container: Container;

  /** `containerId`: the container id our opens carry (the peer logs it). */
  constructor(containerId: string) {
    this.container = rhea.create_container({ id: containerId });
  }

  dial(o: DialOptions, events: ConnectionEvents): PeerConnection {
    const c = o.credentials;
    const conn = this.container.connect({
      host: o.host,
      port: o.port,
      connect: connectWithin(o.handshakeDeadlineMs, o.tls ? tlsConnectOptions(o.host, o.tls) : undefined),
      reconnect: false,
      idle_time_out: o.idleTimeoutMs,
      properties: o.properties,
      ...(c.mechanism === 'PLAIN' ? { username: c.user, password: c.password } : {}),
      // EXTERNAL: rhea offers it when the connection is TLS and `cert` is among its options.
      ...(c.mechanism === 'EXTERNAL' ? { ...(c.orAnonymous ? externalMechanisms() : {}), enable_sasl_external: true, cert: o.tls?.cert } : {}),
    } as never);
    conn.on('connection_open', (ctx: EventContext) => {
      remoteOf(ctx.connection).socket?.on('data', () => events.heard());
      events.opened(remoteOf(ctx.connection).remote?.open?.properties ?? {});
    });
    conn.on('connection_error', (ctx: EventContext) => events.closedWithError(remoteOf(ctx.connection).error ?? {}));
    conn.on('disconnected', (ctx: EventContext) => events.disconnected((ctx as unknown as { error?: Error & { code?: string } }).error));
    // Reported through the events above; rhea would otherwise throw an unheard error.
    conn.on('error', () => undefined);
    return new RheaPeerConnection(conn);
  }
}

class RheaPeerConnection implements PeerConnection {
  private abandoned = false;

  constructor(private readonly conn: Connection) {}

  openReceiver(o: ReceiverOptions, events: ReceiverEvents): PeerReceiver {
    const receiver: Receiver = this.conn.open_receiver({
      source: { address: o.address },
      autoaccept: false,
      credit_window: o.creditWindow,
      properties: o.properties,
    } as never);
    receiver.on('receiver_open', (ctx: EventContext) => {
      const attach = remoteOf(ctx.receiver).remote?.attach;
      events.attached({ source: attach?.source ? { address: attach.source.address } : undefined, properties: attach?.properties ?? {} });
    });
    receiver.on('message', (ctx: EventContext) => {
      const delivery = ctx.delivery!;
      const message = ctx.message as { application_properties?: Record<string, unknown>; body?: unknown };
      events.message(
        { application_properties: message.application_properties ?? {}, body: bodyBytes(message) },
        {
          accept: () => {
            if (!delivery.settled) delivery.accept();
          },
          reject: (error) => {
            if (!delivery.settled) delivery.reject(error as never);
          },
        },
      );
    });
    receiver.on('receiver_close', (ctx: EventContext) => events.detached(remoteOf(ctx.receiver).error));
    receiver.on('receiver_error', () => undefined);
    return { addCredit: (n) => receiver.add_credit(n) };
  }

  abandon(): void {
    if (this.abandoned) return;
    this.abandoned = true;
    try {
      this.conn.close();
    } catch {
      // already closed
    }
    remoteOf(this.conn).socket?.destroy();
  }
}
