// A link (spec 2.6): attach/detach, the terminus the peer gave (decoded
// composites), credit and drain (2.6.7), and the transfers of one direction.
// A receiving link assembles multi-frame deliveries, bounded by the
// max-message-size it advertised as each frame arrives, and takes no more
// deliveries than the credit it gave. A sending link sends only against the
// peer's credit and the session's remote incoming window. An attach of ours
// that would be over the peer's max-frame-size refuses the link instead.
import type { Composite } from './composite.js';
import { Delivery } from './delivery.js';
import { AmqpError, Condition, invalidField } from './errors.js';
import { composite } from './definitions.js';
import { type ErrorInfo, describedList, errorInfoOf } from './performative.js';
import { serialAdd, serialDiff } from './serial.js';
import type { Session } from './session.js';
import type { AmqpValue } from './types.js';

export type LinkRole = 'sender' | 'receiver';

/** What we put in our attach. Termini are composites as AmqpValues (see terminus()). */
export interface AttachOptions {
  source?: AmqpValue | Composite | null;
  target?: AmqpValue | Composite | null;
  sndSettleMode?: 0 | 1 | 2;
  rcvSettleMode?: 0 | 1;
  /** Receiving links: the largest message taken (advertised); 0 for none. Default: the connection's. */
  maxMessageSize?: number;
  properties?: AmqpValue;
  offeredCapabilities?: string[];
  desiredCapabilities?: string[];
}

/** A source or target (3.5.3, 3.5.4) to attach with. */
export function terminus(
  kind: 'source' | 'target',
  fields: { address?: string; dynamic?: boolean; durable?: number; expiryPolicy?: string; capabilities?: string[]; filter?: AmqpValue; dynamicNodeProperties?: AmqpValue; distributionMode?: 'move' | 'copy' },
): AmqpValue {
  return describedList(kind, {
    address: fields.address,
    durable: fields.durable,
    'expiry-policy': fields.expiryPolicy === undefined ? undefined : { type: 'symbol', value: fields.expiryPolicy },
    dynamic: fields.dynamic,
    'dynamic-node-properties': fields.dynamicNodeProperties,
    capabilities: fields.capabilities,
    ...(kind === 'source' && fields.distributionMode ? { 'distribution-mode': { type: 'symbol', value: fields.distributionMode } } : {}),
    ...(kind === 'source' && fields.filter ? { filter: fields.filter } : {}),
  });
}

const ATTACH = composite('attach');
const DETACH = composite('detach');

interface Incoming {
  delivery: Delivery;
  chunks: Buffer[];
  bytes: number;
}

export class Link {
  localHandle: number;
  remoteHandle: number | undefined;
  attachSent = false;
  attachReceived = false;
  detachSent = false;
  detachReceived = false;
  /** The peer's attach, decoded: name, termini, settle modes, max-message-size... */
  remoteAttach: Composite | undefined;
  /** Our view of the delivery-count (2.6.7). */
  deliveryCount = 0;
  /** Sender: credit the peer gave; receiver: credit we gave and is not used. */
  credit = 0;
  /** The drain flag of the last flow (the peer's, on a sender; ours, on a receiver). */
  drain = false;
  /** Receiver: what the sender says it has (available, in its flows). */
  available = 0;
  /** Largest message our receiving end takes (0: any). */
  maxMessageSize = 0;
  /** Host's own state for this link. */
  context: unknown;
  /** The peer's detach said closed=true (the link ends for good, not just detaches). */
  remoteClosed = false;
  /**
   * Why we refused this link ourselves: our attach would have been over the peer's
   * max-frame-size (sendAttach). Told to the host when the peer answers our detach.
   */
  oversize: ErrorInfo | undefined;
  private nextTag = 0;
  private incoming: Incoming | undefined;

  constructor(
    readonly session: Session,
    readonly name: string,
    readonly role: LinkRole,
    handle: number,
  ) {
    this.localHandle = handle;
  }

  get isSender(): boolean {
    return this.role === 'sender';
  }

  get source(): Composite | undefined {
    return this.remoteAttach?.fields.source as Composite | undefined;
  }

  get target(): Composite | undefined {
    return this.remoteAttach?.fields.target as Composite | undefined;
  }

  /** The peer's max-message-size (0: none). */
  get remoteMaxMessageSize(): number {
    const v = this.remoteAttach?.fields['max-message-size'] as bigint | undefined;
    return v === undefined || v > BigInt(Number.MAX_SAFE_INTEGER) ? 0 : Number(v);
  }

