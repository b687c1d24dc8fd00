// A link on which a client sends messages to the broker. Each message is routed
// and enqueued at once, but settled "accepted" only when the settlement gate
// says it is safe (journal synced, backups have it). Credit is handed out in a
// window so a client can never have more unsettled messages than we allow.
// A client that logged in as a user (SASL PLAIN or EXTERNAL) may put only that
// user's name in a message's user-id (spec 3.2.4: it MAY be authenticated by
// intermediaries), unless it is an admin, so a consumer can trust the user-id of
// what it takes.
import diagnostics_channel from 'node:diagnostics_channel';
import type { Delivery } from './engine/delivery.js';
import type { Link } from './engine/link.js';
import type { ErrorInfo } from './engine/performative.js';
import type { Broker } from '../broker/broker.js';
import type { Publisher } from '../broker/no-local.js';
import { TandemError } from '../broker/errors.js';
import { heldUntilOf } from '../broker/scheduled.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle } from '../ops/log-throttle.js';
import { DiskFullError } from '../store/errors.js';
import { errorCondition } from './conditions.js';
import { Decoder } from './engine/decoder.js';
import type { AmqpValue } from './engine/types.js';
import { checkedDeliveryTime, heldMessage } from './delivery-time-reader.js';
import { describedValueAt, parseIncoming, sectionSize, type ParsedMessage } from './message-codec.js';
import { userIdClaim } from './message-head.js';
import { readTransactionalState } from './transaction-types.js';

/**
 * A message's sender was told "accepted": { seconds } from arrival to settlement.
 * Costs nothing without subscribers (the metrics endpoint subscribes).
 */
export const settledChannel = diagnostics_channel.channel('tandem:amqp:accepted');

export interface IncomingOptions {
  /** Fixed target address; undefined = anonymous relay (each message's `to`). */
  address: string | undefined;
  creditWindow: number;
  maxMessageSize: number;
  /** Create a queue for an unknown `to` address (anonymous relay). */
  ensureAddress(address: string): void;
  /** A transactional send: hand it to the transaction instead. */
  onTransactional?(delivery: Delivery, msg: ParsedMessage, address: string, txnId: Buffer): void;
  /** A transactional send refused here (its address, its size...): its transaction fails. */
  onTransactionalRefused?(txnId: Buffer, why: string): void;
  /**
   * Set while this broker takes no messages (a clean shutdown has begun): why. What
   * arrives then is released, not enqueued, and no more credit is given, so the sender
   * sends it again where it fails over to and nothing is accepted unreplicated.
   */
  refusing?(): string | undefined;
  /**
   * Whether the sender may put any user's name in a message's user-id: an admin (asked
   * at each use; with auth=no every connection is one). `tandem ha diverged republish`
   * sends other users' messages again, their properties byte for byte, as an admin.
   */
  mayNameAnyone?(): boolean;
  /** Who sends on this link (its connection), so a noLocal subscription of theirs does not get it. */
  publisher?: Publisher;
}

/** Shared by every link: a full disk refuses every sender's messages at once. */
const refusals = new LogThrottle();

/**
 * A refusal the client was told of, logged at most once per interval per kind: the disk
 * being full is an operator's condition (warn, its own clear message, no stack); any
 * other is a fault of ours (error, with the stack).
 */
function logRefusal(log: Logger, err: unknown): void {
  const diskFull = err instanceof DiskFullError;
  const key = diskFull ? err.code : ((err as { code?: string }).code ?? (err as Error).name ?? 'error');
  const held = refusals.admit(key);
  if (held === undefined) return;
  const alsoRefused = held > 0 ? { alsoRefused: held } : {};
  if (diskFull) log.warn({ ...alsoRefused, dir: err.dir }, `message refused: ${err.message}`);
  else log.error({ err, ...alsoRefused }, 'message refused by an internal error');
}

/** Messages refused for another user's user-id, logged at most once per interval per user. */
const impersonations = new LogThrottle();

/** Claimed user-ids are shown up to this many characters (in the refusal and the log). */
const SHOWN_CLAIM = 64;

