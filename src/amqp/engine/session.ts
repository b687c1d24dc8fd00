// A session (spec 2.5.5-2.5.6): begin/end, the transfer windows both ways,
// delivery-ids, handles and the deliveries still unsettled in each direction.
// The peer may not send more transfer frames than our incoming window allows
// (amqp:session:window-violation), nor use a handle that is not attached
// (amqp:session:unattached-handle). A disposition only ever visits deliveries
// that are outstanding in the range it names, however wide. Our own transfers
// wait for the peer's incoming window, which every link of the session shares.
import type { Composite } from './composite.js';
import type { Connection } from './connection.js';
import type { Delivery } from './delivery.js';
import { AmqpError, Condition, framingError, invalidField } from './errors.js';
import { type CompositeDef, composite } from './definitions.js';
import { FrameType } from './frames.js';
import { type AttachOptions, Link, type LinkRole } from './link.js';
import { type ErrorInfo, errorInfoOf } from './performative.js';
import { serialAdd, serialDiff } from './serial.js';
import type { AmqpValue } from './types.js';
import { UnsettledDeliveries } from './unsettled.js';
import { LeavingDeliveries } from './leaving-deliveries.js';

export interface SessionOptions {
  /** Transfer frames the peer may send before we widen the window again. */
  incomingWindow: number;
  /** Highest handle the peer may use. */
  handleMax: number;
}

export const DEFAULT_SESSION_OPTIONS: SessionOptions = { incomingWindow: 2048, handleMax: 1023 };

/** Our outgoing window is not a limit we need: advertise it wide open. */
const OUTGOING_WINDOW = 0x7fffffff;

/** A delivery waiting for the peer's incoming window, from this payload byte on. */
interface QueuedDelivery {
  delivery: Delivery;
  offset: number;
}

const BEGIN = composite('begin');
const END = composite('end');
const TRANSFER = composite('transfer');
const DISPOSITION = composite('disposition');
const FLOW = composite('flow');

export class Session {
  remoteChannel: number | undefined;
  beginSent = false;
  beginReceived = false;
  endSent = false;
  endReceived = false;
  /** Host's own state. */
  context: unknown;

  // Transfer-ids and windows (2.5.6).
  private nextOutgoingId = 0;
  private nextIncomingId: number | undefined;
  private incomingCredit: number;
  private remoteIncomingWindow = 0;
  private remoteHandleMax = 0xffffffff;
  // Delivery-ids: ours, and the one the peer's next delivery must carry (known after its first).
  private nextDeliveryId = 0;
  private expectedDeliveryId: number | undefined;

  private readonly byLocalHandle = new Map<number, Link>();
  private readonly byRemoteHandle = new Map<number, Link>();
  /** Links we attached and the peer has not answered, by name and our role. */
  private readonly awaiting = new Map<string, Link>();
  /** Unsettled deliveries we sent / the peer sent, by delivery-id. */
  readonly outgoingUnsettled = new UnsettledDeliveries<Delivery>();
  readonly incomingUnsettled = new UnsettledDeliveries<Delivery>();
  /** Those of detached links, leaving the books (in slices when there are many). */
  private readonly leaving = new LeavingDeliveries([this.outgoingUnsettled, this.incomingUnsettled]);
  /** Deliveries (or their rest) waiting for the peer's incoming window. */
  private queued: QueuedDelivery[] = [];

  constructor(
    readonly connection: Connection,
    readonly channel: number,
    readonly options: SessionOptions,
  ) {
    this.incomingCredit = options.incomingWindow;
  }

  get isOpen(): boolean {
    return this.beginSent && this.beginReceived && !this.endSent && !this.endReceived;
  }

  get links(): Link[] {
    return [...this.byLocalHandle.values()];
  }

  /** Links holding a handle here (attached, or detached by one side only). */
  get linkCount(): number {
    return this.byLocalHandle.size;
  }

  /** Transfer frames we may still send before the peer widens its window. */
  get remoteWindow(): number {
    return this.remoteIncomingWindow;
  }

  // ---- host actions

