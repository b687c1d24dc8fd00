// The AMQP 1.0 listener: plain and TLS sockets, each run by a connection of
// tandem's own engine (engine/), with SASL (ANONYMOUS only with auth off, PLAIN
// against the users file, EXTERNAL for verified client certificates with
// tls-external-user), and the routing of the engine's events to the connection
// objects that handle them.
import { type AddressInfo, type Server, type Socket, createServer } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import { hostname } from 'node:os';
import type { Broker } from '../broker/broker.js';
import type { Queue } from '../broker/queue.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { AdminContext, ConnectionInfo } from '../admin/operations.js';
import { ANONYMOUS_IDENTITY, type UserDirectory } from '../admin/users.js';
import type { Acl } from '../admin/acl.js';
import type { Logger } from '../ops/log.js';
import { peerFields, peerText } from '../ops/log-fields.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import { ClientConnection, type ConnectionHost, type ConnectionPolicy } from './client-connection.js';
import { DEFAULT_TRANSACTION_LIMITS, type TransactionLimits } from './coordinator.js';
import { Connection } from './engine/connection.js';
import type { Delivery } from './engine/delivery.js';
import type { EngineHandler, LogHook } from './engine/handler.js';
import type { Link } from './engine/link.js';
import { fieldsValue, type Plain } from './engine/message.js';
import type { Session } from './engine/session.js';
import { Transport } from './engine/transport.js';
import { ManagementNode } from './management.js';
import { ConnectionRefuser, answerAndClose, forceClose, type Refusal } from './refusal.js';
import { LoginThrottle } from './login-throttle.js';
import { plainVerifier } from './sasl-plain.js';
import { externalVerifier, type ExternalUserMapping } from './sasl-external.js';
import { TlsRefusalLog, listenerContext, reloadListenerTls, tcpSocketOf } from './tls-listener.js';
import { HandshakeGate, defaultHandshakesPerAddress } from './handshake-gate.js';

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
 * kernel's accept is answered by a bare TCP close, so memory stays bounded. One client
 * address holds only its share of them before its open (handshake-gate.ts).
 */
const OVER_LIMIT_SOCKETS = 64;

/**
 * The last connections of `max-connections` are kept for admins: the identities HA
 * backups, DR bridges, the cluster agent and the CLI log in as. Without them a user (or
 * several) holding every connection cut a primary off from backups that reconnect,
 * which holds every settlement, and locked the operators out; PostgreSQL keeps
 * superuser_reserved_connections for the same reason. A tenth of a smaller limit.
 */
export const ADMIN_RESERVED_CONNECTIONS = 16;

/** Connections of `limit` that only admins may open. */
export function adminReserve(limit: number): number {
  return Math.min(ADMIN_RESERVED_CONNECTIONS, Math.floor(limit / 10));
}

/**
 * Every line the engine logs at info or above for a server connection is a client's
 * doing (a violation, a refused header or login, an attach over its own frame size, a
 * socket silent past the handshake deadline), and a client can repeat it at will: a
 * refused SASL mechanism wrote 1,800 lines a second from one client, a link name too long
 * for the client's frame size 1,500. So each is logged once per interval per message and
 * condition (or handshake stage), the first with its details and later ones with the
 * count held back. Debug lines are for whoever turned them on, and stay whole.
 */
function engineLineKey(message: string, fields: Record<string, unknown>): string {
  return `${message}\0${String(fields.condition ?? fields.stage ?? '')}`;
}

/**
 * How much of a delivery spanning frames a link may still hold while the memory alarm
 * is on: enough for an ordinary message to arrive whole and be refused with the alarm's
 * words; more is an unfinished message the alarm would otherwise never stop.
 */
const ALARM_PARTIAL_ALLOWANCE = 1024 * 1024;

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
  /** What one transaction may hold (default: DEFAULT_TRANSACTION_LIMITS). */
  transactionLimits?: TransactionLimits;
  idleTimeoutMs: number;
  /** A client that has not sent its open this long after connecting is closed (handshake-timeout; 0 or unset: never). */
  handshakeTimeoutMs?: number;
  maxConnections: number;
  /** Sockets one address may hold before their AMQP open (max-handshakes-per-address; 0: no cap; unset: its default). */
  maxHandshakesPerAddress?: number;
  /** Links one connection may hold at once (max-links-per-connection; each costs a few KiB, a temporary queue more). */
  maxLinksPerConnection: number;
  autoCreate: boolean;
  /** Permissions on names (acl-file; permissive without one). */
  acl: Acl;
  /** Properties of our open frame. */
  openProperties?: Record<string, unknown>;
}

