// The frame guard: tandem's own reader in front of the AMQP library that still
// runs the broker's connections (rhea). Every byte a client sends passes through
// it first. It frames the stream (protocol headers, frame headers, sizes against
// max-frame-size), decodes and type-checks every performative against the spec's
// tables (a transfer's performative, never its payload), and keeps the little
// connection, session and link state needed to refuse what would hurt the library
// behind it: frames out of order, transfers without a delivery-id or on
// unattached handles, disposition ranges wider than what is outstanding, a
// delivery growing past max-message-size, an idle-time-out it cannot honour.
// What passes is handed on unchanged (in as few pieces as it came), narrowed
// (a disposition's range, a clamped idle-time-out) or stripped (the payload of a
// delivery already refused). The first violation stops it: the host answers it,
// and nothing more is handed on.
import type { Composite } from './composite.js';
import { Encoder } from './encoder.js';
import { AmqpError, Condition, type ConditionName, framingError, invalidField } from './errors.js';
import {
  FRAME_HEADER_SIZE,
  type Frame,
  FrameType,
  MIN_MAX_FRAME_SIZE,
  payloadOf,
  ProtocolId,
  readFrame,
  readFrameHeader,
  readProtocolHeader,
  startsProtocolHeader,
} from './frames.js';
import type { AmqpValue } from './types.js';

/** Where the conversation is, as the client's bytes tell it. */
export type GuardStage = 'header' | 'sasl' | 'open' | 'opened' | 'closed';

export interface GuardViolation {
  condition: ConditionName;
  description: string;
  /** The stage the violation came in: before 'opened' no AMQP close can carry it. */
  stage: GuardStage;
  /** Whether an open frame has been handed on (the library can answer with a close). */
  openForwarded: boolean;
}

/** Delivery-ids of a session's deliveries still unsettled, as the library holds them. */
export interface UnsettledRange {
  first: number;
  last: number;
}

export interface GuardHost {
  /** Bytes that passed, in the order they came. */
  forward(bytes: Buffer): void;
  /** The one violation; nothing is forwarded after it. */
  refuse(violation: GuardViolation): void;
  /**
   * The unsettled deliveries of the session on `channel` (the client's channel)
   * that the broker sent (`sentByBroker`) or received; undefined if none.
   */
  unsettled(channel: number, sentByBroker: boolean): UnsettledRange | undefined;
  /** A delivery on a link grew past max-message-size: detach the link with this error. */
  oversize(channel: number, handle: number, error: AmqpError): void;
}

export interface GuardOptions {
  /** The max-frame-size the broker advertises: no frame may be bigger. */
  maxFrameSize: number;
  /** Largest message a link takes; 0: no limit. */
  maxMessageSize: number;
  /** Largest SASL frame (a few hundred bytes in practice; tokens can be longer). */
  saslFrameLimit: number;
  /** A peer's idle-time-out is lowered to this (we then heartbeat more often than asked, which is allowed). */
  maxPeerIdleTimeoutMs: number;
  /** A peer asking for heartbeats more often than this is refused (2.4.5 lets a peer refuse). */
  minPeerIdleTimeoutMs: number;
}

export const DEFAULT_GUARD_OPTIONS: Omit<GuardOptions, 'maxFrameSize' | 'maxMessageSize'> = {
  saslFrameLimit: 65536,
  maxPeerIdleTimeoutMs: 3_600_000,
  minPeerIdleTimeoutMs: 100,
};

interface LinkState {
  /** The client's role: false, it sends (the broker receives); true, it receives. */
  clientReceives: boolean;
  /** The delivery whose transfers are still coming (more=true so far). */
  delivery: { id: number; bytes: number; refused: boolean } | undefined;
}

interface SessionState {
  links: Map<number, LinkState>;
  /** The delivery-id the client's next new delivery must carry (known after its first). */
  nextDeliveryId: number | undefined;
}

/** What becomes of one frame. */
type Verdict = { pass: true } | { pass: false; replace: Buffer | undefined };
const PASS: Verdict = { pass: true };

const U32 = 0xffffffff;

export class FrameGuard {
  private stage: GuardStage = 'header';
  private stopped = false;
  private openForwarded = false;
  private saslInitSeen = false;
  private readonly sessions = new Map<number, SessionState>();
  /** Bytes of a unit (protocol header or frame) that has not fully arrived. */
  private held: Buffer[] = [];
  private heldBytes = 0;
  private heldSize = 0;

  constructor(
    private readonly host: GuardHost,
    private readonly options: GuardOptions,
  ) {}

