// A connection (spec 2.4, 5.2, 5.3), either role: the protocol header exchange,
// the SASL layer, open/close, max-frame-size, channel-max and idle-time-out,
// and the sessions by channel. Bytes go in through feed(); frames come out as
// buffers (write()), to be gathered by the transport into one write per tick.
// Time comes in through tick(now), so every transition can be driven by
// scripted bytes and a scripted clock. Every violation the peer commits is
// answered with the spec's condition in a close (or end, or detach: see
// session.ts and link.ts) and stops the input; nothing the peer sends makes an
// exception leave feed().
import type { Composite } from './composite.js';
import { ByteQueue } from './byte-queue.js';
import { type CompositeDef, composite } from './definitions.js';
import { FrameOutput } from './frame-output.js';
import { AmqpError, Condition, framingError, invalidField } from './errors.js';
import {
  FRAME_HEADER_SIZE,
  FrameType,
  MIN_MAX_FRAME_SIZE,
  ProtocolId,
  frameHead,
  protocolHeader,
  readFrame,
  readFrameHeader,
  readProtocolHeader,
} from './frames.js';
import type { Delivery } from './delivery.js';
import type { EngineHandler, LogHook, LogLevel } from './handler.js';
import type { Link } from './link.js';
import { type ErrorInfo, describedList, errorInfoOf } from './performative.js';
import { SaslClient, type SaslClientOptions, SaslCode, SaslServer, type SaslServerOptions, type SaslStep, saslOutcome } from './sasl.js';
import { DEFAULT_SESSION_OPTIONS, Session, type SessionOptions } from './session.js';
import { serialAdd } from './serial.js';
import type { AmqpValue } from './types.js';
import { monotonicNow } from '../../util/monotonic-clock.js';

export type Role = 'server' | 'client';

export interface ConnectionOptions {
  role: Role;
  containerId: string;
  /** Client role: the host name put in sasl-init and open. */
  hostname?: string;
  /** Largest frame we take (advertised in open); at least 512. */
  maxFrameSize?: number;
  /** Highest channel the peer may use. */
  channelMax?: number;
  /** Close a connection silent this long (advertised in open); 0: never. */
  idleTimeoutMs?: number;
  /**
   * Close a silent connection after this long instead (default: idleTimeoutMs; 0:
   * never, for a host that judges silence itself, after reading what has arrived).
   */
  idleLimitMs?: number;
  /**
   * Server role: close a connection whose peer has not sent its open this long after
   * the connection began (headers, SASL and open; 0 or unset: never). Without it a
   * socket that connects and says nothing, or stops halfway, holds its slot for ever.
   */
  handshakeTimeoutMs?: number;
  /** Largest message a receiving link takes (advertised in attach; default 100 MiB); 0: any. */
  maxMessageSize?: number;
  /** A peer asking for heartbeats more often than every half of this is refused. */
  minPeerIdleTimeoutMs?: number;
  /** We heartbeat at half the peer's idle-time-out, but never less often than this. */
  maxHeartbeatIntervalMs?: number;
  /** Largest SASL frame taken (5.3.1 says 512; clients send more). */
  saslFrameLimit?: number;
  /** Bytes of output queued in one tick past which senders wait for the next write (back-pressure within a tick). */
  maxOutputBytes?: number;
  /**
   * Refuse a sender's attach without initial-delivery-count (2.7.3 says it must not be
   * null); default true. false takes it as 0, as rhea and proton servers do.
   */
  requireInitialDeliveryCount?: boolean;
  /** Server role: SASL offered with these mechanisms. */
  sasl?: SaslServerOptions;
  /** Server role: refuse a client that skips SASL. */
  requireSasl?: boolean;
  /**
   * Asked before a receiving link holds more of a delivery that spans frames, with
   * the bytes it holds so far: a reason stops it (the link is detached with
   * amqp:resource-limit-exceeded, and what it held is freed). The broker's memory
   * alarm: a message is refused only once whole, so without this, unfinished ones
   * would grow past the alarm unchecked.
   */
  partialDeliveryRefusal?: (bytesSoFar: number) => string | undefined;
  /** Client role: log in through SASL (else straight to AMQP). */
  saslClient?: SaslClientOptions;
  session?: Partial<SessionOptions>;
  properties?: AmqpValue;
  offeredCapabilities?: string[];
  desiredCapabilities?: string[];
  handler?: EngineHandler;
  log?: LogHook;
  now?: () => number;
}

