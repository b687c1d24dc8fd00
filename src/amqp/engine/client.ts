// A small client on the engine's client role: connect (TCP or TLS, SASL
// ANONYMOUS/PLAIN/EXTERNAL), open sessions, attach senders and receivers, send
// with a promise of the outcome, receive against credit. Enough for tandem's
// own tools (the management client); not a general-purpose client.
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions as TlsOptions } from 'node:tls';
import type { Composite } from './composite.js';
import { Connection } from './connection.js';
import type { Delivery } from './delivery.js';
import type { EngineHandler, LogHook } from './handler.js';
import { type AttachOptions, type Link, terminus } from './link.js';
import type { ErrorInfo } from './performative.js';
import type { Session } from './session.js';
import { Transport } from './transport.js';
import type { AmqpValue } from './types.js';
import { hostPort } from '../../util/host-port.js';

export interface ClientOptions {
  host: string;
  port: number;
  /** Connect with TLS, with these options (servername defaults to host). */
  tls?: TlsOptions;
  user?: string;
  password?: string;
  /** SASL EXTERNAL (the TLS client certificate is the identity). */
  external?: boolean;
  /** false: no SASL layer at all (a broker with auth=no takes that). */
  sasl?: boolean;
  /** The SASL mechanisms we may use, in order of preference (default: see SaslClientOptions). */
  mechanisms?: string[];
  containerId?: string;
  hostname?: string;
  idleTimeoutMs?: number;
  maxFrameSize?: number;
  properties?: AmqpValue;
  /** Give up connecting (TCP, SASL and open) after this long. */
  timeoutMs?: number;
  log?: LogHook;
}

/**
 * What went wrong: `socket` (the socket failed: `code`), `timeout`, `refused` (SASL
 * or the peer's close, with its condition), `closed` (the connection went without a
 * reason), or `link` (an end or detach).
 */
export type ClientFailure = 'socket' | 'timeout' | 'refused' | 'closed' | 'link';

/** A failure the peer reported (close, end, detach, rejected) or the connection's loss. */
export class AmqpClientError extends Error {
  constructor(
    message: string,
    readonly condition: string | undefined,
    /** The socket's own error code, when the socket failed (ECONNREFUSED, a certificate error...). */
    readonly code?: string,
    readonly kind: ClientFailure = 'link',
    /** The peer's or the socket's own words, without ours around them. */
    readonly reason?: string,
  ) {
    super(message);
    this.name = 'AmqpClientError';
  }
}

const describe = (e: ErrorInfo | undefined, fallback: string): string => (e ? `${e.condition}${e.description ? `: ${e.description}` : ''}` : fallback);

interface LinkWaiters {
  opened?: { resolve(link: Link): void; reject(err: Error): void };
  onMessage?: (delivery: Delivery) => void;
  /** Senders: sends waiting for credit. */
  waiting: (() => void)[];
  /** Outcomes awaited, by delivery-id. */
  outcomes: Map<number, { resolve(state: Composite | undefined): void; reject(err: Error): void }>;
  /** Receivers: a drain asked for, settled by the sender's answer or by the link's end. */
  drained?: { done(): void; fail(err: Error): void };
}

const waitersOf = (link: Link): LinkWaiters => link.context as LinkWaiters;

const TERMINAL = new Set(['accepted', 'rejected', 'released', 'modified', 'declared']);

export class AmqpClient {
  readonly connection: Connection;
  private transport: Transport;
  private closedError: Error | undefined;
  private readonly closeWaiters: ((err: Error | undefined) => void)[] = [];
  private readonly sessionWaiters = new Map<Session, { resolve(s: Session): void; reject(err: Error): void }>();
  /** Why each ended session ended: an attach can end its session before its caller's promise exists. */
  private readonly sessionErrors = new WeakMap<Session, Error>();
  /** Called once when the connection is gone (by us, the peer or the socket). */
  onClosed: ((err: Error | undefined) => void) | undefined;