  get isOpen(): boolean {
    return this.attachSent && this.attachReceived && !this.detachSent && !this.detachReceived;
  }

  /** A sending link may send now: credit, session window, socket all allow it. */
  get sendable(): boolean {
    return this.isSender && this.isOpen && this.credit > 0 && this.session.canSendTransfer();
  }

  // ---- host actions

  /** Answer the peer's attach (a link the peer started). */
  accept(options: AttachOptions = {}): void {
    if (this.attachSent) return;
    this.sendAttach({
      ...options,
      source: options.source === undefined ? this.source : options.source,
      target: options.target === undefined ? this.target : options.target,
    });
  }

  /** Refuse the peer's attach (2.6.3): attach without a terminus, then detach with the error. */
  refuse(error: ErrorInfo): void {
    if (!this.attachSent) this.sendAttach({}, true);
    this.detach(error);
  }

  /**
   * Detach, with an error or not: closed (the link ends, 2.6.6) unless `closed` is false,
   * which answers a peer's detach that was not closing (the terminus it keeps, a durable
   * subscription's, is not destroyed by our answer either).
   */
  detach(error?: ErrorInfo, closed = true): void {
    if (this.detachSent) return;
    this.detachSent = true;
    this.incoming = undefined;
    this.session.sendLinkFrame(DETACH, { handle: this.localHandle, closed, error });
    this.session.linkDetached(this);
  }

  /** Receiver: give the peer `credit` (replacing what is left), perhaps asking it to drain. */
  flow(credit: number, drain = false): void {
    if (this.isSender || this.detachSent) return;
    this.credit = Math.max(0, Math.min(credit, 0xffffffff));
    this.drain = drain;
    this.sendFlow(false);
  }

  /** Sender: say that we have nothing more (drain done: the credit is used up), or how much is available. */
  drained(): void {
    if (!this.isSender || this.credit === 0 || this.detachSent) return;
    this.deliveryCount = serialAdd(this.deliveryCount, this.credit);
    this.credit = 0;
    this.sendFlow(false);
  }

  /** Sender: send one message (its encoded sections) as one delivery. */
  send(payload: Buffer, options: { settled?: boolean; tag?: Buffer; messageFormat?: number } = {}): Delivery {
    if (!this.sendable) throw new AmqpError(Condition.illegalState, `link ${this.name} cannot send now (credit ${this.credit})`);
    const limit = this.remoteMaxMessageSize;
    if (limit > 0 && payload.length > limit) throw new AmqpError(Condition.messageSizeExceeded, `a message of ${payload.length} bytes is over the peer's max-message-size ${limit}`);
    const tag = options.tag ?? this.tagFor(this.nextTag++);
    if (tag.length > 32) throw new AmqpError(Condition.invalidField, `a delivery-tag of ${tag.length} bytes is longer than 32 (2.8.7)`);
    const settled = options.settled ?? this.sndSettleModeIsSettled();
    const d = new Delivery(this, this.session.allocateDeliveryId(), tag, payload, options.messageFormat ?? 0, settled, false);
    this.credit--;
    this.deliveryCount = serialAdd(this.deliveryCount, 1);
    this.session.sendDelivery(d);
    return d;
  }

  // ---- from the session

  /**
   * Our attach: the peer's answer (accept, refuse) or the first of a link we start.
   * One over the peer's max-frame-size (2.7.1: long addresses, filters or capabilities,
   * which an answer repeats) would make the peer close the connection without reading
   * it: the link is refused instead, with the attach a refusal sends (no termini) and a
   * detach saying why (see refuseOversize).
   */
  sendAttach(options: AttachOptions, refusing = false): void {
    this.attachSent = true;
    const receiver = !this.isSender;
    if (receiver && options.maxMessageSize !== undefined) this.maxMessageSize = options.maxMessageSize;
    // What even a refusal's attach carries (2.6.3): the name, the role, the settle modes and the count.
    const bare = {
      name: this.name,
      handle: this.localHandle,
      role: receiver,
      'snd-settle-mode': options.sndSettleMode === undefined ? this.remoteAttach?.fields['snd-settle-mode'] : options.sndSettleMode,
      'rcv-settle-mode': options.rcvSettleMode === undefined ? this.remoteAttach?.fields['rcv-settle-mode'] : options.rcvSettleMode,
      'initial-delivery-count': this.isSender ? this.deliveryCount : undefined,
    };
    const attach = refusing
      ? bare
      : {
          ...bare,
          source: options.source,
          target: options.target,
          'max-message-size': receiver && this.maxMessageSize > 0 ? BigInt(this.maxMessageSize) : undefined,
          'offered-capabilities': options.offeredCapabilities,
          'desired-capabilities': options.desiredCapabilities,
          properties: options.properties,
        };
    // Measured as it is written (an attach is rare): nothing is added for frames that fit.
    const size = this.session.sendLinkFrame(ATTACH, attach, true);
    if (size > 0) this.refuseOversize(size, refusing ? undefined : bare);
  }