  begin(): void {
    if (this.beginSent) return;
    this.beginSent = true;
    this.emit(BEGIN, {
      'remote-channel': this.remoteChannel === undefined ? undefined : { type: 'ushort', value: this.remoteChannel },
      'next-outgoing-id': this.nextOutgoingId,
      'incoming-window': this.incomingCredit,
      'outgoing-window': OUTGOING_WINDOW,
      'handle-max': this.options.handleMax,
    });
  }

  end(error?: ErrorInfo): void {
    if (this.endSent) return;
    this.begin();
    this.endSent = true;
    this.queued = [];
    this.emit(END, { error });
    if (this.endReceived) this.finish();
  }

  /** Attach a link of ours (the peer answers with its attach: onLinkOpen). */
  attach(name: string, role: LinkRole, options: AttachOptions = {}): Link {
    const handle = this.freeHandle();
    const link = new Link(this, name, role, handle);
    link.maxMessageSize = options.maxMessageSize ?? this.connection.maxMessageSize;
    this.byLocalHandle.set(handle, link);
    this.awaiting.set(`${role}:${name}`, link);
    link.sendAttach(options);
    return link;
  }

  // ---- frames from the peer

  onBegin(begin: Composite): void {
    const f = begin.fields;
    this.beginReceived = true;
    this.nextIncomingId = f['next-outgoing-id'] as number;
    this.remoteIncomingWindow = f['incoming-window'] as number;
    this.remoteHandleMax = f['handle-max'] as number;
  }

  onFrame(name: string, body: Composite, payload: Buffer): void {
    if (name === 'end') return this.onEnd(body);
    // After our end, until the peer's: nothing but its end means anything.
    if (this.endSent) return;
    switch (name) {
      case 'attach':
        return this.onAttach(body);
      case 'flow':
        return this.onFlow(body);
      case 'transfer':
        return this.onTransfer(body, payload);
      case 'disposition':
        return this.onDisposition(body);
      case 'detach':
        return this.onDetach(body);
      default:
        throw framingError(`unexpected ${name} frame on a session`);
    }
  }

  private onEnd(end: Composite): void {
    if (this.endReceived) throw new AmqpError(Condition.illegalState, 'end received twice');
    this.endReceived = true;
    if (this.endSent) return this.finish();
    const error = errorInfoOf(end.fields.error);
    this.connection.notify((h) => h.onSessionEnd?.(this, error, true));
    this.end();
  }

  private onAttach(attach: Composite): void {
    const f = attach.fields;
    const handle = f.handle as number;
    // 2.7.2: a handle beyond the handle-max we gave is a framing error of the connection.
    if (handle > this.options.handleMax) throw framingError(`attach on handle ${handle}, over the session's handle-max ${this.options.handleMax}`);
    if (this.byRemoteHandle.has(handle)) return this.fail(Condition.handleInUse, `attach on handle ${handle}, which is in use`);
    const name = f.name as string;
    // The peer's role is the opposite of ours: role true, it receives, so we send.
    const ours: LinkRole = f.role === true ? 'sender' : 'receiver';
    const key = `${ours}:${name}`;
    const mine = this.awaiting.get(key);
    if (mine) {
      this.awaiting.delete(key);
      mine.remoteHandle = handle;
      this.byRemoteHandle.set(handle, mine);
      mine.onAttach(attach);
      // Ours was refused for its size (Link.sendAttach): the host hears that when our detach is answered, not of an open.
      if (!mine.oversize) this.connection.notify((h) => h.onLinkOpen?.(mine));
      return;
    }
    if (this.byLocalHandle.size > this.options.handleMax) return this.fail(Condition.resourceLimitExceeded, 'no free handle');
    const link = new Link(this, name, ours, this.freeHandle());
    link.maxMessageSize = this.connection.maxMessageSize;
    link.remoteHandle = handle;
    this.byLocalHandle.set(link.localHandle, link);
    this.byRemoteHandle.set(handle, link);
    link.onAttach(attach);
    this.connection.notify((h) => h.onLinkAttach?.(link));
  }