  private constructor(
    readonly socket: Socket,
    options: ClientOptions,
    opened: { resolve(): void; reject(err: Error): void },
  ) {
    const handler: EngineHandler = {
      onOpen: () => opened.resolve(),
      onClose: (_c, error, byPeer) => {
        const err =
          error && error.condition !== 'amqp:connection:forced'
            ? new AmqpClientError(`${byPeer ? 'closed by the peer' : 'closed'}: ${describe(error, 'no reason given')}`, error.condition, undefined, 'refused', error.description ?? error.condition)
            : new AmqpClientError('the connection closed', error?.condition, undefined, 'closed');
        this.gone(err);
        opened.reject(err);
      },
      onSessionOpen: (s) => {
        this.sessionWaiters.get(s)?.resolve(s);
        this.sessionWaiters.delete(s);
      },
      onSessionEnd: (s, error) => {
        const err = new AmqpClientError(`session ended: ${describe(error, 'no reason given')}`, error?.condition);
        this.sessionErrors.set(s, err);
        this.sessionWaiters.get(s)?.reject(err);
        this.sessionWaiters.delete(s);
        for (const l of s.links) this.linkGone(l, err);
      },
      onLinkOpen: (link) => {
        // A peer refusing a link answers with no terminus, then detaches with the reason (2.6.3).
        const refused = link.isSender ? link.target === undefined : link.source === undefined;
        if (!refused) {
          waitersOf(link).opened?.resolve(link);
          waitersOf(link).opened = undefined;
        }
      },
      onLinkDetach: (link, error) => this.linkGone(link, new AmqpClientError(`link ${link.name} detached: ${describe(error, 'no reason given')}`, error?.condition, undefined, 'link', error?.description)),
      onLinkAttach: (link) => link.refuse({ condition: 'amqp:not-allowed', description: 'this client takes no links' }),
      onTransfer: (link, delivery) => {
        const w = waitersOf(link);
        if (w.onMessage) w.onMessage(delivery);
      },
      onDisposition: (d) => {
        if (d.incoming || (!d.remoteSettled && !TERMINAL.has(d.outcome ?? ''))) return;
        const w = waitersOf(d.link).outcomes.get(d.id);
        if (!w) return;
        waitersOf(d.link).outcomes.delete(d.id);
        d.settle();
        w.resolve(d.remoteState);
      },
      onFlow: (link) => {
        const w = waitersOf(link);
        if (link.isSender) this.pump(link);
        else if (link.credit === 0) this.drainDone(link);
      },
      onWritable: () => undefined,
    };
    this.connection = new Connection({
      role: 'client',
      containerId: options.containerId ?? `tandem-client-${process.pid}`,
      hostname: options.hostname ?? options.host,
      idleTimeoutMs: options.idleTimeoutMs,
      maxFrameSize: options.maxFrameSize,
      properties: options.properties,
      saslClient: options.sasl === false ? undefined : { user: options.user, password: options.password, external: options.external, mechanisms: options.mechanisms },
      handler,
      log: options.log,
    });
    this.transport = new Transport(this.connection, socket);
    socket.on('close', () => {
      this.gone(new AmqpClientError('the connection closed', undefined));
      this.flushCloseWaiters();
    });
  }