/** Where the input is: what the next bytes must be. */
type Stage = 'header' | 'sasl' | 'sasl-wait' | 'amqp-header' | 'open' | 'opened' | 'closing' | 'done';

const DEFAULTS = {
  maxFrameSize: 65536,
  channelMax: 255,
  idleTimeoutMs: 0,
  // Bounded by default: a receiving link assembles a multi-frame delivery in memory.
  maxMessageSize: 100 * 1024 * 1024,
  minPeerIdleTimeoutMs: 100,
  maxHeartbeatIntervalMs: 30 * 60_000,
  saslFrameLimit: 65536,
  maxOutputBytes: 1 << 20,
};

const OPEN = composite('open');
const CLOSE = composite('close');
const EMPTY_PAYLOAD = Buffer.alloc(0);
/** A frame with no body: a heartbeat (2.4.5). */
const EMPTY_FRAME = Buffer.from([0, 0, 0, 8, 2, FrameType.amqp, 0, 0]);

/** Our own frames are at most this big whatever the peer takes: a big message goes in several. */
const OUTGOING_FRAME_CAP = 1 << 20;

export class Connection {
  readonly role: Role;
  readonly maxFrameSize: number;
  readonly channelMax: number;
  readonly maxMessageSize: number;
  readonly requireInitialDeliveryCount: boolean;
  /** See ConnectionOptions.partialDeliveryRefusal. */
  readonly partialDeliveryRefusal: ((bytesSoFar: number) => string | undefined) | undefined;
  /** The peer's open, decoded (container-id, hostname, properties...). */
  remoteOpen: Composite | undefined;
  /** Who SASL said the peer is (server role); undefined without SASL. */
  identity: string | undefined;
  mechanism: string | undefined;
  remoteMaxFrameSize = MIN_MAX_FRAME_SIZE;
  /** Whether the socket takes more now (the transport says); senders wait while it does not. */
  writable = true;
  /** Host's own state. */
  context: unknown;
  /** Called when output goes from empty to not empty (the transport schedules a write). */
  onOutput: (() => void) | undefined;
  handler: EngineHandler;

  private stage: Stage = 'header';
  /** An idle-time-out for our open other than the configured one (see advertiseIdleTimeout). */
  private advertisedIdleMs: number | undefined;
  private readonly input = new ByteQueue();
  private readonly out = new FrameOutput();
  /** Output length when openOutput() handed the output to a session (see closeOutput). */
  private lengthAtOpen = -1;
  /**
   * Dispositions of consecutive delivery-ids on one session, alike in role, state and
   * settlement, are written as one frame with a range (2.7.6): a journal group or a
   * backup's acknowledgement settles a whole run of publishers' deliveries at once.
   * The run is written before any other frame, so the order on the wire is kept.
   */
  private pendingDisposition: PendingDisposition | undefined;
  /** A sender found no room (socket or output budget): tell the links when there is some. */
  private sendersWaiting = false;
  private openSent = false;
  private closeSent = false;
  private remoteChannelMax = 65535;
  private heartbeatMs = 0;
  private lastReceived: number;
  private lastSent: number;
  /** When the connection began: the handshake deadline counts from here. */
  private readonly startedAt: number;
  private readonly saslServer: SaslServer | undefined;
  /** Aborted once the socket is gone, so a login check still under way stops holding this connection. */
  private readonly gone = new AbortController();
  private readonly saslClient: SaslClient | undefined;
  private readonly sessionOptions: SessionOptions;
  private readonly byLocal = new Map<number, Session>();
  private readonly byRemote = new Map<number, Session>();
  private readonly now: () => number;
  private readonly o: ConnectionOptions & typeof DEFAULTS;

  constructor(options: ConnectionOptions) {
    this.o = { ...DEFAULTS, ...stripUndefined(options) } as ConnectionOptions & typeof DEFAULTS;
    this.role = options.role;
    this.maxFrameSize = Math.max(MIN_MAX_FRAME_SIZE, this.o.maxFrameSize);
    this.channelMax = this.o.channelMax;
    this.maxMessageSize = this.o.maxMessageSize;
    this.requireInitialDeliveryCount = options.requireInitialDeliveryCount ?? true;
    this.partialDeliveryRefusal = options.partialDeliveryRefusal;
    this.handler = options.handler ?? {};
    this.now = options.now ?? monotonicNow;
    this.lastReceived = this.lastSent = this.startedAt = this.now();
    this.sessionOptions = { ...DEFAULT_SESSION_OPTIONS, ...stripUndefined(options.session ?? {}) };
    if (this.role === 'server' && options.sasl) this.saslServer = new SaslServer(options.sasl, this.gone.signal);
    if (this.role === 'client' && options.saslClient) this.saslClient = new SaslClient(options.saslClient);
    if (this.role === 'client') {
      if (this.saslClient) this.writeRaw(protocolHeader(ProtocolId.sasl));
      else this.startAmqp();
    }
  }