/**
 * What is wrong with the user-id of a message from `user` (its name's UTF-8 in
 * `userBytes`), or undefined when its properties section (at `propertiesAt`, -1: none)
 * has none or `user`'s, or when `mayNameAnyone` (asked only then) says any will do.
 * One section is enough: parseIncoming refused a message with a second one (a decoder
 * lets a later properties section's fields replace the first's, so another user's name
 * could have hidden there). Reads in place.
 */
export function userIdRefusal(bytes: Buffer, propertiesAt: number, user: string, userBytes: Buffer, mayNameAnyone: () => boolean = () => false): string | undefined {
  if (propertiesAt < 0) return undefined;
  const size = sectionSize(bytes, propertiesAt);
  const claim = userIdClaim(bytes, describedValueAt(bytes, propertiesAt), propertiesAt + size, userBytes);
  if (claim !== 'other' && claim !== 'irregular') return undefined;
  if (mayNameAnyone()) return undefined;
  return genericRefusal(bytes, propertiesAt, size, user, userBytes);
}

/**
 * The same judgement of the properties section at `offset` (`size` bytes), decoded
 * generically: the words of a refusal, or a section the quick read gave up on (one
 * that is not a list names no user-id for a decoder: ours and rhea's pass over it).
 */
function genericRefusal(bytes: Buffer, offset: number, size: number, user: string, userBytes: Buffer): string | undefined {
  let claimed: AmqpValue | undefined;
  try {
    const section = new Decoder(bytes, offset, offset + size).value();
    if (section.type === 'described' && section.value.type === 'list') claimed = section.value.value[1];
  } catch {
    return `its user-id cannot be read, so it cannot be checked against the user this connection logged in as ('${user}')`;
  }
  if (claimed === undefined || claimed.type === 'null') return undefined;
  const text = claimed.type === 'binary' ? claimed.value.toString('utf8') : claimed.type === 'string' || claimed.type === 'symbol' ? claimed.value : undefined;
  if (text === undefined) return `its user-id is a ${claimed.type}, not a binary holding the name of the user this connection logged in as ('${user}')`;
  if ((claimed.type === 'binary' ? claimed.value : Buffer.from(text, 'utf8')).equals(userBytes)) return undefined;
  const shown = text.length > SHOWN_CLAIM ? `${text.slice(0, SHOWN_CLAIM)}...` : text;
  return `its user-id ${JSON.stringify(shown)} is not the user this connection logged in as ('${user}'): a message may carry its sender's own user-id, or none`;
}

export class IncomingLink {
  private outstanding = 0;
  private closed = false;
  /**
   * Whose name a message's user-id may hold, and that name's UTF-8: the user the client
   * logged in as (for EXTERNAL, the one its certificate names, whom the ACL knows it as);
   * undefined for a client that skipped SASL (auth=no only), whose messages are not looked at.
   */
  private readonly user: string | undefined;
  private readonly userBytes: Buffer | undefined;
  /** Made once: a closure made per message would be the one allocation the check makes. */
  private readonly senderIsAdmin = (): boolean => this.options.mayNameAnyone?.() === true;

  constructor(
    private readonly link: Link,
    private readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly options: IncomingOptions,
    private readonly log: Logger,
  ) {
    this.user = link.session.connection.identity;
    this.userBytes = this.user === undefined ? undefined : Buffer.from(this.user, 'utf8');
  }

  get address(): string | undefined {
    return this.options.address;
  }

  open(): void {
    this.link.flow(this.options.creditWindow);
  }

  /** Messages taken and not yet settled (waiting for the journal and the backups). */
  get pending(): number {
    return this.outstanding;
  }

