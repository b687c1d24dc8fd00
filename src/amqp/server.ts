// The AMQP 1.0 listener: one rhea container, plain and TLS sockets, SASL
// (ANONYMOUS only with auth off, PLAIN against the users file, EXTERNAL for
// verified client certificates with tls-external-user), and the
// routing of rhea events to the connection objects that handle them.
import { type AddressInfo, type Server, type Socket, createServer } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import { hostname } from 'node:os';
import rhea, { type Connection, type Container, type Delivery, type EventContext, type Receiver, type Sender } from 'rhea';
import type { Broker } from '../broker/broker.js';
import type { Queue } from '../broker/queue.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { AdminContext, ConnectionInfo } from '../admin/operations.js';
import type { UserDirectory } from '../admin/users.js';
import type { Acl } from '../admin/acl.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle } from '../ops/log-throttle.js';
import { ClientConnection, type ConnectionHost, type ConnectionPolicy } from './client-connection.js';
import type { AmqpError } from './engine/errors.js';
import { acceptGuarded } from './guarded-accept.js';
import { installRheaPatches } from './rhea-patches.js';
import { ManagementNode } from './management.js';
import { ConnectionRefuser, answerAndClose, type Refusal } from './refusal.js';
import { LoginThrottle } from './login-throttle.js';
import { plainServer } from './sasl-plain.js';
import { externalConnectionOptions, installExternal, type ExternalUserMapping } from './sasl-external.js';
import { TlsRefusalLog, listenerContext, reloadListenerTls } from './tls-listener.js';

/**
 * Unsettled messages a sender may have in flight on one link (credit is topped up at
 * half). A durable message is settled only after its group's sync, so a sender's
 * rate is about this window over the settlement latency: with 500 a client that keeps
 * 1000 unsettled waited on credit. 1000 is ActiveMQ Artemis' default (`amqpCredits`);
 * the memory alarm still stops senders when memory runs short.
 */
const SENDER_CREDIT = 1000;

/**
 * Sockets accepted beyond `max-connections`. A connection over the limit is let
 * through SASL to its open and closed with amqp:resource-limit-exceeded, so its client
 * learns why; past this margin (sockets held idle before SASL, as a flood would) the
 * kernel's accept is answered by a bare TCP close, so memory stays bounded.
 */
const OVER_LIMIT_SOCKETS = 64;

export interface ServerOptions {
  host: string;
  /** undefined: no plaintext listener (TLS only). */
  port: number | undefined;
  /** externalUser: SASL EXTERNAL for verified client certificates, naming the user so (sasl-external.ts). */
  tls?: { port: number; cert: string; key: string; ca?: string; crl?: string; requireClientCert: boolean; externalUser?: ExternalUserMapping };
  auth: boolean;
  users: UserDirectory;
  maxFrameSize: number;
  maxMessageSize: number;
  idleTimeoutMs: number;
  maxConnections: number;
  autoCreate: boolean;
  /** Permissions on names (acl-file; permissive without one). */
  acl: Acl;
  /** Properties of our open frame. */
  openProperties?: Record<string, unknown>;
}

/** A sender link handled outside the queue machinery (the HA replication stream). */
export interface SpecialSender {
  onFlow(): void;
  onSettled(delivery: Delivery, outcome: 'accepted' | 'released' | 'rejected' | 'modified' | 'settled'): void;
  onClose(): void;
}

/** Decides whether a freshly opened connection may stay (HA backups refuse clients). */
export type AdmissionCheck = (conn: ClientConnection) => Refusal | undefined;

export class AmqpServer {
  readonly container: Container;
  readonly management: ManagementNode;
  private readonly connections = new Map<Connection, ClientConnection>();
  private readonly servers: Server[] = [];
  /** The AMQPS listener, whose files reloadTls reads again. */
  private tlsServer: TlsServer | undefined;
  private readonly dirty = new Set<Queue>();
  private flushScheduled = false;
  private nextId = 0;
  private closing = false;
  private readonly refuser = new ConnectionRefuser();
  /** A flood of connections over the limit logs one line per interval, not one each. */
  private readonly overLimitLog = new LogThrottle();
  /** Failed logins slow the next ones; the web console shares it (a guess there counts here). */
  readonly loginThrottle = new LoginThrottle();
  admission: AdmissionCheck | undefined;
  checkLink: ConnectionHost['checkLink'];
  /** Why local changes are refused right now (an HA backup), if they are. */
  readOnly: (() => string | undefined) | undefined;
  /** Handlers of special sender links (HA replication), by link. */
  readonly specialSenders = new Map<Sender, SpecialSender>();
  openSpecialSender: ((conn: ClientConnection, address: string, sender: Sender) => SpecialSender | undefined | false) | undefined;