  /** Connect, log in and open; rejects with what went wrong (socket, SASL, the peer's close, the timeout). */
  static connect(options: ClientOptions): Promise<AmqpClient> {
    return new Promise((resolve, reject) => {
      const socket = options.tls ? tlsConnect({ host: options.host, port: options.port, servername: options.host, ...options.tls }) : netConnect({ host: options.host, port: options.port });
      let client: AmqpClient | undefined;
      let settled = false;
      const timeoutMs = options.timeoutMs ?? 10_000;
      const timer = setTimeout(() => {
        finish(new AmqpClientError(`no answer from ${hostPort(options.host, options.port)} within ${timeoutMs} ms`, undefined, undefined, 'timeout'));
        socket.destroy();
      }, timeoutMs);
      const finish = (err: Error | undefined) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve(client!);
      };
      socket.once('error', (err: Error & { code?: string }) => finish(new AmqpClientError(`cannot connect to ${hostPort(options.host, options.port)}: ${err.message}`, undefined, err.code, 'socket', err.message)));
      socket.once('close', () => finish(new AmqpClientError(`the connection to ${hostPort(options.host, options.port)} closed before it opened`, undefined, undefined, 'closed')));
      client = new AmqpClient(socket, options, { resolve: () => finish(undefined), reject: finish });
    });
  }

  get isOpen(): boolean {
    return this.closedError === undefined && this.connection.isOpen;
  }

  async openSession(): Promise<Session> {
    if (this.closedError) throw this.closedError;
    const s = this.connection.beginSession();
    return new Promise((resolve, reject) => this.sessionWaiters.set(s, { resolve, reject }));
  }

  /** A sender to `address` (a target node name). */
  openSender(session: Session, address: string | undefined, options: AttachOptions & { name?: string } = {}): Promise<Link> {
    return this.attach(session, 'sender', { target: terminus('target', { address }), source: terminus('source', {}), ...options });
  }

  /** A receiver from `address` (or a dynamic node: options.source), with `credit` kept topped up when given. */
  openReceiver(session: Session, address: string | undefined, options: AttachOptions & { name?: string; dynamic?: boolean } = {}): Promise<Link> {
    return this.attach(session, 'receiver', { source: terminus('source', { address, dynamic: options.dynamic }), target: terminus('target', {}), ...options });
  }

  private attach(session: Session, role: 'sender' | 'receiver', options: AttachOptions & { name?: string }): Promise<Link> {
    if (this.closedError) return Promise.reject(this.closedError);
    const name = options.name ?? `${role}-${Math.random().toString(36).slice(2, 10)}`;
    const link = session.attach(name, role, options);
    return new Promise((resolve, reject) => {
      link.context = { opened: { resolve, reject }, waiting: [], outcomes: new Map() } satisfies LinkWaiters;
      // A name too long for any attach the peer takes ends the session inside attach(),
      // before this promise was there to be told (Link.refuseOversize).
      const ended = this.sessionErrors.get(session);
      if (ended) this.linkGone(link, ended);
    });
  }

  /** Send once credit allows; resolves with the peer's outcome (undefined for a presettled send). */
  send(link: Link, payload: Buffer, options: { settled?: boolean } = {}): Promise<Composite | undefined> {
    if (this.closedError) return Promise.reject(this.closedError);
    const w = waitersOf(link);
    return new Promise((resolve, reject) => {
      const go = () => {
        try {
          const d = link.send(payload, options);
          if (d.settled) resolve(undefined);
          else w.outcomes.set(d.id, { resolve, reject });
        } catch (err) {
          reject(err as Error);
        }
      };
      w.waiting.push(go);
      this.pump(link);
      // Sends that wait for credit are rejected with the link when it goes.
      (go as unknown as { reject: (e: Error) => void }).reject = reject;
    });
  }

  /** Deliver each message to `onMessage`, keeping `credit` outstanding (refilled as messages come). */
  receive(link: Link, credit: number, onMessage: (delivery: Delivery) => void): void {
    const w = waitersOf(link);
    w.onMessage = (d) => {
      onMessage(d);
      if (link.credit <= credit / 2) link.flow(credit);
    };
    link.flow(credit);
  }

  /** Ask the sender to use up or give back the credit; resolves when it has (rejects if the link goes first). */
  drain(link: Link): Promise<void> {
    const w = waitersOf(link);
    if (link.credit === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      w.drained = { done: resolve, fail: reject };
      w.onMessage = w.onMessage ?? (() => undefined);
      link.flow(link.credit, true);
    });
  }

  /**
   * Take at most `credit` messages, only those the sender has now: credit given with
   * drain (2.6.7), so the sender sends what it has and gives back the rest. Resolves with
   * how many came, once the credit is used up or given back; rejects if the link goes.
   * No credit is given again (receive() refills; this does not).
   */
  fetch(link: Link, credit: number, onMessage: (delivery: Delivery) => void): Promise<number> {
    const w = waitersOf(link);
    if (this.closedError) return Promise.reject(this.closedError);
    if (!link.isOpen) return Promise.reject(new AmqpClientError(`link ${link.name} is not open`, undefined));
    let got = 0;
    return new Promise((resolve, reject) => {
      w.drained = { done: () => resolve(got), fail: reject };
      w.onMessage = (d) => {
        got++;
        onMessage(d);
        // Every credit used: nothing more can come, whether or not a flow says so.
        if (link.credit === 0) this.drainDone(link);
      };
      link.flow(credit, true);
    });
  }

  private drainDone(link: Link): void {
    const w = waitersOf(link);
    const drained = w.drained;
    w.drained = undefined;
    drained?.done();
  }

  detach(link: Link, error?: ErrorInfo): void {
    link.detach(error);
  }

  /** Close and wait for the socket to go (bounded by the transport's grace timer). */
  close(): Promise<void> {
    if (this.socket.destroyed) return Promise.resolve();
    return new Promise((resolve) => {
      this.closeWaiters.push(() => resolve());
      this.transport.close();
    });
  }

  private pump(link: Link): void {
    const w = waitersOf(link);
    // Each turn sends one delivery and uses one credit: bounded by the credit given.
    while (w.waiting.length > 0 && link.sendable) w.waiting.shift()!();
  }

  private linkGone(link: Link, err: Error): void {
    const w = link.context as LinkWaiters | undefined;
    if (!w) return;
    w.opened?.reject(err);
    w.opened = undefined;
    for (const o of w.outcomes.values()) o.reject(err);
    w.outcomes.clear();
    for (const go of w.waiting) (go as unknown as { reject?: (e: Error) => void }).reject?.(err);
    w.waiting = [];
    w.drained?.fail(err);
    w.drained = undefined;
  }

  private gone(err: Error | undefined): void {
    if (this.closedError) return;
    this.closedError = err ?? new AmqpClientError('the connection closed', undefined);
    for (const [, w] of this.sessionWaiters) w.reject(this.closedError);
    this.sessionWaiters.clear();
    for (const s of this.connection.sessions) for (const l of s.links) this.linkGone(l, this.closedError);
    this.onClosed?.(err);
  }

  private flushCloseWaiters(): void {
    for (const w of this.closeWaiters.splice(0)) w(undefined);
  }
}
