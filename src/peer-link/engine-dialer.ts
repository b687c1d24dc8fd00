// The dialling side of the peer-link transport on tandem's own engine (client
// role): an HA backup dialling its primary, a DR bridge its source. It says and
// does on the wire what the links always did (they ran on rhea's client): the
// same SASL choices, open and hello properties in the same encodings
// (peer-values.ts), one session, receivers topped up the way rhea's credit
// window did, acceptances and rejections settled at once. What the engine
// reports is handed on as the plain events of transport.ts.
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import { Connection } from '../amqp/engine/connection.js';
import type { Delivery } from '../amqp/engine/delivery.js';
import type { EngineHandler } from '../amqp/engine/handler.js';
import { type Link, terminus } from '../amqp/engine/link.js';
import { decodeMessage, fromAmqp } from '../amqp/engine/message.js';
import type { ErrorInfo } from '../amqp/engine/performative.js';
import type { SaslClientOptions } from '../amqp/engine/sasl.js';
import type { Session } from '../amqp/engine/session.js';
import { Transport } from '../amqp/engine/transport.js';
import type { AmqpValue } from '../amqp/engine/types.js';
import { type LinkTls, tlsConnectOptions } from '../admin/link-tls.js';
import { MAX_RECORD_BYTES } from '../store/segment.js';
import { connectWithin } from '../util/tcp-reach.js';
import { BATCH_BYTES } from './outbound.js';
import { peerMap } from './peer-values.js';
import type { ConnectionEvents, DialOptions, InboundDelivery, PeerConnection, PeerCredentials, PeerDialer, PeerError, PeerMessage, PeerReceiver, ReceiverEvents, ReceiverOptions } from './transport.js';

/**
 * Largest frame we take. A stream batch (outbound.ts: up to 256 KiB) then comes in
 * one frame, as it did to rhea, which took any; bounded all the same.
 */
const MAX_FRAME_SIZE = 1024 * 1024;

/**
 * The largest stream message a primary or a DR source of ours can send, and so the
 * max-message-size of our receiving links: a delivery that grows past it is detached
 * by the engine (amqp:link:message-size-exceeded) instead of being assembled, however
 * many frames a broken or hostile peer sends. A stream message (HA replication/source.ts
 * and snapshot.ts, DR dr/source.ts) is one batch: records while they fill less than
 * BATCH_BYTES (outbound.ts), the last of which may be of any size a record can be:
 * - one the journal holds is at most MAX_RECORD_BYTES (store/segment.ts, 1 GiB); a
 *   transaction is held to that even when none of it is durable (broker.ts,
 *   MAX_TRANSACTION_RECORD_BYTES);
 * - a non-durable message's enqueue is never journaled, and carries the message (at most
 *   max-message-size, which config.ts allows up to 1 GiB, MAX_RECORD_BYTES) and beside it
 *   its subject, which is part of the message: up to twice that.
 * The rest of the message fits in the headroom: the batch's other records (under
 * BATCH_BYTES), each record's length and fixed fields, a bind's exchange-declare sent
 * with it (DR), the application properties. (A DR restart's held ids can take hundreds
 * of MiB of properties, in a message that carries no records.)
 */
export const MAX_STREAM_MESSAGE_SIZE = 2 * MAX_RECORD_BYTES + 64 * BATCH_BYTES;

/**
 * The SASL a dial uses, as rhea's client chose it: PLAIN only with a user and a
 * password (a user alone: ANONYMOUS), EXTERNAL only on TLS with our certificate,
 * ANONYMOUS beside it when asked; nothing to offer is no SASL layer at all.
 */
export function saslFor(c: PeerCredentials, tls: LinkTls | undefined): SaslClientOptions | undefined {
  switch (c.mechanism) {
    case 'PLAIN':
      if (!c.user) return undefined;
      return c.password ? { user: c.user, password: c.password, mechanisms: ['PLAIN'] } : { user: c.user, mechanisms: ['ANONYMOUS'] };
    case 'ANONYMOUS':
      return undefined;
    case 'EXTERNAL': {
      const external = tls?.cert !== undefined;
      const mechanisms = [...(external ? ['EXTERNAL'] : []), ...(c.orAnonymous ? ['ANONYMOUS'] : [])];
      return mechanisms.length > 0 ? { external, mechanisms } : undefined;
    }
  }
}