  constructor(
    readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly options: ServerOptions,
    private readonly log: Logger,
    statusOf: () => Record<string, unknown>,
  ) {
    installRheaPatches();
    // Server links: we settle and grant credit ourselves. rhea by default reports a
    // modified outcome as released, losing delivery-failed and undeliverable-here.
    this.container = rhea.create_container({
      id: `tandem@${hostname()}`,
      autoaccept: false,
      credit_window: 0,
      treat_modified_as_released: false,
    } as never);
    const admin: AdminContext = {
      broker,
      connections: () => this.connectionInfos(),
      closeConnection: (id) => this.closeConnection(id),
      status: statusOf,
    };
    this.management = new ManagementNode(admin, log);
    this.configureSasl();
    this.wireEvents();
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  /** Bind the listeners; resolves with the ports actually bound. */
  async listen(): Promise<{ port?: number; tlsPort?: number }> {
    const common = {
      max_frame_size: this.options.maxFrameSize,
      idle_time_out: this.options.idleTimeoutMs || undefined,
      container_id: this.container.id,
      // Small frames (settlements, flow) must not wait for Nagle and delayed ACKs.
      tcp_no_delay: true,
      // Lets a broker that finds itself in ha-brokers-url recognise itself.
      properties: this.options.openProperties,
      // qpid-jms makes shared subscriptions only with a broker that offers them
      // (subscriptions.ts), and sends an anonymous producer's messages down one link.
      offered_capabilities: ['SHARED-SUBS', 'ANONYMOUS-RELAY'],
    };
    // Our own listeners, so that every socket is read through the frame guard (guarded-accept.ts).
    const accept = (socket: Socket, extra: Record<string, unknown> = {}) => {
      try {
        return acceptGuarded(this.container, socket, { ...common, ...extra } as never, {
          maxFrameSize: this.options.maxFrameSize,
          maxMessageSize: this.options.maxMessageSize,
          onOversize: (rc, channel, handle, error) => this.onOversizeDelivery(rc, channel, handle, error),
          log: this.log,
        });
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'connection not accepted');
        return undefined;
      }
    };
    let port: number | undefined;
    if (this.options.port !== undefined) {
      const plain = createServer((socket) => accept(socket));
      plain.listen({ host: this.options.host, port: this.options.port });
      this.servers.push(plain);
      port = await boundPort(plain);
      plain.maxConnections = this.options.maxConnections + OVER_LIMIT_SOCKETS;
    }
    let tlsPort: number | undefined;
    if (this.options.tls) {
      const t = this.options.tls;
      const refusals = new TlsRefusalLog(this.log);
      const secure = createTlsServer(
        {
          // cert, key, ca and crl (tls-listener.ts; the config check already warned about the CRLs).
          ...listenerContext(t).options,
          // EXTERNAL needs the client's certificate; without tls-require-client-cert a
          // client without one (or with one tls-ca did not sign) still gets in, by PLAIN.
          requestCert: t.requireClientCert || t.externalUser !== undefined,
          rejectUnauthorized: t.requireClientCert,
        },
        (socket: TLSSocket) => {
          refusals.untrusted(socket);
          if (t.externalUser === undefined) return void accept(socket);
          const conn = accept(socket, externalConnectionOptions(socket));
          if (!conn) return;
          try {
            installExternal(conn, socket, { users: this.options.users, mapping: t.externalUser, log: this.log });
          } catch (err) {
            this.log.error({ err: (err as Error).message }, 'connection not accepted');
          }
        },
      );
      refusals.watch(secure);
      secure.listen({ host: this.options.host, port: t.port });
      this.servers.push(secure);
      this.tlsServer = secure;
      tlsPort = await boundPort(secure);
      secure.maxConnections = this.options.maxConnections + OVER_LIMIT_SOCKETS;
    }
    return { port, tlsPort };
  }

