// The transaction coordinator of one connection (AMQP 1.0 part 4, local
// transactions). A transaction collects sends and acceptances; discharge with
// commit makes them one `transaction` change (one journal record, one unit for
// HA and DR); rollback, or the connection dropping, leaves no trace.
import { randomBytes } from 'node:crypto';
import type { Delivery } from './engine/delivery.js';
import type { Link } from './engine/link.js';
import type { Broker, IncomingMessage } from '../broker/broker.js';
import { TandemError } from '../broker/errors.js';
import type { Queue, QueueEntry } from '../broker/queue.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import { errorCondition } from './conditions.js';
import { coordinatorTarget, declaredState, readControlBody, transactionalAccepted } from './transaction-types.js';

/** Control messages a coordinator link may have outstanding: refilled one per message taken. */
const CONTROL_CREDIT = 100;

interface Transaction {
  id: Buffer;
  sends: Array<{ address: string; msg: IncomingMessage }>;
  accepts: Array<{ queue: Queue; entry: QueueEntry }>;
}

/** A transaction's id as sent by the client; our ids are 8 random bytes. */
const keyOf = (id: Buffer): string => id.toString('hex');

export class Coordinator {
  private readonly txns = new Map<string, Transaction>();
  private readonly links = new Set<Link>();
  /** Bounded so a client cannot grow broker memory without limit. */
  static readonly maxOpenTransactions = 1000;

  constructor(
    private readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly log: Logger,
  ) {}

  isCoordinatorLink(link: Link): boolean {
    return this.links.has(link);
  }

  attach(link: Link, capabilities: unknown): void {
    link.accept({ target: coordinatorTarget(capabilities), rcvSettleMode: 0 });
    this.links.add(link);
    link.flow(CONTROL_CREDIT);
  }

  detach(link: Link): void {
    this.links.delete(link);
  }

  /** A declare or discharge request on a coordinator link. */
  onControl(link: Link, delivery: Delivery, bytes: Buffer): void {
    link.flow(link.credit + 1);
    try {
      const body = readControlBody(bytes);
      if (body.kind === 'declare') return this.declare(delivery);
      // Frames are handled in the order they came: an acceptance sent before this discharge is in already.
      if (body.kind === 'discharge') return this.discharge(delivery, body.txnId, body.fail);
      throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', body.why);
    } catch (err) {
      delivery.reject(errorCondition(err));
    }
  }

  /** A message sent under a transaction: held until commit. */
  send(delivery: Delivery, txnId: Buffer, address: string, msg: IncomingMessage): void {
    const txn = this.txns.get(keyOf(txnId));
    if (!txn) {
      delivery.reject({ condition: 'amqp:transaction:unknown-id', description: 'unknown transaction id; declare a transaction first' });
      return;
    }
    txn.sends.push({ address, msg });
    delivery.update(transactionalAccepted(txnId));
  }

  /** A delivery accepted under a transaction: it stays acquired until commit. */
  accept(txnId: Buffer, queue: Queue, entry: QueueEntry): boolean {
    const txn = this.txns.get(keyOf(txnId));
    if (!txn) return false;
    entry.txAccepted = true;
    txn.accepts.push({ queue, entry });
    return true;
  }

  /** The connection went: every open transaction rolls back. */
  rollbackAll(): void {
    for (const txn of this.txns.values()) this.rollback(txn);
    this.txns.clear();
  }

  private declare(delivery: Delivery): void {
    if (this.txns.size >= Coordinator.maxOpenTransactions) {
      delivery.reject({ condition: 'amqp:resource-limit-exceeded', description: `at most ${Coordinator.maxOpenTransactions} open transactions per connection` });
      return;
    }
    const id = randomBytes(8);
    this.txns.set(keyOf(id), { id, sends: [], accepts: [] });
    delivery.update(declaredState(id));
  }

  private discharge(delivery: Delivery, txnId: Buffer, failed: boolean): void {
    const txn = this.txns.get(keyOf(txnId));
    if (!txn) {
      delivery.reject({ condition: 'amqp:transaction:unknown-id', description: 'unknown transaction id' });
      return;
    }
    this.txns.delete(keyOf(txnId));
    if (failed) {
      this.rollback(txn);
      delivery.accept();
      return;
    }
    let result;
    try {
      result = this.broker.commit(
        txn.sends,
        txn.accepts.filter(({ queue, entry }) => this.broker.queues.get(queue.name) === queue && queue.has(entry.msg.id)),
      );
    } catch (err) {
      this.rollback(txn);
      const { description } = errorCondition(err);
      delivery.reject({ condition: 'amqp:transaction:rollback', description: `transaction rolled back: ${description}` });
      return;
    }
    if (result.lsn === 0) {
      delivery.accept();
      return;
    }
    this.gate.whenSafe(result.lsn, result.durable, (err) => {
      if (err) {
        // Refused: a resend of its messages must not meet their keys.
        this.broker.forgetKeys(result);
        this.log.warn({ err: err.message }, 'transaction commit could not be made durable');
        delivery.reject({ condition: 'amqp:transaction:rollback', description: `commit failed: ${err.message}` });
      } else {
        delivery.accept();
      }
    });
  }

  private rollback(txn: Transaction): void {
    for (const { queue, entry } of txn.accepts) {
      // A rolled-back acceptance was a delivery that failed: the next copy carries a
      // raised delivery-count, which JMS shows as JMSRedelivered (as qpidd and Artemis do).
      if (entry.acquiredBy && queue.has(entry.msg.id)) queue.release(entry, { deliveryFailed: true, undeliverableHere: false });
      entry.txAccepted = false;
      this.broker.events.queueReady?.(queue);
    }
  }
}
