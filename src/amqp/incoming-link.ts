// A link on which a client sends messages to the broker. Each message is routed
// and enqueued at once, but settled "accepted" only when the settlement gate
// says it is safe (journal synced, backups have it). Credit is handed out in a
// window so a client can never have more unsettled messages than we allow.
import diagnostics_channel from 'node:diagnostics_channel';
import type { Delivery } from './engine/delivery.js';
import type { Link } from './engine/link.js';
import type { Broker } from '../broker/broker.js';
import { TandemError } from '../broker/errors.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle } from '../ops/log-throttle.js';
import { DiskFullError } from '../store/errors.js';
import { errorCondition } from './conditions.js';
import { parseIncoming, type ParsedMessage } from './message-codec.js';
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

export class IncomingLink {
  private outstanding = 0;
  private closed = false;

  constructor(
    private readonly link: Link,
    private readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly options: IncomingOptions,
    private readonly log: Logger,
  ) {}

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
      const result = this.broker.publish(address, msg);
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

  close(): void {
    this.closed = true;
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