/** An AMQP map (open, attach properties) as a plain object; anything else as none. */
function plainMap(v: unknown): Record<string, unknown> {
  const value = v as AmqpValue | undefined;
  return value?.type === 'map' ? (fromAmqp(value) as Record<string, unknown>) : {};
}

const peerError = (e: ErrorInfo | undefined): PeerError | undefined => (e ? { condition: e.condition, description: e.description } : undefined);

export class EngineDialer implements PeerDialer {
  /**
   * `containerId`: the container id our opens carry (the peer logs it). `maxMessageSize`:
   * the largest delivery our links take (tests: a small one, to be exceeded cheaply).
   */
  constructor(
    private readonly containerId: string,
    private readonly maxMessageSize = MAX_STREAM_MESSAGE_SIZE,
  ) {}

  dial(o: DialOptions, events: ConnectionEvents): PeerConnection {
    return new EnginePeerConnection(this.containerId, o, events, this.maxMessageSize);
  }
}

/** One receiving link and what it reports. */
interface ReceiverState {
  events: ReceiverEvents;
  creditWindow: number;
  /** Its detach (or its session's end) was reported: nothing more is. */
  detached: boolean;
}

class EnginePeerConnection implements PeerConnection {
  private readonly socket: Socket;
  private readonly connection: Connection;
  private readonly transport: Transport;
  private session: Session | undefined;
  private readonly receivers = new Map<Link, ReceiverState>();
  private abandoned = false;
  /** The socket ended or closed: a close the engine reports now is the socket's, not the peer's. */
  private socketEnded = false;
  private socketError: (Error & { code?: string }) | undefined;

  constructor(
    containerId: string,
    o: DialOptions,
    private readonly events: ConnectionEvents,
    private readonly maxMessageSize: number,
  ) {
    const tls = o.tls ? (tlsConnectOptions(o.host, o.tls) as TlsOptions) : undefined;
    this.socket = connectWithin(o.handshakeDeadlineMs, tls)(o.port, o.host, undefined, () => undefined);
    // Before the transport's own listeners, so these run first.
    this.socket.once('end', () => (this.socketEnded = true));
    this.socket.on('error', (err: Error & { code?: string }) => (this.socketError ??= err));
    this.socket.once('close', () => {
      this.socketEnded = true;
      if (!this.abandoned) this.events.disconnected(this.socketError);
    });
    this.connection = new Connection({
      role: 'client',
      containerId,
      hostname: o.host,
      idleTimeoutMs: o.idleTimeoutMs,
      // Silence is the search's to judge (search.ts: two idle-time-outs, as rhea's client
      // allowed), after the bytes that arrived meanwhile are read: a timer of the engine's
      // runs before them when this process was stopped or busy, and would miss the detach
      // that says why the peer let us go.
      idleLimitMs: 0,
      maxFrameSize: MAX_FRAME_SIZE,
      // Bounded (MAX_STREAM_MESSAGE_SIZE), though the peer is a broker we logged in to: a broken
      // or hostile one had us assemble a delivery of any size, until memory or Buffer's limit.
      maxMessageSize,
      properties: peerMap(o.properties, 'symbol'),
      saslClient: saslFor(o.credentials, o.tls),
      handler: this.handler(),
    });
    this.transport = new Transport(this.connection, this.socket);
  }