  private linkAt(body: Composite, what: string): Link | undefined {
    const handle = body.fields.handle as number;
    const link = this.byRemoteHandle.get(handle);
    if (!link) this.fail(Condition.unattachedHandle, `${what} on handle ${handle}, which is not attached`);
    return link;
  }

  private onDetach(detach: Composite): void {
    const link = this.linkAt(detach, 'detach');
    if (!link) return;
    const error = link.onDetach(detach);
    this.byRemoteHandle.delete(link.remoteHandle!);
    if (!link.detachSent) {
      this.connection.notify((h) => h.onLinkDetach?.(link, error, true));
      // Answered in kind (2.6.6): a closing detach with a closing one, a detach that keeps the terminus with one that does too.
      link.detach(undefined, link.remoteClosed);
    } else {
      this.linkDetached(link);
      // A link whose attach was over the peer's max-frame-size, refused by us as the host
      // accepted or attached it (Link.sendAttach): the host is told now, its own call long
      // returned, so that it drops whatever it set up for the link.
      const oversize = link.oversize;
      if (oversize) this.connection.notify((h) => h.onLinkDetach?.(link, oversize, false));
    }
  }

  private onFlow(flow: Composite): void {
    const f = flow.fields;
    const blocked = !this.canSendTransfer();
    // 2.5.6: remote-incoming-window = next-incoming-id(flow) + incoming-window(flow) - next-outgoing-id(ours).
    // The ids are close to each other (serial arithmetic); the window may be up to 2^32-1, so it is added as is.
    const nii = (f['next-incoming-id'] as number | undefined) ?? 0;
    this.remoteIncomingWindow = Math.max(0, (f['incoming-window'] as number) + serialDiff(this.nextOutgoingId, nii));
    this.sendQueued();
    const handle = f.handle as number | undefined;
    if (handle !== undefined) {
      const link = this.linkAt(flow, 'flow');
      if (!link) return;
      link.onFlow(flow);
      this.connection.notify((h) => h.onFlow?.(link));
      // A drain: what the host did not send now is given back (2.6.7), and our flow says the drain is done.
      if (link.isSender && link.drain && !link.detachSent) {
        if (link.credit > 0) link.drained();
        else link.sendFlow(false);
      } else if (f.echo === true) link.sendFlow(false);
    } else if (f.echo === true) {
      this.sendFlow(undefined, false);
    }
    if (blocked && this.canSendTransfer()) {
      for (const link of this.byLocalHandle.values()) if (link.isSender && link.credit > 0 && link.isOpen) this.connection.notify((h) => h.onFlow?.(link));
    }
  }

  private onTransfer(transfer: Composite, payload: Buffer): void {
    const link = this.linkAt(transfer, 'transfer');
    if (!link) return;
    // Every transfer frame takes one slot of the window we gave (2.5.6).
    if (this.incomingCredit <= 0) return this.fail(Condition.windowViolation, `a transfer beyond the session's incoming window of ${this.options.incomingWindow} frames`);
    this.incomingCredit--;
    if (this.nextIncomingId !== undefined) this.nextIncomingId = serialAdd(this.nextIncomingId, 1);
    const delivery = link.onTransfer(transfer, payload);
    if (!delivery) return;
    if (!delivery.remoteSettled) this.incomingUnsettled.set(delivery);
    this.connection.notifyTransfer(link, delivery);
  }

  /**
   * A disposition names a range of delivery-ids, as wide as the peer likes. Only
   * the unsettled deliveries in it are visited (UnsettledDeliveries.inRange): one
   * naming none (ids never sent, or settled long ago) costs nothing, and any other
   * a step per outstanding delivery it names, not per id or per other delivery.
   */
  private onDisposition(disposition: Composite): void {
    const f = disposition.fields;
    const first = f.first as number;
    const last = (f.last as number | undefined) ?? first;
    // role true: the peer is the receiver, so it speaks of deliveries we sent.
    const book = f.role === true ? this.outgoingUnsettled : this.incomingUnsettled;
    const settled = f.settled === true;
    const state = f.state as Composite | undefined;
    for (const d of book.inRange(first, last)) {
      // Its link detached: gone, as if it had left the book already (LeavingDeliveries).
      if (this.leaving.has(d.link)) {
        book.delete(d.id);
        continue;
      }
      if (state) d.remoteState = state;
      if (settled) {
        d.remoteSettled = true;
        book.delete(d.id);
      }
      this.connection.notifyDisposition(d);
    }
  }