  /** No more input is read and nothing more is written: the transport ends the socket once output is flushed. */
  get finished(): boolean {
    return this.stage === 'done' || this.stage === 'closing';
  }

  get isOpen(): boolean {
    return this.stage === 'opened' && !this.closeSent;
  }

  /** Bytes read and not used yet (held while a login is checked, or a frame is incomplete). */
  get bufferedInput(): number {
    return this.input.length;
  }

  get sessions(): Session[] {
    return [...this.byLocal.values()];
  }

  // ---- input

  feed(chunk: Buffer): void {
    if (this.stage === 'done') return;
    this.lastReceived = this.now();
    this.input.push(chunk);
    if (this.stage === 'sasl-wait') {
      // Nothing is read while a login is checked; a peer may not pile up more than a frame or two meanwhile.
      if (this.input.length > 2 * this.o.saslFrameLimit) this.violate(new AmqpError(Condition.resourceLimitExceeded, 'too many bytes sent while the login was checked'));
      return;
    }
    this.process();
  }

  /** The peer closed its side of the socket (or it broke). */
  ended(): void {
    // Nothing unread will be used now, and a login check (a hash queued behind others, a
    // throttle's wait) would keep this connection and those bytes long after the socket.
    this.input.drain();
    this.gone.abort();
    if (this.stage === 'done') return;
    const wasClosing = this.stage === 'closing';
    this.stage = 'done';
    if (!wasClosing) this.notify((h) => h.onClose?.(this, { condition: 'amqp:connection:forced', description: 'the socket closed' }, true));
  }

  private process(): void {
    try {
      // Every turn consumes at least 8 bytes of what was fed, so this ends.
      while (this.stage !== 'done' && this.stage !== 'sasl-wait' && this.input.length >= FRAME_HEADER_SIZE) {
        if (this.expectsHeader()) {
          this.onHeader(this.input.take(FRAME_HEADER_SIZE));
          continue;
        }
        const sasl = this.stage === 'sasl';
        let at = this.input.contiguous(FRAME_HEADER_SIZE);
        const header = readFrameHeader(this.input.head, at, sasl ? this.o.saslFrameLimit : this.maxFrameSize, sasl ? FrameType.sasl : FrameType.amqp);
        if (this.input.length < header.size) break;
        // Read in place: only a transfer's payload becomes a view of the bytes read.
        at = this.input.contiguous(header.size);
        const buf = this.input.head;
        const frame = readFrame(buf, at, header);
        this.input.skip(header.size);
        if (sasl) this.onSaslFrame(frame.body!);
        else if (frame.body) this.onFrame(header.channel, frame.body, frame.payloadStart === frame.end ? EMPTY_PAYLOAD : buf.subarray(frame.payloadStart, frame.end));
      }
    } catch (err) {
      this.violate(err);
    }
    if (this.stage === 'opened') for (const s of this.byLocal.values()) s.replenishWindow();
  }

  private expectsHeader(): boolean {
    return this.stage === 'header' || this.stage === 'amqp-header';
  }