  /**
   * Our attach would have been `size` bytes, over the peer's max-frame-size. Refused as
   * refuse() refuses, with amqp:frame-size-too-small (2.8.15): the `bare` attach, then
   * our detach. The host, which accepted or attached the link and is still in that call,
   * is told once the peer answers the detach (Session.onDetach). When not even the bare
   * attach fits (a name too long), no attach of ours can name the link, so no detach can
   * refuse it: the session ends with the error.
   */
  private refuseOversize(size: number, bare: Record<string, unknown> | undefined): void {
    const connection = this.session.connection;
    const limit = connection.remoteMaxFrameSize;
    const what = this.attachReceived ? "the attach's echo" : 'the attach';
    const bareSize = bare ? this.session.sendLinkFrame(ATTACH, bare, true) : size;
    if (bareSize > 0) {
      connection.log('warn', "session ended: a link's name is too long for any attach within the peer's max-frame-size", { link: this.name, size: bareSize, maxFrameSize: limit });
      this.session.fail(Condition.frameSizeTooSmall, `${what} would be ${bareSize} bytes even without its source and target, over the peer's max-frame-size ${limit}: the link's name (${Buffer.byteLength(this.name)} bytes) is too long`);
      return;
    }
    const why = this.attachReceived ? ": the link's source or target (address, filter, capabilities) is too long to repeat" : '';
    this.oversize = { condition: Condition.frameSizeTooSmall, description: `${what} would be ${size} bytes, over the peer's max-frame-size ${limit}${why}` };
    connection.log('info', "link refused: its attach would be over the peer's max-frame-size", { link: this.name, size, maxFrameSize: limit });
    this.detach(this.oversize);
  }

  /** The peer's attach for this link (ours was first, or it starts the link). */
  onAttach(attach: Composite): void {
    this.attachReceived = true;
    this.remoteAttach = attach;
    if (!this.isSender) {
      const count = attach.fields['initial-delivery-count'] as number | undefined;
      const strict = this.session.connection.requireInitialDeliveryCount;
      if (strict && count === undefined && !this.detachSent && (attach.fields.target !== undefined || attach.fields.source !== undefined)) {
        throw invalidField('attach.initial-delivery-count is mandatory from a sender');
      }
      this.deliveryCount = count ?? 0;
    }
  }

  /** The link fields of a flow from the peer. */
  onFlow(flow: Composite): void {
    const f = flow.fields;
    const count = f['delivery-count'] as number | undefined;
    const credit = f['link-credit'] as number | undefined;
    if (this.isSender) {
      // 2.6.7: credit = the receiver's delivery-count + link-credit - ours.
      // The counts are close (serial arithmetic); the credit may be up to 2^32-1, so it is added as is,
      // and the sum kept to a uint: a peer naming a count far ahead of ours would otherwise give
      // credit that our own flow (an echo) cannot encode.
      if (credit !== undefined) this.credit = Math.min(0xffffffff, Math.max(0, credit + serialDiff(this.deliveryCount, count ?? this.initialCount())));
      this.drain = f.drain as boolean;
    } else {
      // The sender advanced its delivery-count (a drain, or deliveries we have not seen yet).
      if (count !== undefined) {
        const used = serialDiff(this.deliveryCount, count);
        if (used > 0) this.credit = Math.max(0, this.credit - used);
        this.deliveryCount = count;
      }
      this.available = (f.available as number | undefined) ?? this.available;
      if (this.credit === 0) this.drain = false;
    }
  }

  /** Our flow for this link (echo when the peer asked). */
  sendFlow(echo: boolean): void {
    this.session.sendFlow(this, echo);
  }

