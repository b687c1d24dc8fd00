// What the engine tells its host, as one typed handler object: every method is
// optional and named after the performative or event it reports. The host acts
// by calling methods of the objects it is given (accept a link, grant credit,
// settle a delivery); whatever a handler throws closes that connection with
// amqp:internal-error and is reported through the log hook, never beyond.
import type { Connection } from './connection.js';
import type { Delivery } from './delivery.js';
import type { Link } from './link.js';
import type { ErrorInfo } from './performative.js';
import type { Session } from './session.js';

export interface EngineHandler {
  /** SASL succeeded: who the peer is (server role), and by which mechanism. */
  onSaslDone?(connection: Connection, identity: string, mechanism: string): void;
  /** The peer's open. Server role: ours is sent after this returns, unless the host closed the connection. */
  onOpen?(connection: Connection): void;
  /** The connection is over: the peer closed it (its error), or the engine did (ours), or SASL failed. */
  onClose?(connection: Connection, error: ErrorInfo | undefined, byPeer: boolean): void;
  /** A session the peer began. Ours is begun after this returns, unless the host ended it. */
  onSessionBegin?(session: Session): void;
  /** A session we began was answered. */
  onSessionOpen?(session: Session): void;
  onSessionEnd?(session: Session, error: ErrorInfo | undefined, byPeer: boolean): void;
  /** A link the peer attached: call link.accept(...) or link.refuse(error), now or later. */
  onLinkAttach?(link: Link): void;
  /** A link we attached was answered by the peer's attach. */
  onLinkOpen?(link: Link): void;
  /**
   * A link was detached: by the peer (its error), or by the engine for a violation
   * (ours). A link the engine refused because the attach accepting or starting it would
   * be over the peer's max-frame-size (amqp:frame-size-too-small) is reported once the
   * peer answers that detach, never during the host's own accept() or attach().
   */
  onLinkDetach?(link: Link, error: ErrorInfo | undefined, byPeer: boolean): void;
  /** A whole delivery arrived on a receiving link (its payload: the message as encoded). */
  onTransfer?(link: Link, delivery: Delivery): void;
  /** The peer changed a delivery's state or settled it. */
  onDisposition?(delivery: Delivery): void;
  /** Credit or drain changed on a link (a sending link may be able to send now). */
  onFlow?(link: Link): void;
  /** The socket took what was queued: senders held back by back-pressure may send again. */
  onWritable?(connection: Connection): void;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
/**
 * Where the engine's own log lines go. Client-controlled values (container ids,
 * descriptions, addresses) are always fields, never part of `message`.
 */
export type LogHook = (level: LogLevel, message: string, fields: Record<string, unknown>) => void;