  private onHeader(bytes: Buffer): void {
    const h = readProtocolHeader(bytes, 0);
    if (this.stage === 'amqp-header') {
      if (h.id !== ProtocolId.amqp) throw framingError(`protocol id ${h.id} after SASL, where the AMQP header (id 0) belongs`);
      if (this.role === 'server') this.writeRaw(protocolHeader(ProtocolId.amqp));
      this.stage = 'open';
      return;
    }
    if (this.role === 'client') {
      const want = this.saslClient ? ProtocolId.sasl : ProtocolId.amqp;
      if (h.id !== want) {
        // 2.2: a server answers a header it does not take with the one it does.
        const why = h.id === ProtocolId.sasl ? 'the server requires a login (it answered the AMQP header with the SASL one): give a user name' : h.id === ProtocolId.amqp ? 'the server offers no login (it answered the SASL header with the AMQP one): connect without a user name' : `the server answered with protocol id ${h.id} where ${want} was asked for`;
        return this.fail(why);
      }
      this.stage = h.id === ProtocolId.sasl ? 'sasl' : 'open';
      return;
    }
    if (h.id === ProtocolId.sasl) {
      if (!this.saslServer) return this.refuseHeader(ProtocolId.amqp, 'SASL is not offered here');
      this.writeRaw(protocolHeader(ProtocolId.sasl));
      this.writeSasl(this.saslServer.mechanisms());
      this.stage = 'sasl';
      return;
    }
    if (this.o.requireSasl) return this.refuseHeader(ProtocolId.sasl, 'SASL is required');
    this.writeRaw(protocolHeader(ProtocolId.amqp));
    this.stage = 'open';
  }

  /** 2.2: answer a header we do not take with the one we do, and stop. */
  private refuseHeader(id: number, why: string): void {
    this.writeRaw(protocolHeader(id));
    this.log('info', 'protocol header refused', { reason: why });
    this.stage = 'done';
    this.notify((h) => h.onClose?.(this, { condition: Condition.notAllowed, description: why }, false));
  }

  private onSaslFrame(body: Composite): void {
    if (this.saslServer) return this.applySasl(this.saslServer.onFrame(body));
    this.applySasl(this.saslClient!.onFrame(body, this.o.hostname));
  }

  private applySasl(steps: SaslStep[]): void {
    for (const step of steps) {
      if (this.stage === 'done') return;
      switch (step.kind) {
        case 'send':
          this.writeSasl(step.frame);
          break;
        case 'wait':
          this.stage = 'sasl-wait';
          step.verdict.then(
            (next) => this.resumeSasl(next),
            () => this.resumeSasl([{ kind: 'failed', description: 'the login check failed' }]),
          );
          return;
        case 'done':
          this.identity = step.identity;
          this.mechanism = this.saslClient?.mechanism;
          this.stage = 'amqp-header';
          this.notify((h) => h.onSaslDone?.(this, step.identity, this.mechanism ?? ''));
          if (this.role === 'client') this.startAmqp();
          break;
        case 'failed':
          this.fail(step.description, 'amqp:unauthorized-access');
          return;
      }
    }
  }

  private resumeSasl(steps: SaslStep[]): void {
    if (this.stage !== 'sasl-wait') return;
    this.stage = 'sasl';
    try {
      this.applySasl(steps);
    } catch (err) {
      this.violate(err);
    }
    this.process();
  }

  private onFrame(channel: number, body: Composite, payload: Buffer): void {
    const name = body.def.name;
    if (this.stage === 'closing') {
      if (name === 'close') this.onClose(body);
      return;
    }
    if (this.stage === 'open') {
      if (name !== 'open') throw framingError(`${name} before open`);
      return this.onOpen(body);
    }
    switch (name) {
      case 'open':
        throw framingError('open received twice');
      case 'close':
        return this.onClose(body);
      case 'begin':
        return this.onBegin(channel, body);
    }
    const session = this.byRemote.get(channel);
    if (!session) throw framingError(`${name} on channel ${channel}, where no session is begun`);
    session.onFrame(name, body, payload);
  }

  private onOpen(open: Composite): void {
    const f = open.fields;
    this.remoteOpen = open;
    // 2.7.1: max-frame-size is at least 512 (MIN-MAX-FRAME-SIZE).
    const maxFrame = f['max-frame-size'] as number;
    if (maxFrame < MIN_MAX_FRAME_SIZE) throw invalidField(`open.max-frame-size ${maxFrame} is below the spec's minimum of ${MIN_MAX_FRAME_SIZE} bytes`);
    this.remoteMaxFrameSize = Math.min(maxFrame, OUTGOING_FRAME_CAP);
    this.remoteChannelMax = f['channel-max'] as number;
    // 2.4.5: we must send something every half of the peer's idle-time-out. One
    // shorter than we can keep is refused, as the spec allows; a long one
    // (0xffffffff) only makes us send more often than asked.
    const idle = (f['idle-time-out'] as number | undefined) ?? 0;
    if (idle > 0 && idle < this.o.minPeerIdleTimeoutMs) {
      throw invalidField(`open.idle-time-out ${idle} ms asks for heartbeats more often than every ${this.o.minPeerIdleTimeoutMs / 2} ms`);
    }
    this.heartbeatMs = idle > 0 ? Math.min(Math.floor(idle / 2), this.o.maxHeartbeatIntervalMs) : 0;
    this.stage = 'opened';
    this.notify((h) => h.onOpen?.(this));
    if (this.role === 'server' && !this.closeSent && !this.finished) this.sendOpen();
  }