  /** SIGHUP: new TLS handshakes use tls-cert, tls-key, tls-ca and tls-crl as they are now; false if they did not read. */
  reloadTls(): boolean {
    if (!this.tlsServer || !this.options.tls) return true;
    return reloadListenerTls(this.tlsServer, this.options.tls, this.log);
  }

  /** Hand available messages of a queue to its consumers, batched per event-loop turn. */
  schedule(queue: Queue): void {
    this.dirty.add(queue);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  /** Stop accepting connections (first step of a clean shutdown). */
  stopListening(): Promise<void> {
    this.closing = true;
    return Promise.all(this.servers.map((s) => new Promise<void>((r) => s.close(() => r())))).then(() => undefined);
  }

  /**
   * End every client connection (a clean shutdown) by dropping its transport, not with
   * a close frame: python-qpid-proton ignores an amqp:connection:forced close without
   * ending its side, and then waits for ever instead of failing over to the next broker
   * (see refusal.ts). After a dropped transport rhea and proton both reconnect.
   * Ended, not destroyed: what was written first (the last settlements) still reaches
   * the client, which would otherwise send those messages again.
   */
  closeAll(): void {
    for (const conn of [...this.connections.values()]) {
      (conn.rhea as unknown as { socket?: { end(): void } }).socket?.end();
    }
  }

  /** Client connections still open. */
  get clients(): ClientConnection[] {
    return [...this.connections.values()];
  }

  /** Messages taken from publishers and not yet settled (waiting for the journal and the backups). */
  get publishesPending(): number {
    let n = 0;
    for (const c of this.connections.values()) for (const l of c.incoming.values()) n += l.pending;
    return n;
  }

  /** Unsettled deliveries still out with consumers. */
  get unsettledOut(): number {
    let n = 0;
    for (const c of this.connections.values()) for (const l of c.outgoing.values()) n += l.unsettledCount;
    return n;
  }

  destroy(): void {
    this.closing = true;
    for (const s of this.servers) s.close();
    for (const conn of this.connections.values()) {
      conn.cleanup();
      (conn.rhea as unknown as { socket?: { destroy(): void } }).socket?.destroy();
    }
    this.connections.clear();
  }

  private flush(): void {
    this.flushScheduled = false;
    const now = this.broker.now();
    const queues = [...this.dirty];
    this.dirty.clear();
    for (const queue of queues) {
      if (this.broker.queues.get(queue.name) === queue) queue.dispatch(now);
    }
  }

  private configureSasl(): void {
    const mechs = this.container.sasl_server_mechanisms as unknown as {
      enable_anonymous(): void;
      PLAIN: () => unknown;
    };
    if (!this.options.auth) mechs.enable_anonymous();
    // PLAIN is offered even with auth off, so an admin identity can still be proven.
    mechs.PLAIN = plainServer({ users: this.options.users, throttle: this.loginThrottle, log: this.log });
  }

  private wireEvents(): void {
    const c = this.container;
    c.on('connection_open', (ctx: EventContext) => this.onConnectionOpen(ctx));
    c.on('sender_open', (ctx: EventContext) => this.conn(ctx)?.onSenderOpen(ctx));
    c.on('receiver_open', (ctx: EventContext) => this.conn(ctx)?.onReceiverOpen(ctx));
    c.on('message', (ctx: EventContext) => this.conn(ctx)?.onMessage(ctx));
    // Special senders (the HA replication stream) get their own flow, outcome and close events.
    const special = (ctx: EventContext) => (ctx.sender ? this.specialSenders.get(ctx.sender) : undefined);
    const onFlow = (ctx: EventContext) => {
      const s = special(ctx);
      if (s) s.onFlow();
      else this.conn(ctx)?.onSenderFlow(ctx);
    };
    c.on('sendable', onFlow);
    c.on('sender_flow', onFlow);
    for (const outcome of ['accepted', 'released', 'rejected', 'modified', 'settled'] as const) {
      c.on(outcome, (ctx: EventContext) => {
        const s = special(ctx);
        if (s) s.onSettled(ctx.delivery as Delivery, outcome);
        else this.conn(ctx)?.onOutcome(ctx, outcome);
      });
    }
    c.on('transactional_state', (ctx: EventContext) => this.conn(ctx)?.onTransactionalOutcome(ctx));
    const senderClosed = (ctx: EventContext) => {
      const s = special(ctx);
      if (!s) return this.conn(ctx)?.onLinkClosed(ctx);
      this.specialSenders.delete(ctx.sender!);
      this.conn(ctx)?.specialSenders.delete(ctx.sender!);
      s.onClose();
    };
    c.on('sender_close', senderClosed);
    c.on('receiver_close', (ctx: EventContext) => this.conn(ctx)?.onLinkClosed(ctx));
    // An end frame detaches every link of the session, and rhea says so for none of them:
    // without this a consumer's deliveries stay taken by a link that is gone (qpid-jms
    // ends a CLIENT_ACKNOWLEDGE session holding unacknowledged messages) and its credit
    // still draws messages, until the connection closes.
    c.on('session_close', (ctx: EventContext) => {
      const links = (ctx.session as unknown as { links?: Record<string, Sender | Receiver> } | undefined)?.links ?? {};
      for (const link of Object.values(links)) {
        if (link.is_sender()) senderClosed({ ...ctx, sender: link as Sender, receiver: undefined } as EventContext);
        else this.conn(ctx)?.onLinkClosed({ ...ctx, receiver: link as Receiver, sender: undefined } as EventContext);
      }
    });
    c.on('sender_error', (ctx: EventContext) => this.log.debug({ err: ctx.sender?.error }, 'sender link error'));
    c.on('receiver_error', (ctx: EventContext) => this.log.debug({ err: ctx.receiver?.error }, 'receiver link error'));
    c.on('connection_close', (ctx: EventContext) => this.onConnectionGone(ctx));
    c.on('disconnected', (ctx: EventContext) => this.onConnectionGone(ctx));
    c.on('connection_error', (ctx: EventContext) => this.log.debug({ err: (ctx.connection as unknown as { error?: unknown }).error }, 'connection error'));
    // rhea passes the error itself (not a context); the connection is then ended.
    c.on('protocol_error', (err: Error) => this.log.info({ err: err?.message }, 'protocol error from client; connection closed'));
    c.on('error', (err: unknown) => this.log.info({ err: (err as Error)?.message ?? String(err) }, 'client error'));
  }

  /** The guard saw a delivery outgrow max-message-size: detach its link (the guard strips the rest). */
  private onOversizeDelivery(rc: Connection, channel: number, handle: number, error: AmqpError): void {
    const session = (rc as unknown as { remote_channel_map?: Record<number, { remote?: { handles?: Record<number, Receiver | undefined> } } | undefined> })
      .remote_channel_map?.[channel];
    const link = session?.remote?.handles?.[handle];
    this.log.info({ conn: this.connections.get(rc)?.id, channel, handle, reason: error.description }, 'link detached: message over max-message-size');
    if (!link || !link.is_receiver()) return;
    const conn = this.connections.get(rc);
    if (conn) conn.detachReceiver(link, { condition: error.condition, description: error.description });
    else link.close({ condition: error.condition, description: error.description });
  }

  private conn(ctx: EventContext): ClientConnection | undefined {
    return this.connections.get(ctx.connection);
  }

  private onConnectionOpen(ctx: EventContext): void {
    const rc = ctx.connection;
    if (this.closing) {
      // Dropped, not closed with a frame: see closeAll().
      (rc as unknown as { socket?: { destroy(): void } }).socket?.destroy();
      return;
    }
    const sasl = (rc as unknown as { sasl_transport?: { username?: string; mechanism?: { username?: string } } }).sasl_transport;
    const user = sasl?.username ?? sasl?.mechanism?.username;
    const role = user && user !== 'anonymous' ? this.options.users.role(user) : undefined;
    const id = `c${++this.nextId}`;
    const policy: ConnectionPolicy = { autoCreate: this.options.autoCreate, creditWindow: SENDER_CREDIT, maxMessageSize: this.options.maxMessageSize };
    const host: ConnectionHost = {
      schedule: (q) => this.schedule(q),
      management: this.management,
      openSpecialSender: (c, address, sender) => {
        const handler = this.openSpecialSender?.(c, address, sender);
        if (handler === undefined) return false;
        if (handler) {
          this.specialSenders.set(sender, handler);
          c.specialSenders.add(sender);
        }
        return true;
      },
      checkLink: this.checkLink,
      readOnly: () => this.readOnly?.(),
      acl: this.options.acl,
    };
    // With auth off there are no identities to check: every connection may manage (dev and trusted setups only).
    const admin = !this.options.auth || role === 'admin';
    const conn = new ClientConnection(id, rc, role ? user : undefined, admin, this.broker, this.gate, host, policy, this.log.child({ conn: id }));
    const refusal = this.admission?.(conn);
    if (refusal) {
      const how = this.refuser.refuse(rc, `${conn.containerId ?? ''}@${remoteHost(conn.remoteAddress)}`, refusal);
      this.log.info({ conn: id, remote: conn.remoteAddress, container: conn.containerId, how, reason: refusal.description }, 'connection refused');
      return;
    }
    if (this.connections.size >= this.options.maxConnections) {
      const limit = this.options.maxConnections;
      answerAndClose(rc, { condition: 'amqp:resource-limit-exceeded', description: `too many connections: max-connections is ${limit}` });
      const held = this.overLimitLog.admit('max-connections');
      if (held !== undefined) this.log.warn({ remote: conn.remoteAddress, limit, ...(held > 0 ? { alsoRefused: held } : {}) }, 'connection refused: max-connections reached');
      return;
    }
    this.connections.set(rc, conn);
    this.log.debug({ conn: id, remote: conn.remoteAddress, user: conn.user }, 'connection opened');
  }

  private onConnectionGone(ctx: EventContext): void {
    const conn = this.connections.get(ctx.connection);
    if (!conn) return;
    this.connections.delete(ctx.connection);
    for (const sender of conn.specialSenders) {
      const s = this.specialSenders.get(sender);
      this.specialSenders.delete(sender);
      s?.onClose();
    }
    conn.cleanup();
    this.log.debug({ conn: conn.id }, 'connection closed');
  }

  private connectionInfos(): ConnectionInfo[] {
    return [...this.connections.values()].map((c) => ({
      id: c.id,
      remote: c.remoteAddress,
      user: c.user,
      admin: c.admin,
      container: c.containerId,
      links: c.linkCount,
      unsettled: [...c.outgoing.values()].reduce((n, l) => n + l.unsettledCount, 0) + [...c.incoming.values()].reduce((n, l) => n + l.pending, 0),
    }));
  }

  /**
   * An administrator's close: the transport is dropped, not closed with a frame.
   * python-qpid-proton stops reading once it has a close frame and, for
   * amqp:connection:forced, does not close its end either, so it waited for ever
   * (see refusal.ts); a dropped transport makes it, and rhea, reconnect. The reason
   * is in the broker's log instead of the client's error.
   */
  private closeConnection(id: string): boolean {
    for (const conn of this.connections.values()) {
      if (conn.id === id) {
        this.log.info({ conn: id, remote: conn.remoteAddress, container: conn.containerId }, 'connection closed by an administrator (transport dropped)');
        // With an error: rhea hears of a socket's end only through 'end' or 'error', and
        // the connection's links and consumers are cleaned up on its 'disconnected'.
        (conn.rhea as unknown as { socket?: { destroy(err?: Error): void } }).socket?.destroy(new Error('closed by an administrator'));
        return true;
      }
    }
    return false;
  }
}

/** "host:port" → "host" (the refusal memory is per client host, not per socket). */
function remoteHost(address: string | undefined): string {
  if (!address) return '';
  const i = address.lastIndexOf(':');
  return i > 0 ? address.slice(0, i) : address;
}

function boundPort(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    if (server.listening) return resolve((server.address() as AddressInfo).port);
    server.once('listening', () => resolve((server.address() as AddressInfo).port));
    server.once('error', reject);
  });
}