  /** One transfer frame for this receiving link. */
  onTransfer(transfer: Composite, payload: Buffer): Delivery | undefined {
    if (this.isSender) throw new AmqpError(Condition.notAllowed, `transfer on handle ${this.remoteHandle}, where the peer is the receiver`);
    const f = transfer.fields;
    const id = f['delivery-id'] as number | undefined;
    if (this.detachSent) {
      // In flight when we detached: dropped, but a new delivery still takes its id in the session.
      if (id !== undefined) this.session.takeDeliveryIdIfNext(id);
      return undefined;
    }
    let current = this.incoming;
    if (!current) {
      if (id === undefined) throw invalidField('transfer.delivery-id is mandatory on the first transfer of a delivery');
      this.session.takeDeliveryId(id);
      const tag = f['delivery-tag'] as Buffer | undefined;
      if (tag === undefined) throw invalidField('transfer.delivery-tag is mandatory on the first transfer of a delivery');
      const d = new Delivery(this, id, tag, payload, (f['message-format'] as number | undefined) ?? 0, f.settled === true, true);
      this.deliveryCount = serialAdd(this.deliveryCount, 1);
      if (this.credit === 0) {
        return this.violated({ condition: Condition.transferLimitExceeded, description: `delivery ${id} came without credit` });
      }
      this.credit--;
      if (f.more !== true && f.aborted !== true) {
        // The common case, a delivery in one frame: nothing to assemble.
        if (f.state !== undefined) d.remoteState = f.state as Composite;
        if (this.maxMessageSize > 0 && payload.length > this.maxMessageSize) {
          return this.violated({ condition: Condition.messageSizeExceeded, description: `delivery ${id} of ${payload.length} bytes is over max-message-size ${this.maxMessageSize}` });
        }
        return d;
      }
      current = { delivery: d, chunks: [], bytes: 0 };
      this.incoming = current;
    } else if (id !== undefined && id !== current.delivery.id) {
      throw invalidField(`transfer.delivery-id ${id} while delivery ${current.delivery.id} on this link is not complete`);
    }
    if (f.aborted === true) {
      // 2.6.14: an aborted delivery is gone; it takes no settlement. Nor is it a message the
      // host will ever settle, which is when a host gives credit again: the credit it took
      // is given back now (the sender learns it from our flow), so that a sender aborting
      // as many deliveries as it had credit for is not left with none for good.
      this.incoming = undefined;
      this.credit = Math.min(0xffffffff, this.credit + 1);
      this.sendFlow(false);
      return undefined;
    }
    if (f.settled === true) current.delivery.remoteSettled = true;
    // A transfer may carry the sender's state (transactional-state: a send under a transaction).
    if (f.state !== undefined) current.delivery.remoteState = f.state as Composite;
    current.bytes += payload.length;
    if (this.maxMessageSize > 0 && current.bytes > this.maxMessageSize) {
      return this.violated({ condition: Condition.messageSizeExceeded, description: `delivery ${current.delivery.id} reached ${current.bytes} bytes, over max-message-size ${this.maxMessageSize}` });
    }
    if (f.more === true) {
      // Not held any longer while the host cannot take more (its memory alarm): the whole
      // message would be refused anyway, and unfinished ones are memory no refusal frees.
      const refusal = this.session.connection.partialDeliveryRefusal?.(current.bytes);
      if (refusal !== undefined) {
        return this.violated({ condition: Condition.resourceLimitExceeded, description: `delivery ${current.delivery.id} is not taken further (${current.bytes} bytes so far): ${refusal}` });
      }
    }
    if (payload.length > 0) current.chunks.push(payload);
    if (f.more === true) return undefined;
    this.incoming = undefined;
    const d = current.delivery;
    d.payload = current.chunks.length === 1 ? current.chunks[0]! : Buffer.concat(current.chunks, current.bytes);
    return d;
  }

  /** Whether a delivery is partly received (its later frames carry no delivery-id). */
  get receiving(): boolean {
    return this.incoming !== undefined;
  }

  // ---- helpers

  /** A violation scoped to this link: detach it with the error, and tell the host. */
  private violated(error: ErrorInfo): undefined {
    this.session.connection.log('warn', 'link detached for a violation', { link: this.name, condition: error.condition, description: error.description });
    this.detach(error);
    this.session.connection.notify((h) => h.onLinkDetach?.(this, error, false));
    return undefined;
  }

  private initialCount(): number {
    return 0;
  }

  private sndSettleModeIsSettled(): boolean {
    // 1 = settled: every delivery is sent settled; the peer's attach decides for links it started.
    const mode = (this.remoteAttach?.fields['snd-settle-mode'] as number | undefined) ?? 2;
    return mode === 1;
  }

  private tagFor(n: number): Buffer {
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32BE(n >>> 0);
    return b;
  }

  /** The peer's detach. */
  onDetach(detach: Composite): ErrorInfo | undefined {
    this.detachReceived = true;
    this.remoteClosed = detach.fields.closed === true;
    this.incoming = undefined;
    return errorInfoOf(detach.fields.error);
  }
}