  private handler(): EngineHandler {
    return {
      onOpen: (c) => {
        if (this.abandoned) return;
        this.socket.on('data', () => {
          if (!this.abandoned) this.events.heard();
        });
        this.events.opened(plainMap(c.remoteOpen?.fields.properties));
      },
      onClose: (_c, error) => {
        // The socket's end is reported once, as disconnected, when it closes.
        if (this.abandoned || this.socketEnded) return;
        // The peer's close with an error, or ours for what the peer did (SASL refused, a
        // violation, silence): said first, the socket's close follows.
        if (error) this.events.closedWithError(peerError(error)!);
      },
      onSessionEnd: (s, error) => {
        for (const [link, r] of this.receivers) if (link.session === s) this.reportDetach(link, r, error);
        if (this.session === s) this.session = undefined;
      },
      onLinkOpen: (link) => this.onAttached(link),
      onLinkDetach: (link, error) => {
        const r = this.receivers.get(link);
        if (r) this.reportDetach(link, r, error);
      },
      onLinkAttach: (link) => link.refuse({ condition: 'amqp:not-allowed', description: 'a peer link takes no links' }),
      onTransfer: (link, delivery) => this.onTransfer(link, delivery),
    };
  }

  openReceiver(o: ReceiverOptions, events: ReceiverEvents): PeerReceiver {
    const session = (this.session ??= this.connection.beginSession());
    const link = session.attach(randomUUID(), 'receiver', {
      source: terminus('source', { address: o.address }),
      target: terminus('target', {}),
      maxMessageSize: this.maxMessageSize,
      properties: peerMap(o.properties, 'symbol'),
    });
    const r: ReceiverState = { events, creditWindow: Math.max(0, Math.min(o.creditWindow, 0xffffffff)), detached: false };
    this.receivers.set(link, r);
    return { addCredit: (n) => this.addCredit(link, n) };
  }

  abandon(): void {
    if (this.abandoned) return;
    this.abandoned = true;
    // The close goes out if the socket takes it now; a closing peer may never answer, so no waiting.
    this.connection.close();
    this.transport.flush();
    this.socket.destroy();
  }

  private addCredit(link: Link, transfers: number): void {
    if (this.abandoned || !Number.isSafeInteger(transfers) || transfers <= 0) return;
    link.flow(link.credit + transfers);
  }

  /** rhea's credit window: topped up to the window once a quarter of it is used. */
  private topUp(link: Link, r: ReceiverState): void {
    if (r.creditWindow === 0 || this.abandoned || r.detached) return;
    const missing = r.creditWindow - link.credit;
    if (missing >= r.creditWindow / 4) link.flow(r.creditWindow);
  }

  private onAttached(link: Link): void {
    const r = this.receivers.get(link);
    if (!r || this.abandoned) return;
    // No source: a broker that does not serve us refuses so, then detaches.
    const source = link.source;
    r.events.attached({ source: source ? { address: source.fields.address } : undefined, properties: plainMap(link.remoteAttach?.fields.properties) });
    this.topUp(link, r);
  }

  private onTransfer(link: Link, delivery: Delivery): void {
    const r = this.receivers.get(link);
    if (!r || this.abandoned || r.detached) return;
    let message: PeerMessage;
    try {
      const m = decodeMessage(delivery.payload);
      message = { application_properties: m.applicationProperties, body: Buffer.isBuffer(m.body) ? m.body : undefined };
    } catch (err) {
      // A message that does not decode is the link failing: it goes, and is reported so.
      const error = { condition: 'amqp:decode-error', description: `a message that does not decode: ${(err as Error).message}` };
      delivery.reject(error);
      link.detach(error);
      this.reportDetach(link, r, error);
      return;
    }
    r.events.message(message, inbound(delivery));
    this.topUp(link, r);
  }

  private reportDetach(link: Link, r: ReceiverState, error: ErrorInfo | undefined): void {
    if (r.detached) return;
    r.detached = true;
    this.receivers.delete(link);
    if (!this.abandoned) r.events.detached(peerError(error));
  }
}

/** Settling one delivery; the engine sends nothing for one already settled (a presettled transfer). */
function inbound(delivery: Delivery): InboundDelivery {
  return {
    accept: () => delivery.accept(),
    reject: (error) => delivery.reject({ condition: error.condition ?? 'amqp:internal-error', description: error.description }),
  };
}
