// The narrow transport a peer link (an HA backup following its primary, a DR
// bridge following its source) needs from an AMQP implementation, both ways:
// dialling a peer and receiving from it, and serving a peer's link and sending
// to it. Replication and DR speak only these interfaces; tandem's own engine
// dials (engine-dialer.ts) and serves (engine-sender.ts), and the unit tests use
// a scripted in-process link. Nothing here names a library.
import type { LinkTls } from '../admin/link-tls.js';

/** An AMQP error as a peer gives it (a detach or close carrying a condition). */
export interface PeerError {
  condition?: string;
  description?: string;
}

/**
 * How we log in to the peer. PLAIN with no user sends no SASL at all (a broker
 * with auth off); EXTERNAL offers the TLS client certificate, `orAnonymous` with
 * ANONYMOUS beside it (a peer that has no certificate mapping lets us in anyway).
 */
export type PeerCredentials =
  | { mechanism: 'PLAIN'; user: string | undefined; password: string | undefined }
  | { mechanism: 'ANONYMOUS' }
  | { mechanism: 'EXTERNAL'; orAnonymous: boolean };

export interface DialOptions {
  host: string;
  port: number;
  /** Verified TLS (the peer's certificate checked, ours offered); undefined: plain TCP. */
  tls: LinkTls | undefined;
  credentials: PeerCredentials;
  /** Our AMQP idle-time-out: the peer sends something at least every half of it. */
  idleTimeoutMs: number;
  /** A TCP handshake not done by then is a host that is down (src/util/tcp-reach.ts). */
  handshakeDeadlineMs: number;
  /** Connection properties of our open (who we are). */
  properties: Record<string, unknown>;
}

export interface ConnectionEvents {
  /** The peer's open arrived, with its connection properties. */
  opened(properties: Record<string, unknown>): void;
  /** The peer closed the connection with an error. */
  closedWithError(error: PeerError): void;
  /** The connection is gone (socket closed or failed); `error`: the socket's, if any. */
  disconnected(error: (Error & { code?: string }) | undefined): void;
  /** Bytes arrived from the peer (heartbeats included): it is alive. */
  heard(): void;
}

export interface PeerDialer {
  /** Start connecting; events follow. Never throws for a peer's fault. */
  dial(options: DialOptions, events: ConnectionEvents): PeerConnection;
}

export interface PeerConnection {
  /** Open a receiving link from `address` on the open connection. */
  openReceiver(options: ReceiverOptions, events: ReceiverEvents): PeerReceiver;
  /** Close and drop the socket at once (a closing peer may never answer). Idempotent. */
  abandon(): void;
}

export interface ReceiverOptions {
  address: string;
  /** The hello: link properties of our attach (position, epoch, what we ask for). */
  properties: Record<string, unknown>;
  /** Credit kept topped up to this many transfers; 0: granted only by addCredit. */
  creditWindow: number;
}

/** The peer's attach in answer to ours. */
export interface RemoteAttach {
  /** undefined: no source, which is how a broker that will not serve us refuses. */
  source: { address: unknown } | undefined;
  properties: Record<string, unknown>;
}

export interface ReceiverEvents {
  attached(remote: RemoteAttach): void;
  message(message: PeerMessage, delivery: InboundDelivery): void;
  /** The peer detached the link (with its error, if it gave one). */
  detached(error: PeerError | undefined): void;
}

/** A stream message as the stream decoders read it: application properties and the binary body. */
export interface PeerMessage {
  application_properties: Record<string, unknown>;
  body: Buffer | undefined;
}

export interface InboundDelivery {
  /** Acknowledge (accepted). Nothing if it is already settled (a presettled transfer). */
  accept(): void;
  reject(error: PeerError): void;
}

export interface PeerReceiver {
  addCredit(transfers: number): void;
}

/** An opaque handle naming one sent transfer, given back with its outcome. */
export type DeliveryRef = object;

/** The serving side: a peer attached a receiving link to us; we send to it. */
export interface PeerSender {
  /** Link properties of the peer's attach: its hello. */
  readonly hello: Record<string, unknown>;
  /** Serve the link: answer the attach with this source and these properties. */
  accept(address: string, properties: Record<string, unknown>): void;
  /** Refuse it: an attach with no source, then a detach carrying why. */
  refuse(error: PeerError): void;
  /** Transfers the peer's credit and the session's window allow now. */
  credit(): number;
  /** Send one transfer. Presettled: nobody waits for its outcome. */
  send(bytes: Buffer, presettled: boolean): DeliveryRef;
  /** Where outcomes of unsettled transfers go (each is settled here once reported). */
  onOutcome(listener: (delivery: DeliveryRef, accepted: boolean) => void): void;
  /** Detach, with an error the peer is told. Idempotent. */
  close(error?: PeerError): void;
}