  get currentStage(): GuardStage {
    return this.stage;
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  /** Bytes from the socket. */
  push(chunk: Buffer): void {
    if (this.stopped) return;
    let at = 0;
    // First finish a unit that straddles reads: only its bytes are copied, once.
    while (this.heldBytes > 0 && at < chunk.length) {
      const want = this.heldSize || FRAME_HEADER_SIZE;
      const take = Math.min(want - this.heldBytes, chunk.length - at);
      this.held.push(chunk.subarray(at, at + take));
      this.heldBytes += take;
      at += take;
      if (this.heldBytes < want) return;
      const unit = this.held.length === 1 ? this.held[0]! : Buffer.concat(this.held, this.heldBytes);
      if (this.heldSize === 0) {
        // The first 8 bytes are in: now the unit's size is known.
        const size = this.unitSize(unit);
        if (size === undefined) return;
        if (size > FRAME_HEADER_SIZE) {
          this.held = [unit];
          this.heldSize = size;
          continue;
        }
      }
      this.held = [];
      this.heldBytes = 0;
      this.heldSize = 0;
      this.scan(unit, 0);
      if (this.stopped) return;
    }
    if (at >= chunk.length) return;
    const end = this.scan(chunk, at);
    if (end < chunk.length && !this.stopped) {
      this.held = [chunk.subarray(end)];
      this.heldBytes = chunk.length - end;
      this.heldSize = 0;
      if (this.heldBytes >= FRAME_HEADER_SIZE) {
        const size = this.unitSize(this.held[0]!);
        if (size !== undefined) this.heldSize = size;
      }
    }
  }

  /** Size of the unit starting `buf` (8 bytes of it there), or undefined after a violation. */
  private unitSize(buf: Buffer): number | undefined {
    if (this.expectsProtocolHeader(buf, 0)) return FRAME_HEADER_SIZE;
    try {
      return readFrameHeader(buf, 0, this.frameLimit(), this.frameType()).size;
    } catch (err) {
      this.violation(err);
      return undefined;
    }
  }

  private expectsProtocolHeader(buf: Buffer, at: number): boolean {
    return this.stage === 'header' || (this.stage === 'sasl' && startsProtocolHeader(buf, at));
  }

  private frameType(): 0 | 1 {
    return this.stage === 'sasl' ? FrameType.sasl : FrameType.amqp;
  }

  private frameLimit(): number {
    return this.stage === 'sasl' ? this.options.saslFrameLimit : this.options.maxFrameSize;
  }

  /** Check the whole units in `buf` from `at`; hand on what passes; return where an incomplete unit starts. */
  private scan(buf: Buffer, at: number): number {
    let runStart = at;
    const flush = (upTo: number) => {
      if (upTo > runStart) this.host.forward(runStart === 0 && upTo === buf.length ? buf : buf.subarray(runStart, upTo));
    };
    while (!this.stopped && buf.length - at >= FRAME_HEADER_SIZE) {
      if (this.stage === 'closed') {
        // Nothing may follow a close: what does is dropped, not handed on.
        flush(at);
        this.stopped = true;
        return buf.length;
      }
      let verdict: Verdict;
      let size: number;
      try {
        if (this.expectsProtocolHeader(buf, at)) {
          this.onProtocolHeader(buf, at);
          size = FRAME_HEADER_SIZE;
          verdict = PASS;
        } else {
          const header = readFrameHeader(buf, at, this.frameLimit(), this.frameType());
          if (buf.length - at < header.size) break;
          size = header.size;
          verdict = this.onFrame(readFrame(buf, at, header), buf);
        }
      } catch (err) {
        flush(at);
        this.violation(err);
        return buf.length;
      }
      if (!verdict.pass) {
        flush(at);
        if (verdict.replace) this.host.forward(verdict.replace);
        runStart = at + size;
      }
      at += size;
    }
    flush(at);
    return at;
  }

  private violation(err: unknown): void {
    this.stopped = true;
    const e = err instanceof AmqpError ? err : new AmqpError(Condition.internalError, `frame guard: ${(err as Error)?.message ?? String(err)}`);
    this.host.refuse({ condition: e.condition, description: e.description, stage: this.stage, openForwarded: this.openForwarded });
  }

  private onProtocolHeader(buf: Buffer, at: number): void {
    const h = readProtocolHeader(buf, at);
    if (this.stage === 'header') {
      this.stage = h.id === ProtocolId.sasl ? 'sasl' : 'open';
    } else {
      // After SASL (5.3.1: the client then starts the AMQP layer with its own header).
      if (h.id !== ProtocolId.amqp) throw framingError(`protocol id ${h.id} after SASL, where the AMQP header (id 0) belongs`);
      this.stage = 'open';
    }
  }

  private onFrame(frame: Frame, buf: Buffer): Verdict {
    const body = frame.body;
    if (this.stage === 'sasl') return this.onSasl(body!);
    if (!body) return PASS; // an empty frame: a heartbeat
    const name = body.def.name;
    if (this.stage === 'open') {
      if (name !== 'open') throw framingError(`${name} before open`);
      return this.onOpen(frame, body, buf);
    }
    const channel = frame.header.channel;
    switch (name) {
      case 'open':
        throw framingError('open received twice');
      case 'close':
        this.stage = 'closed';
        return PASS;
      case 'begin':
        if (this.sessions.has(channel)) throw new AmqpError(Condition.illegalState, `begin on channel ${channel}, where a session is already begun`);
        this.sessions.set(channel, { links: new Map(), nextDeliveryId: undefined });
        return PASS;
    }
    const session = this.sessions.get(channel);
    if (!session) throw framingError(`${name} on channel ${channel}, where no session is begun`);
    switch (name) {
      case 'end':
        this.sessions.delete(channel);
        return PASS;
      case 'attach':
        return this.onAttach(session, body);
      case 'detach':
        this.linkOf(session, body, 'detach');
        session.links.delete(body.fields.handle as number);
        return PASS;
      case 'flow':
        if (body.fields.handle !== undefined) this.linkOf(session, body, 'flow');
        return PASS;
      case 'transfer':
        return this.onTransfer(session, channel, frame, body, buf);
      case 'disposition':
        return this.onDisposition(channel, frame, body, buf);
      default:
        throw framingError(`unexpected ${name} frame`);
    }
  }

  /** 5.3.2: the client sends one sasl-init, then a sasl-response to each challenge. */
  private onSasl(body: Composite): Verdict {
    const name = body.def.name;
    if (name !== 'sasl-init' && name !== 'sasl-response') throw new AmqpError(Condition.notAllowed, `${name} is not a frame a client sends`);
    if (name === 'sasl-init' && this.saslInitSeen) throw new AmqpError(Condition.notAllowed, 'sasl-init received twice');
    if (name === 'sasl-response' && !this.saslInitSeen) throw new AmqpError(Condition.notAllowed, 'sasl-response before sasl-init');
    this.saslInitSeen = true;
    return PASS;
  }

  /**
   * The peer's idle-time-out says how often we must send something (2.4.5). The
   * library heartbeats at half of it with a timer that cannot wait longer than
   * 2^31-1 ms (0xffffffff came out as a heartbeat every millisecond), so a long
   * one is lowered, which only makes us send more often than asked; one too short
   * to honour is refused, as the spec allows.
   */
  private onOpen(frame: Frame, open: Composite, buf: Buffer): Verdict {
    const idle = (open.fields['idle-time-out'] as number | undefined) ?? 0;
    const { minPeerIdleTimeoutMs: min, maxPeerIdleTimeoutMs: max } = this.options;
    this.stage = 'opened';
    if (idle > 0 && idle < min) {
      throw invalidField(`open.idle-time-out ${idle} ms asks for heartbeats more often than the broker sends them (every ${min / 2} ms at most)`);
    }
    // 2.7.1: max-frame-size is at least 512 (MIN-MAX-FRAME-SIZE). Below that every
    // delivery we send would be cut into thousands of frames (one message, 20,000).
    const maxFrame = open.fields['max-frame-size'] as number | undefined;
    if (maxFrame !== undefined && maxFrame < MIN_MAX_FRAME_SIZE) {
      throw invalidField(`open.max-frame-size ${maxFrame} is below the spec's minimum of ${MIN_MAX_FRAME_SIZE} bytes`);
    }
    this.openForwarded = true;
    if (idle <= max) return PASS;
    return { pass: false, replace: rewrittenFields(buf, frame, open, { 'idle-time-out': { type: 'uint', value: max } }) };
  }

  private onAttach(session: SessionState, attach: Composite): Verdict {
    const handle = attach.fields.handle as number;
    if (session.links.has(handle)) throw new AmqpError(Condition.handleInUse, `attach on handle ${handle}, which is in use`);
    session.links.set(handle, { clientReceives: attach.fields.role as boolean, delivery: undefined });
    return PASS;
  }

  private linkOf(session: SessionState, body: Composite, what: string): LinkState {
    const handle = body.fields.handle as number;
    const link = session.links.get(handle);
    if (!link) throw new AmqpError(Condition.unattachedHandle, `${what} on handle ${handle}, which is not attached`);
    return link;
  }

  private onTransfer(session: SessionState, channel: number, frame: Frame, transfer: Composite, buf: Buffer): Verdict {
    const link = this.linkOf(session, transfer, 'transfer');
    if (link.clientReceives) throw new AmqpError(Condition.notAllowed, `transfer on handle ${transfer.fields.handle as number}, where the client is the receiver`);
    const f = transfer.fields;
    const id = f['delivery-id'] as number | undefined;
    let delivery = link.delivery;
    if (!delivery) {
      if (id === undefined) throw invalidField('transfer.delivery-id is mandatory on the first transfer of a delivery');
      if (session.nextDeliveryId !== undefined && id !== session.nextDeliveryId) {
        throw invalidField(`transfer.delivery-id ${id} where the session's next delivery is ${session.nextDeliveryId}`);
      }
      session.nextDeliveryId = (id + 1) % (U32 + 1);
      delivery = { id, bytes: 0, refused: false };
    } else if (id !== undefined && id !== delivery.id) {
      throw invalidField(`transfer.delivery-id ${id} while delivery ${delivery.id} on this link is not complete`);
    }
    const ends = !(f.more as boolean) || (f.aborted as boolean);
    link.delivery = ends ? undefined : delivery;
    const payloadLength = frame.end - frame.payloadStart;
    delivery.bytes += payloadLength;
    const limit = this.options.maxMessageSize;
    if (limit > 0 && delivery.bytes > limit && !(f.aborted as boolean)) {
      if (!delivery.refused) {
        delivery.refused = true;
        this.host.oversize(channel, f.handle as number, new AmqpError(Condition.messageSizeExceeded, `delivery ${delivery.id} reached ${delivery.bytes} bytes, over max-message-size ${limit}`));
      }
    }
    // A refused delivery's frames still pass, so the session's counts stay right, but without their payload.
    if (!delivery.refused || payloadLength === 0) return PASS;
    const head = buf.subarray(frame.bodyStart, frame.payloadStart);
    const out = Buffer.allocUnsafe(FRAME_HEADER_SIZE + head.length);
    out.writeUInt32BE(out.length, 0);
    out[4] = 2;
    out[5] = FrameType.amqp;
    out.writeUInt16BE(channel, 6);
    head.copy(out, FRAME_HEADER_SIZE);
    return { pass: false, replace: out };
  }

  /**
   * A disposition's range is narrowed to the deliveries outstanding on its session:
   * the library walks every id of the range it is given (first=0, last=2^32-1
   * stalled the broker for seconds), and ids outside it name nothing anyway.
   */
  private onDisposition(channel: number, frame: Frame, disposition: Composite, buf: Buffer): Verdict {
    const f = disposition.fields;
    const first = f.first as number;
    const last = (f.last as number | undefined) ?? first;
    // role true: the client is the receiver, so the range names deliveries the broker sent.
    const outstanding = this.host.unsettled(channel, f.role as boolean);
    if (!outstanding) return { pass: false, replace: undefined };
    // A range that wraps (first > last, serial numbers) is taken up to the top of the id space.
    const lo = Math.max(first, outstanding.first);
    const hi = Math.min(first <= last ? last : U32, outstanding.last);
    if (lo > hi) return { pass: false, replace: undefined };
    if (lo === first && hi === last) return PASS;
    const narrowed = rewrittenFields(buf, frame, disposition, { first: { type: 'uint', value: lo }, last: { type: 'uint', value: hi } });
    return { pass: false, replace: narrowed };
  }
}

/** The frame again with fields of its performative changed. */
function rewrittenFields(buf: Buffer, frame: Frame, body: Composite, changes: Record<string, AmqpValue>): Buffer {
  const list = body.value.value;
  if (list.type !== 'list') throw new AmqpError(Condition.internalError, 'a performative that is not a list');
  const items = [...list.value];
  for (const [name, value] of Object.entries(changes)) {
    const i = body.def.fields.findIndex((f) => f.name === name);
    while (items.length <= i) items.push({ type: 'null' });
    items[i] = value;
  }
  const e = new Encoder(64);
  e.raw(Buffer.from([0, 0, 0, 0, 2, frame.header.type, frame.header.channel >> 8, frame.header.channel & 0xff]));
  e.write({ type: 'described', descriptor: body.value.descriptor, value: { type: 'list', value: items } });
  e.raw(payloadOf(buf, frame));
  const out = e.bytes();
  out.writeUInt32BE(out.length, 0);
  return out;
}