  private onClose(close: Composite): void {
    const error = errorInfoOf(close.fields.error);
    const byUs = this.closeSent;
    if (!byUs) {
      this.notify((h) => h.onClose?.(this, error, true));
      this.writeClose(undefined);
    }
    this.stage = 'done';
  }

  private onBegin(channel: number, begin: Composite): void {
    if (channel > this.channelMax) throw framingError(`begin on channel ${channel}, over channel-max ${this.channelMax}`);
    if (this.byRemote.has(channel)) throw new AmqpError(Condition.illegalState, `begin on channel ${channel}, where a session is already begun`);
    const answers = begin.fields['remote-channel'] as number | undefined;
    if (answers !== undefined) {
      const mine = this.byLocal.get(answers);
      if (!mine || !mine.beginSent || mine.beginReceived) throw framingError(`begin answers channel ${answers}, where no begin of ours waits`);
      mine.remoteChannel = channel;
      this.byRemote.set(channel, mine);
      mine.onBegin(begin);
      this.notify((h) => h.onSessionOpen?.(mine));
      return;
    }
    const session = new Session(this, this.freeChannel(), this.sessionOptions);
    session.remoteChannel = channel;
    this.byLocal.set(session.channel, session);
    this.byRemote.set(channel, session);
    session.onBegin(begin);
    this.notify((h) => h.onSessionBegin?.(session));
    if (!session.endSent) session.begin();
  }

  // ---- host actions

  /** Begin a session of ours (the peer answers: onSessionOpen). */
  beginSession(options: Partial<SessionOptions> = {}): Session {
    const session = new Session(this, this.freeChannel(), { ...this.sessionOptions, ...stripUndefined(options) });
    this.byLocal.set(session.channel, session);
    session.begin();
    return session;
  }

  /** Close the connection (with an error, or not). Nothing is read after it but the peer's close. */
  close(error?: ErrorInfo): void {
    if (this.closeSent || this.stage === 'done') return;
    if (this.stage === 'open' || this.stage === 'opened') {
      this.writeClose(error);
      this.stage = 'closing';
      return;
    }
    this.stage = 'done';
  }

  /**
   * Put this idle-time-out in our open instead of the configured one, if the open
   * has not gone out yet (a server turning a client away asks it for heartbeats,
   * so that a client ignoring the close still finds the socket gone soon).
   */
  advertiseIdleTimeout(ms: number): void {
    if (!this.openSent) this.advertisedIdleMs = ms;
  }

  /** The buffers to write, in order; the connection forgets them. */
  takeOutput(): Buffer[] {
    this.flushDisposition();
    const buffers = this.out.take();
    // Stamped here, once a write, not at every frame queued (a clock read each: several a message).
    if (buffers.length > 0) this.lastSent = this.now();
    return buffers;
  }

  /** Whether a transfer may be queued now: the socket takes more and this tick's output is under budget. */
  hasRoom(): boolean {
    const room = this.writable && this.out.length < this.o.maxOutputBytes;
    if (!room) this.sendersWaiting = true;
    return room;
  }

  /** The transport wrote what was queued and the socket takes more: senders that waited may go on. */
  written(): void {
    if (!this.writable || !this.sendersWaiting) return;
    this.sendersWaiting = false;
    this.notify((h) => h.onWritable?.(this));
    for (const s of this.byLocal.values()) {
      for (const l of s.links) if (l.sendable) this.notify((h) => h.onFlow?.(l));
    }
  }

  get hasOutput(): boolean {
    return !this.out.isEmpty || this.pendingDisposition !== undefined;
  }

  /**
   * A disposition of ours, joined to the run before it when it continues it. `state`
   * is compared by identity: the shared outcomes of delivery.ts (accepted, released)
   * and no state join runs; any other state is a run of its own.
   */
  queueDisposition(session: Session, role: boolean, id: number, settled: boolean, state: AmqpValue | undefined): void {
    if (this.finished) return;
    const p = this.pendingDisposition;
    if (p && p.session === session && p.role === role && p.settled === settled && p.state === state && id === serialAdd(p.last, 1)) {
      p.last = id;
      return;
    }
    this.flushDisposition();
    const wasEmpty = this.out.isEmpty;
    this.pendingDisposition = { session, role, first: id, last: id, settled, state };
    if (wasEmpty) this.onOutput?.();
  }