  /**
   * After a read has been handled: widen our incoming window again once half of
   * it is used. Only between reads, so a peer that sends past the window it was
   * given is caught, not carried by flows it could not have seen yet.
   */
  replenishWindow(): void {
    if (this.endSent || !this.beginSent || this.incomingCredit > this.options.incomingWindow / 2) return;
    this.incomingCredit = this.options.incomingWindow;
    this.sendFlow(undefined, false);
  }

  // ---- for links and deliveries

  /** The peer's new delivery must carry the next delivery-id (2.7.5: ids are consecutive in a session). */
  takeDeliveryId(id: number): void {
    if (this.expectedDeliveryId !== undefined && id !== this.expectedDeliveryId) {
      throw invalidField(`transfer.delivery-id ${id} where the session's next delivery is ${this.expectedDeliveryId}`);
    }
    this.expectedDeliveryId = serialAdd(id, 1);
  }

  takeDeliveryIdIfNext(id: number): void {
    if (this.expectedDeliveryId === undefined || id === this.expectedDeliveryId) this.expectedDeliveryId = serialAdd(id, 1);
  }

  allocateDeliveryId(): number {
    const id = this.nextDeliveryId;
    this.nextDeliveryId = serialAdd(id, 1);
    return id;
  }

  canSendTransfer(): boolean {
    return this.isOpen && this.remoteIncomingWindow > 0 && this.queued.length === 0 && this.connection.hasRoom();
  }

  /** A delivery's transfer frames, each at most the peer's max-frame-size, now or when the peer's window opens. */
  sendDelivery(d: Delivery): void {
    if (!d.settled) this.outgoingUnsettled.set(d);
    if (this.queued.length > 0) {
      this.queued.push({ delivery: d, offset: 0 });
      return;
    }
    const rest = this.writeDelivery(d, 0);
    if (rest >= 0) this.queued.push({ delivery: d, offset: rest });
  }

  /**
   * Transfer frames of `d` from payload byte `offset` on, while the peer's
   * incoming window has room. Returns -1 once the last frame is written, else
   * the offset to go on from. The payload is sliced into frames, not re-encoded.
   */
  private writeDelivery(d: Delivery, offset: number): number {
    const out = this.connection.openOutput();
    if (!out) return -1;
    try {
      const maxFrame = this.connection.remoteMaxFrameSize;
      const payload = d.payload;
      const total = payload.length;
      const handle = d.link.localHandle;
      while (this.remoteIncomingWindow > 0) {
        const fields: Record<string, unknown> =
          offset === 0
            ? { handle, 'delivery-id': d.id, 'delivery-tag': d.tag, 'message-format': d.messageFormat, settled: d.settled, more: false }
            : { handle, more: false };
        out.beginFrame(FrameType.amqp, this.channel);
        out.performative(TRANSFER, fields);
        let take = total - offset;
        if (out.headLength + take > maxFrame) {
          // Not the last frame: the same head with more=true (a boolean is one byte either way), filled to max-frame-size.
          out.discardFrame();
          fields.more = true;
          out.beginFrame(FrameType.amqp, this.channel);
          out.performative(TRANSFER, fields);
          take = maxFrame - out.headLength;
          // The head is under 100 bytes (the tag is at most 32), max-frame-size at least 512.
          if (take <= 0) throw new AmqpError(Condition.internalError, `a transfer head of ${out.headLength} bytes does not fit max-frame-size ${maxFrame}`);
        }
        out.endFrame(take === total ? payload : take > 0 ? payload.subarray(offset, offset + take) : undefined);
        this.remoteIncomingWindow--;
        this.nextOutgoingId = serialAdd(this.nextOutgoingId, 1);
        offset += take;
        if (offset >= total) return -1;
      }
      return offset;
    } finally {
      this.connection.closeOutput();
    }
  }