/** A sender link handled outside the queue machinery (HA replication, DR): the engine's events for it. */
export interface SpecialSender {
  onFlow(): void;
  onSettled(delivery: Delivery, outcome: 'accepted' | 'released' | 'rejected' | 'modified' | 'settled'): void;
  onClose(): void;
}

/** Decides whether a freshly opened connection may stay (HA backups refuse clients). */
export type AdmissionCheck = (conn: ClientConnection) => Refusal | undefined;

/** What the server keeps for each socket until it closes. */
interface Accepted {
  engine: Connection;
  socket: Socket;
  /** Set once the client's open was admitted. */
  client: ClientConnection | undefined;
  /** Ends the socket's count as a handshake of its address (handshake-gate.ts). */
  opened: () => void;
}

export class AmqpServer {
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
  /** The engine's lines about clients (see engineLineKey). */
  private readonly violationLog = new LogThrottle();
  /** Connections the admission check turned away (an HA backup's clients). */
  private readonly refusedLog = new LogThrottle();
  /** Sockets not yet opened, per client address, on both listeners. */
  private readonly handshakes: HandshakeGate;
  /** The handshake count's end of each TLS listener's TCP socket, for its TLS socket to find. */
  private readonly tlsOpened = new WeakMap<Socket, () => void>();
  /** Failed logins slow the next ones; the web console shares it (a guess there counts here). */
  readonly loginThrottle = new LoginThrottle();
  admission: AdmissionCheck | undefined;
  checkLink: ConnectionHost['checkLink'];
  /** Why local changes are refused right now (an HA backup), if they are. */
  readOnly: (() => string | undefined) | undefined;
  /** Handlers of special sender links (HA replication, DR), by link. */
  readonly specialSenders = new Map<Link, SpecialSender>();
  openSpecialSender: ((conn: ClientConnection, address: string, sender: Link) => SpecialSender | undefined | false) | undefined;
  private readonly containerId = `tandem@${hostname()}`;
  /** The engine's own log lines, as fields of structured lines (client text never starts one). */
  private readonly engineLog: LogHook;
  private readonly handler: EngineHandler;