  onMessage(delivery: Delivery, bytes: Buffer): void {
    const refusing = this.options.refusing?.();
    if (refusing !== undefined) {
      delivery.release();
      // A transactional send let go of fails its transaction, as any refused one does: a
      // commit that arrives while the broker drains must not go through without it.
      const txn = this.options.onTransactional ? readTransactionalState(delivery.remoteState) : undefined;
      if (txn) this.options.onTransactionalRefused?.(txn.txnId, refusing);
      return;
    }
    this.outstanding++;
    const received = settledChannel.hasSubscribers ? performance.now() : 0;
    const presettled = delivery.remoteSettled;
    const txn = this.options.onTransactional ? readTransactionalState(delivery.remoteState) : undefined;
    let msg: ParsedMessage;
    try {
      if (bytes.length > this.options.maxMessageSize) {
        throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `message of ${bytes.length} bytes is over max-message-size ${this.options.maxMessageSize}`);
      }
      msg = parseIncoming(bytes);
      // Read once: the publish hands it to each queue (a transaction's send is read
      // again at its commit). A delay becomes the time it ends at, from now (heldMessage).
      const now = this.broker.now();
      const time = checkedDeliveryTime(bytes, now);
      const heldUntil = heldUntilOf(time, now);
      if (heldUntil > 0) msg = heldMessage(msg, time, heldUntil);
      if (this.userBytes !== undefined) this.checkUserId(msg);
      const address = this.options.address ?? msg.to;
      if (address === undefined) {
        throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'message has no "to" address and the link has no target address; set one of them');
      }
      if (txn && this.options.onTransactional) {
        if (this.options.address === undefined) this.options.ensureAddress(address);
        this.options.onTransactional(delivery, msg, address, txn.txnId);
        this.settled();
        return;
      }
      if (this.options.address === undefined) this.options.ensureAddress(address);
      const result = this.broker.publish(address, msg, { publisher: this.options.publisher, heldUntil });
      if (presettled || result.lsn === 0 || this.gate.safeNow?.(result.lsn, result.durable)) {
        if (!presettled) delivery.accept();
        if (received) settledChannel.publish({ seconds: (performance.now() - received) / 1000 });
        this.settled();
        return;
      }
      this.gate.whenSafe(result.lsn, result.durable, (err) => {
        if (err) this.broker.withdraw(result);
        if (this.closed) return;
        if (err) this.refuse(delivery, err);
        else {
          delivery.accept();
          if (received) settledChannel.publish({ seconds: (performance.now() - received) / 1000 });
        }
        this.settled();
      });
    } catch (err) {
      if (!presettled) this.refuse(delivery, err);
      // Its transaction cannot commit without it: it fails (see coordinator.ts).
      if (txn) this.options.onTransactionalRefused?.(txn.txnId, errorCondition(err).description);
      this.settled();
    }
  }

  /**
   * A delivery refused before it is read as a message (a message-format other than 0):
   * rejected with `error`, its credit given back as a settled message's is, and a
   * transaction it was sent under fails. Without the credit, a sender refused as often
   * as the window is wide would be left with none, its link stalled for good.
   */
  refuseDelivery(delivery: Delivery, error: ErrorInfo): void {
    this.outstanding++;
    delivery.reject(error);
    const txn = this.options.onTransactional ? readTransactionalState(delivery.remoteState) : undefined;
    if (txn) this.options.onTransactionalRefused?.(txn.txnId, error.description ?? error.condition);
    this.settled();
  }

  close(): void {
    this.closed = true;
  }

  /** A message naming another user than the sender's is refused (amqp:unauthorized-access), and logged. */
  private checkUserId(msg: ParsedMessage): void {
    const refusal = userIdRefusal(msg.bytes, msg.propertiesAt, this.user!, this.userBytes!, this.senderIsAdmin);
    if (refusal === undefined) return;
    const held = impersonations.admit(this.user!);
    if (held !== undefined) this.log.warn({ user: this.user, ...(held > 0 ? { alsoRefused: held } : {}) }, `message refused: ${refusal}`);
    throw new TandemError('TANDEM_ERR_UNAUTHORIZED', `message refused: ${refusal}`);
  }

  private refuse(delivery: Delivery, err: unknown): void {
    const { condition, description } = errorCondition(err);
    if (!(err instanceof TandemError)) logRefusal(this.log, err);
    delivery.reject({ condition, description });
  }

  /** One more message settled: top the client's credit back up in batches. */
  private settled(): void {
    this.outstanding--;
    if (this.closed || this.options.refusing?.() !== undefined) return;
    // link.credit is what the client may still send: the window less what it sent and we hold.
    const window = this.options.creditWindow;
    if (this.link.credit + this.outstanding <= window / 2) this.link.flow(window - this.outstanding);
  }
}