  private flushDisposition(): void {
    const p = this.pendingDisposition;
    if (!p) return;
    this.pendingDisposition = undefined;
    p.session.writeDisposition(p.role, p.first, p.last, p.settled, p.state);
  }

  /** Heartbeats and idle detection. Returns ms until it wants to be called again (undefined: no need). */
  tick(now = this.now()): number | undefined {
    if (this.stage !== 'opened') return this.handshakeTick(now);
    const idle = this.o.idleTimeoutMs > 0 ? (this.o.idleLimitMs ?? this.o.idleTimeoutMs) : 0;
    if (idle > 0 && now - this.lastReceived > idle) {
      this.violate(new AmqpError(Condition.resourceLimitExceeded, `no frame for ${now - this.lastReceived} ms: over idle-time-out ${idle} ms`));
      return undefined;
    }
    if (this.heartbeatMs > 0 && now - this.lastSent >= this.heartbeatMs) this.write(EMPTY_FRAME);
    let next = Number.POSITIVE_INFINITY;
    if (idle > 0) next = Math.min(next, idle - (now - this.lastReceived) + 1);
    if (this.heartbeatMs > 0) next = Math.min(next, this.heartbeatMs - (now - this.lastSent));
    return Number.isFinite(next) ? Math.max(1, next) : undefined;
  }

  /** Before the peer's open: ms until the handshake deadline, or close at it. */
  private handshakeTick(now: number): number | undefined {
    const limit = this.o.handshakeTimeoutMs ?? 0;
    if (limit <= 0 || this.role !== 'server' || this.finished) return undefined;
    const left = this.startedAt + limit - now;
    if (left > 0) return left;
    this.handshakeExpired(limit);
    return undefined;
  }

  /**
   * The peer did not open in time: answer as far as the handshake got, and stop. Before
   * a protocol header, with ours (2.2); in SASL, with outcome auth (it did not log in);
   * after SASL, with our open and a close saying why.
   */
  private handshakeExpired(limit: number): void {
    const error = { condition: Condition.resourceLimitExceeded, description: `no open within ${limit} ms of connecting` };
    this.log('info', 'connection closed at the handshake deadline', { stage: this.stage, limitMs: limit });
    switch (this.stage) {
      case 'header':
        this.writeRaw(protocolHeader(this.saslServer ? ProtocolId.sasl : ProtocolId.amqp));
        break;
      case 'sasl':
      case 'sasl-wait':
        this.writeSasl(saslOutcome(SaslCode.auth));
        // A check still under way would only hold this connection: its verdict can reach nobody now.
        this.gone.abort();
        break;
      case 'amqp-header':
        this.writeRaw(protocolHeader(ProtocolId.amqp));
        this.writeClose(error);
        break;
      case 'open':
        this.writeClose(error);
        break;
      default:
        break;
    }
    this.stage = 'done';
    this.notify((h) => h.onClose?.(this, error, false));
  }

  // ---- for sessions and the transport

  /** Bytes of ours as they are (protocol headers, frames encoded elsewhere). */
  write(bytes: Buffer): void {
    const out = this.openOutput();
    if (!out) return;
    out.raw(bytes);
    this.closeOutput();
  }

  /**
   * A frame of ours: the performative `def` with these fields (by spec name), on
   * `channel`. Returns 0 once written. With `whole`, a frame over the peer's
   * max-frame-size is not written and its size is returned instead (an attach, whose
   * termini cannot be cut: Link.sendAttach refuses the link then).
   */
  writeFrame(channel: number, def: CompositeDef, fields: Record<string, unknown>, whole = false): number {
    const out = this.openOutput();
    if (!out) return 0;
    try {
      out.beginFrame(FrameType.amqp, channel);
      out.performative(def, fields);
      // Over the peer's max-frame-size a frame breaks the spec (2.7.1), and the peer
      // would close on it without reading it. What the peer chose gets here only in an
      // attach (its termini, repeated) or an error (quoting its names); flow, begin and
      // a transfer's head are bounded, and our open's properties are the operator's.
      const over = out.headLength - this.remoteMaxFrameSize;
      if (over > 0) {
        const size = out.headLength;
        if (whole) {
          out.discardFrame();
          return size;
        }
        // An error's description (of a detach, end or close, or of a disposition's
        // rejected outcome) is cut to fit instead.
        const shorter = withShorterError(fields, over);
        if (shorter) {
          out.discardFrame();
          out.beginFrame(FrameType.amqp, channel);
          out.performative(def, shorter);
        } else {
          this.log('warn', "a frame over the peer's max-frame-size is sent", { performative: def.name, size, maxFrameSize: this.remoteMaxFrameSize });
        }
      }
      out.endFrame();
      return 0;
    } finally {
      this.closeOutput();
    }
  }