  constructor(
    readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly options: ServerOptions,
    private readonly log: Logger,
    statusOf: () => Record<string, unknown>,
  ) {
    const admin: AdminContext = {
      broker,
      connections: () => this.connectionInfos(),
      closeConnection: (id) => this.closeConnection(id),
      status: statusOf,
    };
    this.management = new ManagementNode(admin, log);
    this.engineLog = (level, message, fields) => {
      // The container id, a link's name, a description: a client's text, cut (log-fields.ts).
      if (level === 'debug') return this.log[level](peerFields(fields), message);
      const held = this.violationLog.admit(engineLineKey(message, fields));
      if (held !== undefined) this.log[level]({ ...peerFields(fields), ...suppressedField(held) }, message);
    };
    this.handler = this.events();
    this.handshakes = new HandshakeGate(options.maxHandshakesPerAddress ?? defaultHandshakesPerAddress(options.maxConnections), log);
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  /** Sockets closed at accept because their address held its share of handshakes, since the start. */
  get handshakesRefused(): number {
    return this.handshakes.refused;
  }

  /** Bind the listeners; resolves with the ports actually bound. */
  async listen(): Promise<{ port?: number; tlsPort?: number }> {
    let port: number | undefined;
    if (this.options.port !== undefined) {
      const plain = createServer();
      this.handshakes.guard(plain, this.options.maxConnections + OVER_LIMIT_SOCKETS, (socket, opened) => this.accept(socket, undefined, opened));
      plain.listen({ host: this.options.host, port: this.options.port });
      this.servers.push(plain);
      port = await boundPort(plain);
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
          // Node's own default is 120 s, whatever handshake-timeout says; the AMQP deadline starts after it.
          ...(this.options.handshakeTimeoutMs ? { handshakeTimeout: this.options.handshakeTimeoutMs } : {}),
        },
        (socket: TLSSocket) => {
          refusals.untrusted(socket);
          const external = t.externalUser === undefined ? undefined : externalVerifier(socket, { users: this.options.users, mapping: t.externalUser, log: this.log });
          const raw = tcpSocketOf(socket);
          this.accept(socket, external, (raw && this.tlsOpened.get(raw)) ?? (() => undefined));
        },
      );
      refusals.watch(secure);
      // Node leaves open a socket whose TLS handshake failed or ran past handshakeTimeout
      // (it only reports it, here): without this a TCP socket that never starts TLS stayed for ever.
      secure.on('tlsClientError', (_err: Error, socket: TLSSocket) => socket.destroy());
      // The TCP listener is ours, so the handshake share is kept before TLS: a socket past
      // it costs no TLS handshake. It hands the others to the TLS server (Node's documented
      // way in: its 'connection' event).
      const tcp = createServer();
      this.handshakes.guard(tcp, this.options.maxConnections + OVER_LIMIT_SOCKETS, (socket, opened) => {
        this.tlsOpened.set(socket, opened);
        secure.emit('connection', socket);
      });
      tcp.listen({ host: this.options.host, port: t.port });
      this.servers.push(tcp);
      this.tlsServer = secure;
      tlsPort = await boundPort(tcp);
    }
    return { port, tlsPort };
  }

  /** SIGHUP: new TLS handshakes use tls-cert, tls-key, tls-ca and tls-crl as they are now; false if they did not read. */
  reloadTls(): boolean {
    if (!this.tlsServer || !this.options.tls) return true;
    return reloadListenerTls(this.tlsServer, this.options.tls, this.log);
  }

  /** One accepted socket: an engine connection in the server role, read and written by a transport. */
  private accept(socket: Socket, external: ((authzid: string) => Promise<string | undefined>) | undefined, opened: () => void): void {
    try {
      // Small frames (settlements, flow) must not wait for Nagle and delayed ACKs.
      socket.setNoDelay(true);
      const o = this.options;
      const engine = new Connection({
        role: 'server',
        containerId: this.containerId,
        maxFrameSize: o.maxFrameSize,
        idleTimeoutMs: o.idleTimeoutMs || undefined,
        // A socket that never finishes headers, SASL and open would hold a slot (of max-connections + 64) for ever.
        handshakeTimeoutMs: o.handshakeTimeoutMs || undefined,
        maxMessageSize: o.maxMessageSize,
        // Past the memory alarm, a delivery spanning frames is held up to an allowance (an
        // ordinary message completes and is refused as any is), and no further: its link is detached.
        partialDeliveryRefusal: (bytes) => (bytes > ALARM_PARTIAL_ALLOWANCE ? this.broker.memoryAlarm : undefined),
        // A client that skips SASL is anonymous: taken only with auth off.
        requireSasl: o.auth,
        sasl: {
          anonymous: !o.auth,
          // PLAIN is offered even with auth off, so an admin identity can still be proven.
          plain: plainVerifier({ users: o.users, throttle: this.loginThrottle, log: this.log }, socket.remoteAddress),
          external,
        },
        // Lets a broker that finds itself in ha-brokers-url recognise itself.
        properties: o.openProperties ? fieldsValue(o.openProperties as Record<string, Plain>) : undefined,
        // qpid-jms makes shared subscriptions only with a broker that offers them
        // (subscriptions.ts), sends an anonymous producer's messages down one link, and
        // sends with a delivery delay only to one that offers DELAYED_DELIVERY: every
        // queue holds such a message until its time (src/broker/scheduled.ts).
        offeredCapabilities: ['SHARED-SUBS', 'ANONYMOUS-RELAY', 'DELAYED_DELIVERY'],
        // The broker has always taken a sender's attach without one (as 0): clients that omit it keep working.
        requireInitialDeliveryCount: false,
        handler: this.handler,
        log: this.engineLog,
      });
      const accepted: Accepted = { engine, socket, client: undefined, opened };
      engine.context = accepted;
      new Transport(engine, socket);
      // Whatever ended the connection (close, violation, a dropped socket), its links are undone once.
      socket.once('close', () => this.onConnectionGone(engine));
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'connection not accepted');
      socket.destroy();
    }
  }

  /** The engine's events, routed to the connection (or special link) they concern. */
  private events(): EngineHandler {
    const clientOf = (c: Connection): ClientConnection | undefined => (c.context as Accepted | undefined)?.client;
    const linkGone = (link: Link): void => {
      const special = this.specialSenders.get(link);
      if (special) {
        this.specialSenders.delete(link);
        clientOf(link.session.connection)?.specialSenders.delete(link);
        special.onClose();
        return;
      }
      clientOf(link.session.connection)?.onLinkClosed(link);
    };
    return {
      onOpen: (c) => this.onConnectionOpen(c),
      onClose: (c, error, byPeer) => {
        if (error && !byPeer) this.log.debug({ conn: clientOf(c)?.id, condition: error.condition, description: error.description }, 'connection closed');
        this.onConnectionGone(c);
      },
      onLinkAttach: (link) => {
        const client = clientOf(link.session.connection);
        if (!client) return link.refuse({ condition: 'amqp:illegal-state', description: 'the connection is not open' });
        if (!client.admitLink(link)) return;
        if (link.isSender) client.onSenderOpen(link);
        else client.onReceiverOpen(link);
      },
      onLinkDetach: (link, error, byPeer) => {
        if (error) this.log.debug({ conn: clientOf(link.session.connection)?.id, link: link.name, byPeer, condition: error.condition, description: error.description }, 'link detached with an error');
        linkGone(link);
      },
      // An end detaches every link of the session: each is undone as if detached.
      onSessionEnd: (session: Session, error, byPeer) => {
        for (const link of session.links) linkGone(link);
        // A client that broke a session's rules (a transfer on a handle it never
        // attached, past the window) is not trusted with the rest of the connection.
        if (error && !byPeer) session.connection.close(error);
      },
      onTransfer: (link, delivery) => clientOf(link.session.connection)?.onMessage(link, delivery),
      onDisposition: (delivery) => {
        const special = this.specialSenders.get(delivery.link);
        if (special) {
          const outcome = outcomeName(delivery);
          if (outcome) special.onSettled(delivery, outcome);
          return;
        }
        clientOf(delivery.link.session.connection)?.onOutcome(delivery);
      },
      onFlow: (link) => {
        if (!link.isSender) return;
        const special = this.specialSenders.get(link);
        if (special) special.onFlow();
        else clientOf(link.session.connection)?.onSenderFlow(link);
      },
    };
  }

  /** Hand available messages of a queue to its consumers, batched per event-loop turn. */
  schedule(queue: Queue): void {
    this.dirty.add(queue);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  /** Hand a queue's messages to its consumers at once (a drain is answered with what there is). */
  private dispatchNow(queue: Queue): void {
    if (this.broker.queues.get(queue.name) === queue) queue.dispatch(this.broker.now());
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
    for (const conn of [...this.connections.values()]) conn.socket.end();
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
      conn.socket.destroy();
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

  private onConnectionOpen(engine: Connection): void {
    const accepted = engine.context as Accepted;
    const socket = accepted.socket;
    // Its handshake is done: it no longer counts against its address's share, even if refused below (then it closes soon).
    accepted.opened();
    if (this.closing) {
      // Dropped, not closed with a frame: see closeAll().
      socket.destroy();
      return;
    }
    const user = engine.identity;
    const role = user && user !== ANONYMOUS_IDENTITY ? this.options.users.role(user) : undefined;
    const id = `c${++this.nextId}`;
    const policy: ConnectionPolicy = {
      autoCreate: this.options.autoCreate,
      creditWindow: SENDER_CREDIT,
      maxLinks: this.options.maxLinksPerConnection,
      maxMessageSize: this.options.maxMessageSize,
      transactionLimits: this.options.transactionLimits ?? DEFAULT_TRANSACTION_LIMITS,
    };
    const host: ConnectionHost = {
      schedule: (q) => this.schedule(q),
      dispatchNow: (q) => this.dispatchNow(q),
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
    // Otherwise the users file is asked at each use, so a change to it holds on open connections at once.
    const users = this.options.users;
    const admin = !this.options.auth ? () => true : role !== undefined && user !== undefined ? () => users.role(user) === 'admin' : () => false;
    const conn = new ClientConnection(id, engine, socket, role ? user : undefined, admin, this.broker, this.gate, host, policy, this.log.child({ conn: id }));
    const refusal = this.admission?.(conn);
    if (refusal) {
      const how = this.refuser.refuse(engine, socket, `${conn.containerId ?? ''}@${remoteHost(conn.remoteAddress)}`, refusal);
      // A client that keeps reconnecting to a backup (or many after a failover) is refused
      // thousands of times a second: one line per interval, with the count.
      const held = this.refusedLog.admit(refusal.condition);
      if (held !== undefined) this.log.info({ conn: id, remote: conn.remoteAddress, container: peerText(conn.containerId), how, reason: refusal.description, ...suppressedField(held) }, 'connection refused');
      return;
    }
    const limit = this.options.maxConnections;
    const open = this.connections.size;
    const reserve = adminReserve(limit);
    if (open >= limit || (open >= limit - reserve && !conn.admin)) {
      const why = open >= limit ? `max-connections is ${limit}` : `max-connections is ${limit}, and the last ${reserve} are kept for admins`;
      answerAndClose(engine, socket, { condition: 'amqp:resource-limit-exceeded', description: `too many connections: ${why}` });
      const held = this.overLimitLog.admit('max-connections');
      if (held !== undefined) this.log.warn({ remote: conn.remoteAddress, limit, ...(held > 0 ? { alsoRefused: held } : {}) }, 'connection refused: max-connections reached');
      return;
    }
    accepted.client = conn;
    this.connections.set(engine, conn);
    this.log.debug({ conn: id, remote: conn.remoteAddress, user: conn.user }, 'connection opened');
  }

  private onConnectionGone(engine: Connection): void {
    const conn = this.connections.get(engine);
    if (!conn) return;
    this.connections.delete(engine);
    for (const sender of conn.specialSenders) {
      const s = this.specialSenders.get(sender);
      this.specialSenders.delete(sender);
      s?.onClose();
    }
    conn.specialSenders.clear();
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
   * An administrator's close (management DELETE connection: `tandem connection close`,
   * the console). A client that watches the connection itself (its open asked for an
   * idle-time-out) is sent a close carrying amqp:connection:forced, so it can tell why,
   * then our end of the socket and the socket soon after: rhea reports the condition
   * and reconnects; proton, which ignores a `forced` close, is left to its own
   * idle-time-out to find the socket gone (not measured here). One that
   * does not gets the transport dropped, no frame: python-qpid-proton stops reading
   * once it has a close and ignores a `forced` one (refusal.ts), so an idle proton
   * receiver without heartbeats would wait for ever, where on a drop it reconnects
   * (test/interop/proton.test.ts). Either way the reason is in the broker's log.
   */
  private closeConnection(id: string): boolean {
    for (const conn of this.connections.values()) {
      if (conn.id !== id) continue;
      const watches = Number(conn.engine.remoteOpen?.fields['idle-time-out'] ?? 0) > 0;
      this.log.info({ conn: id, remote: conn.remoteAddress, container: peerText(conn.containerId), how: watches ? 'close frame' : 'transport dropped' }, 'connection closed by an administrator');
      if (watches) forceClose(conn.engine, conn.socket, { condition: 'amqp:connection:forced', description: 'the connection was closed by an administrator' });
      else conn.socket.destroy();
      return true;
    }
    return false;
  }
}

/** The outcome a special link's handler is told of, if the disposition settles or decides it. */
function outcomeName(d: Delivery): 'accepted' | 'released' | 'rejected' | 'modified' | 'settled' | undefined {
  const name = d.outcome;
  if (name === 'accepted' || name === 'released' || name === 'rejected' || name === 'modified') return name;
  return d.remoteSettled ? 'settled' : undefined;
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