  private sendQueued(): void {
    let i = 0;
    while (i < this.queued.length && this.remoteIncomingWindow > 0) {
      const q = this.queued[i]!;
      const rest = this.writeDelivery(q.delivery, q.offset);
      if (rest >= 0) {
        q.offset = rest;
        break;
      }
      i++;
    }
    if (i > 0) this.queued = this.queued.slice(i);
  }

  sendDisposition(d: Delivery, state: AmqpValue | undefined): void {
    if (d.settled) this.forget(d);
    if (this.endSent) return;
    this.connection.queueDisposition(this, d.incoming, d.id, d.settled, state);
  }

  /** A run of dispositions the connection gathered (queueDisposition), as one frame. */
  writeDisposition(role: boolean, first: number, last: number, settled: boolean, state: AmqpValue | undefined): void {
    // No endSent check: the run was queued while the session was live, and it is
    // written before any later frame, our end included.
    this.emit(DISPOSITION, { role, first, last: last === first ? undefined : last, settled, state });
  }

  forget(d: Delivery): void {
    (d.incoming ? this.incomingUnsettled : this.outgoingUnsettled).delete(d.id);
  }

  sendFlow(link: Link | undefined, echo: boolean): void {
    if (this.endSent) return;
    this.emit(FLOW, {
      'next-incoming-id': this.nextIncomingId,
      'incoming-window': this.incomingCredit,
      'next-outgoing-id': this.nextOutgoingId,
      'outgoing-window': OUTGOING_WINDOW,
      handle: link?.localHandle,
      'delivery-count': link?.deliveryCount,
      'link-credit': link?.credit,
      available: link?.isSender ? 0 : undefined,
      drain: link ? link.drain : undefined,
      echo: echo || undefined,
    });
  }

  /** A link's attach or detach; with `whole`, see Connection.writeFrame (0: written, else the size it would have been). */
  sendLinkFrame(def: CompositeDef, fields: Record<string, unknown>, whole = false): number {
    return this.endSent ? 0 : this.connection.writeFrame(this.channel, def, fields, whole);
  }

  /** Both detaches are done (or ours, after the peer's): the handles are free again. */
  linkDetached(link: Link): void {
    if (!(link.detachSent && link.detachReceived) && !this.endSent) return;
    this.byLocalHandle.delete(link.localHandle);
    if (link.remoteHandle !== undefined) this.byRemoteHandle.delete(link.remoteHandle);
    this.awaiting.delete(`${link.role}:${link.name}`);
    this.leaving.add(link);
  }

  /** A violation scoped to this session (2.5.5): end it with the error. */
  fail(condition: string, description: string): undefined {
    this.connection.log('warn', 'session ended for a violation', { condition, description });
    // Our end first, so the error goes out on it (2.7.7) whatever the host does next: a
    // host that closes the connection too (tandem's server does) would otherwise send the
    // close alone, and the session's condition would never be on an end.
    this.end({ condition, description });
    this.connection.notify((h) => h.onSessionEnd?.(this, { condition, description }, false));
    return undefined;
  }

  private finish(): void {
    this.byLocalHandle.clear();
    this.byRemoteHandle.clear();
    this.awaiting.clear();
    this.outgoingUnsettled.clear();
    this.incomingUnsettled.clear();
    this.leaving.clear();
    this.connection.sessionFinished(this);
  }

  private freeHandle(): number {
    // At most handle-max + 1 links, so this scan is bounded by the links there are.
    let h = 0;
    while (this.byLocalHandle.has(h)) h++;
    if (h > this.remoteHandleMax) throw new AmqpError(Condition.resourceLimitExceeded, `no handle free under the peer's handle-max ${this.remoteHandleMax}`);
    return h;
  }

  private emit(def: CompositeDef, fields: Record<string, unknown>): void {
    this.connection.writeFrame(this.channel, def, fields);
  }
}