  /**
   * The output, for frames of ours (undefined once the connection is finished);
   * the run of dispositions gathered before them goes first. closeOutput() after.
   */
  openOutput(): FrameOutput | undefined {
    if (this.finished) return undefined;
    this.flushDisposition();
    this.lengthAtOpen = this.hasOutput ? this.out.length : 0;
    return this.out;
  }

  /** Frames were written (or not) through openOutput(): the transport is told when output starts. */
  closeOutput(): void {
    const before = this.lengthAtOpen;
    this.lengthAtOpen = -1;
    // A frame left half written (its encoding threw) is not sent.
    if (this.out.inFrame) this.out.discardFrame();
    if (this.out.length === before) return;
    if (before === 0) this.onOutput?.();
  }

  /** Whatever a handler throws is the host's failure: the connection closes, the process stays up. */
  notify(call: (h: EngineHandler) => void): void {
    try {
      call(this.handler);
    } catch (err) {
      this.handlerFailed(err);
    }
  }

  /** notify() for the two calls made per message, without a closure each time. */
  notifyTransfer(link: Link, delivery: Delivery): void {
    try {
      this.handler.onTransfer?.(link, delivery);
    } catch (err) {
      this.handlerFailed(err);
    }
  }

  notifyDisposition(delivery: Delivery): void {
    try {
      this.handler.onDisposition?.(delivery);
    } catch (err) {
      this.handlerFailed(err);
    }
  }

  private handlerFailed(err: unknown): void {
    this.log('error', 'a handler failed', { error: err instanceof Error ? err.message : String(err) });
    this.violate(new AmqpError(Condition.internalError, 'the host failed to handle a frame'));
  }

  log(level: LogLevel, message: string, fields: Record<string, unknown>): void {
    try {
      this.o.log?.(level, message, { container: this.remoteOpen?.fields['container-id'], ...fields });
    } catch {
      // A log hook that fails must not take the connection with it.
    }
  }

  sessionFinished(session: Session): void {
    this.byLocal.delete(session.channel);
    if (session.remoteChannel !== undefined) this.byRemote.delete(session.remoteChannel);
  }

  /** The transport's socket took everything (it had said it was full). */
  drained(): void {
    if (this.writable) return;
    this.writable = true;
    this.written();
  }

  // ---- helpers

  private startAmqp(): void {
    this.writeRaw(protocolHeader(ProtocolId.amqp));
    this.sendOpen();
    if (this.stage === 'header' && this.saslClient) this.stage = 'amqp-header';
  }

  private sendOpen(): void {
    if (this.openSent) return;
    this.openSent = true;
    const advertisedIdle = this.advertisedIdleMs ?? this.o.idleTimeoutMs;
    this.writeFrame(0, OPEN, {
      'container-id': this.o.containerId,
      hostname: this.role === 'client' ? this.o.hostname : undefined,
      'max-frame-size': this.maxFrameSize,
      'channel-max': { type: 'ushort', value: this.channelMax },
      'idle-time-out': advertisedIdle > 0 ? advertisedIdle : undefined,
      'offered-capabilities': this.o.offeredCapabilities,
      'desired-capabilities': this.o.desiredCapabilities,
      properties: this.o.properties,
    });
  }

  private writeClose(error: ErrorInfo | undefined): void {
    if (this.closeSent) return;
    this.sendOpen();
    this.writeFrame(0, CLOSE, { error });
    this.closeSent = true;
  }

  private writeRaw(bytes: Buffer): void {
    this.write(bytes);
  }

  private writeSasl(body: AmqpValue): void {
    this.write(frameHead(FrameType.sasl, 0, body, 0));
  }

  /** A failure that no close can carry (SASL, headers): say why and stop. */
  private fail(description: string, condition: string = Condition.notAllowed): void {
    this.log('info', 'connection failed', { condition, description });
    this.stage = 'done';
    this.notify((h) => h.onClose?.(this, { condition, description }, false));
  }

  /** The peer broke the protocol: answer with the condition where the stage allows, and stop reading. */
  private violate(err: unknown): void {
    if (this.stage === 'done') return;
    const e = err instanceof AmqpError ? err : new AmqpError(Condition.internalError, 'internal error');
    if (!(err instanceof AmqpError)) this.log('error', 'internal error reading a frame', { error: err instanceof Error ? err.message : String(err) });
    this.log('warn', 'connection closed for a violation', { condition: e.condition, description: e.description, stage: this.stage });
    const error = { condition: e.condition, description: e.description };
    switch (this.stage) {
      case 'header':
        // 2.2: answer with the header we would take.
        this.writeRaw(protocolHeader(this.saslServer ? ProtocolId.sasl : ProtocolId.amqp));
        break;
      case 'sasl':
      case 'sasl-wait':
        if (this.saslServer) this.writeSasl(saslOutcome(SaslCode.sys));
        break;
      case 'open':
      case 'opened':
        this.writeClose(error);
        break;
      default:
        break;
    }
    this.stage = 'done';
    this.notify((h) => h.onClose?.(this, error, false));
  }

  private freeChannel(): number {
    const limit = Math.min(this.remoteChannelMax, this.channelMax);
    // At most channel-max + 1 sessions, so this scan is bounded by the sessions there are.
    for (let c = 0; c <= limit; c++) if (!this.byLocal.has(c)) return c;
    throw new AmqpError(Condition.resourceLimitExceeded, `no channel free under channel-max ${limit}`);
  }
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

interface PendingDisposition {
  session: Session;
  role: boolean;
  first: number;
  last: number;
  settled: boolean;
  state: AmqpValue | undefined;
}

/** Said after a description cut to fit a frame. */
const CUT_MARK = '... (cut to fit the peer\'s max-frame-size)';

/**
 * `fields` with their error's description shortened by at least `over` bytes, or
 * undefined when there is no description long enough to shorten (the frame goes as it is).
 * The error is a detach's, end's or close's (an ErrorInfo), or that of the rejected
 * outcome (3.4.2) a disposition carries (an encoded value: see Outcome.rejected).
 */
function withShorterError(fields: Record<string, unknown>, over: number): Record<string, unknown> | undefined {
  const error = fields.error as { description?: unknown } | undefined;
  if (error !== undefined) {
    const cut = cutToFit(error.description, over);
    return cut === undefined ? undefined : { ...fields, error: { ...error, description: cut } };
  }
  const items = rejectedErrorFields(fields.state);
  if (!items) return undefined;
  const [condition, description, info] = items;
  const cut = cutToFit(description?.type === 'string' ? description.value : undefined, over);
  if (cut === undefined || condition?.type !== 'symbol') return undefined;
  return { ...fields, state: describedList('rejected', { error: { condition: condition.value, description: cut, info: info?.type === 'null' ? undefined : info } }) };
}

/** `description` shortened by at least `over` bytes and marked so, or undefined when it is not long enough. */
function cutToFit(description: unknown, over: number): string | undefined {
  if (typeof description !== 'string') return undefined;
  const target = Buffer.byteLength(description) - over - Buffer.byteLength(CUT_MARK);
  if (target < 0) return undefined;
  let cut = description.slice(0, target);
  // Bounded: each pass drops a tenth of what is left (a character is 1 to 4 bytes).
  while (Buffer.byteLength(cut) > target) cut = cut.slice(0, Math.floor(cut.length * 0.9));
  return cut + CUT_MARK;
}

const REJECTED_CODE = BigInt(composite('rejected').code);
const ERROR_CODE = BigInt(composite('error').code);

/** The fields of a disposition state's error (condition, description, info), when the state is a rejected outcome as describedList() makes it. */
function rejectedErrorFields(state: unknown): AmqpValue[] | undefined {
  const fieldsOf = (v: AmqpValue | undefined, code: bigint): AmqpValue[] | undefined =>
    v?.type === 'described' && v.descriptor.type === 'ulong' && v.descriptor.value === code && v.value.type === 'list' ? v.value.value : undefined;
  return fieldsOf(fieldsOf(state as AmqpValue | undefined, REJECTED_CODE)?.[0], ERROR_CODE);
}
