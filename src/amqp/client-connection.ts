// One client connection: who it is (SASL identity, admin or not), the links it
// opened, and the exclusive queues it owns. Translates link attaches into
// consumers and publishers on the broker; everything it made is undone when the
// connection goes.
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import type { Composite } from './engine/composite.js';
import type { Connection } from './engine/connection.js';
import type { Delivery } from './engine/delivery.js';
import { AmqpError as EngineError } from './engine/errors.js';
import type { Link } from './engine/link.js';
import { fromAmqp } from './engine/message.js';
import { describedList } from './engine/performative.js';
import type { AmqpValue } from './engine/types.js';
import { TEMPORARY_QUEUE_PREFIX } from '../admin/operations.js';
import type { Acl } from '../admin/acl.js';
import type { Broker } from '../broker/broker.js';
import { TandemError, notFound } from '../broker/errors.js';
import { checkBindingKey } from '../broker/exchange.js';
import type { MessageRecord, NoLocal } from '../broker/changes.js';
import { sameNoLocal, type Publisher } from '../broker/no-local.js';
import type { Queue } from '../broker/queue.js';
import { deleteQueueInSlices } from '../broker/queue-slices.js';
import type { SettlementGate } from '../broker/settlement.js';
import { defaultExchangeSettings, defaultQueueSettings } from '../broker/settings.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import { errorCondition } from './conditions.js';
import { Coordinator, type TransactionLimits } from './coordinator.js';
import { IncomingLink } from './incoming-link.js';
import { MANAGEMENT_ADDRESS, type ManagementNode } from './management.js';
import { parseIncoming } from './message-codec.js';
import { noLocalEntry, noLocalOf } from './no-local-filter.js';
import { DEFAULT_OUTCOME, OutgoingLink } from './outgoing-link.js';
import { sourceSelector } from './selector-filter.js';
import { readTransactionalState } from './transaction-types.js';
import { SUBSCRIPTION_PREFIX, type Subscription, kindConflict, kindOf, subscriptionAddress, subscriptionOf, subscriptionQueue } from './subscriptions.js';
import { hostPort } from '../util/host-port.js';

export interface ConnectionPolicy {
  autoCreate: boolean;
  creditWindow: number;
  /** Links this connection may hold at once (max-links-per-connection). */
  maxLinks: number;
  maxMessageSize: number;
  transactionLimits: TransactionLimits;
}

/** A source or target as the client sent it (the engine's decoded fields, by the names the broker uses). */
interface Terminus {
  address?: string;
  dynamic?: boolean;
  distribution_mode?: string;
  durable?: number;
  expiry_policy?: string;
  /** The filter map as decoded (keys and described values). */
  filter?: AmqpValue;
  capabilities?: string[];
  /** Every field as decoded, to echo back what the broker does not change. */
  fields: Record<string, unknown>;
}

function terminusOf(c: Composite | undefined): Terminus {
  const f = c?.fields ?? {};
  return {
    address: typeof f.address === 'string' ? f.address : undefined,
    dynamic: f.dynamic === true,
    distribution_mode: f['distribution-mode'] as string | undefined,
    durable: f.durable as number | undefined,
    expiry_policy: f['expiry-policy'] as string | undefined,
    filter: f.filter as AmqpValue | undefined,
    capabilities: f.capabilities as string[] | undefined,
    fields: f,
  };
}

/**
 * What the broker does with a consumer's source, which our attach states (3.5.3: the
 * sending end's source is the one in force; the client reads it to learn whether what
 * it asked for is done, and detaches if not).
 */
interface SourceAnswer {
  address: string;
  dynamic: boolean;
  /** A browser: distribution-mode copy; every other consumer takes the messages (move). */
  browse: boolean;
  /** A durable subscription: its queue outlives the link (detach, restart, failover). */
  durable: boolean;
  /** The filter entries applied (a binding filter, a selector), by the client's keys. */
  filter?: [AmqpValue, AmqpValue][];
  /** The client's source capabilities the broker acts on. */
  capabilities: string[];
}

/** Outcomes a consumer may give (3.4); anything else in its list is not echoed. */
const SUPPORTED_OUTCOMES = ['amqp:accepted:list', 'amqp:rejected:list', 'amqp:released:list', 'amqp:modified:list'];

/**
 * A dynamic node's properties (3.5.9): a temporary queue or topic made for a dynamic
 * terminus goes when the link that made it does (lifetime-policy delete-on-close, what
 * qpid-jms asks for its temporary destinations), whatever else the client asked.
 */
const DYNAMIC_NODE_PROPERTIES: AmqpValue = {
  type: 'map',
  value: [[{ type: 'symbol', value: 'lifetime-policy' }, { type: 'described', descriptor: { type: 'ulong', value: 0x2bn }, value: { type: 'list', value: [] } }]],
};

/** Our source: what is in force, not an echo of what was asked (fields the broker does not apply are left out). */
function sourceValue(t: Terminus, a: SourceAnswer): AmqpValue {
  const asked = t.fields.outcomes;
  const outcomes = asked === undefined ? undefined : (Array.isArray(asked) ? asked : [asked]).filter((o) => SUPPORTED_OUTCOMES.includes(String(o)));
  return describedList('source', {
    address: a.address,
    // Configuration only: what a durable subscription keeps is its queue and binding, never the unsettled state.
    durable: a.durable ? 1 : 0,
    // Anything else is gone when its link goes (a temporary queue, a private subscription queue, the consumer).
    'expiry-policy': a.durable ? 'never' : 'link-detach',
    dynamic: a.dynamic,
    'dynamic-node-properties': a.dynamic ? DYNAMIC_NODE_PROPERTIES : undefined,
    // What the link does: a copy asked for and not given (a subscription's own queue) is said to be a move.
    'distribution-mode': a.browse ? 'copy' : 'move',
    filter: a.filter && a.filter.length > 0 ? { type: 'map', value: a.filter } : undefined,
    'default-outcome': DEFAULT_OUTCOME,
    outcomes: outcomes && outcomes.length > 0 ? outcomes : undefined,
    capabilities: a.capabilities.length > 0 ? a.capabilities : undefined,
  });
}

/** Our target: the address the messages go to; the client's capabilities the broker acts on. Nothing of a receiving link is kept past its detach. */
function targetValue(t: Terminus | undefined, a: { address: string | undefined; dynamic?: boolean; capabilities?: string[] }): AmqpValue {
  const dynamic = a.dynamic ?? t?.dynamic ?? false;
  return describedList('target', {
    address: a.address,
    durable: 0,
    'expiry-policy': 'link-detach',
    dynamic,
    'dynamic-node-properties': dynamic ? DYNAMIC_NODE_PROPERTIES : undefined,
    capabilities: a.capabilities && a.capabilities.length > 0 ? a.capabilities : undefined,
  });
}

/** Of the capabilities a client asked for, those in `honoured`. */
function honoured(t: Terminus | undefined, ...honoured: (string | false | undefined)[]): string[] {
  const asked = t?.capabilities;
  const list = asked === undefined ? [] : Array.isArray(asked) ? asked.map(String) : [String(asked)];
  return list.filter((c) => honoured.includes(c));
}

/** Hooks the server gives each connection. */
export interface ConnectionHost {
  schedule(queue: Queue): void;
  management: ManagementNode;
  /** Links to special addresses (HA replication); true when handled. */
  openSpecialSender?(conn: ClientConnection, address: string, sender: Link): boolean;
  /** Hand a queue's messages to its consumers now (a drain must be answered with what there is). */
  dispatchNow(queue: Queue): void;
  /** Set while local changes are not allowed (an HA backup): the reason. */
  readOnly?(): string | undefined;
  /** Last chance to refuse a link (e.g. DR-replicated queues on a passive secondary). */
  checkLink?(conn: ClientConnection, address: string, direction: 'in' | 'out', browse: boolean): void;
  /** Who may create, send to and take from which names (acl-file, reserved names). */
  acl: Acl;
}

export class ClientConnection {
  readonly outgoing = new Map<Link, OutgoingLink>();
  readonly incoming = new Map<Link, IncomingLink>();
  readonly managementLinks = new Set<Link>();
  readonly ownedQueues = new Set<string>();
  /** Sender links of the client that asked for a dynamic target: link -> its temporary queue or topic. */
  private readonly dynamicTargets = new Map<Link, string>();
  /** Temporary topics this connection made (see createTemporaryTopic): only it may consume from them. */
  private readonly ownedTopics = new Set<string>();
  /**
   * Links attached as a named subscription (by its topic and name, or by its name alone):
   * only their detach with closed=true unsubscribes. A link that reads a subscription's
   * queue by its address (an operator browsing or draining it) leaves it.
   */
  private readonly subscriptionLinks = new Set<Link>();
  /** Sender links handled by the server's special handlers (HA replication). */
  readonly specialSenders = new Set<Link>();
  /** Dynamic links served without a queue (on a read-only broker): address -> link. */
  readonly replyLinks = new Map<string, Link>();
  /** Temporary queues of this connection that management replies were put on. */
  private readonly replyQueues = new Set<string>();
  /** Management credit held back while this connection's replies go unread: link -> requests not yet made good. */
  private readonly heldManagementCredit = new Map<Link, number>();
  private nextLink = 0;
  private coordinator: Coordinator | undefined;
  closed = false;

  constructor(
    readonly id: string,
    readonly engine: Connection,
    readonly socket: Socket,
    readonly user: string | undefined,
    /** Asked at each use, not fixed at login: a user made no longer admin (users file) loses it on open connections too. */
    private readonly isAdmin: () => boolean,
    private readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly host: ConnectionHost,
    private readonly policy: ConnectionPolicy,
    private readonly log: Logger,
  ) {}

  /** Kept from its first reading: a destroyed socket forgets its address. */
  private remote: string | undefined;

  get remoteAddress(): string {
    this.remote ??= this.socket.remoteAddress ? hostPort(this.socket.remoteAddress, this.socket.remotePort ?? '?') : 'unknown';
    return this.remote;
  }

  /** May this connection manage the broker (and pass every ACL)? */
  get admin(): boolean {
    return this.isAdmin();
  }

  /** The client's connection properties (open frame), as plain values. */
  get properties(): Record<string, unknown> {
    const p = this.engine.remoteOpen?.fields.properties as AmqpValue | undefined;
    return p ? (fromAmqp(p) as Record<string, unknown>) : {};
  }

  get containerId(): string | undefined {
    return this.engine.remoteOpen?.fields['container-id'] as string | undefined;
  }

  /** This connection as the publisher of what it sends (noLocal): made at its first link, after its open told its container-id. */
  get publisher(): Publisher {
    this.asPublisher ??= { connection: this.id, container: this.containerId };
    return this.asPublisher;
  }
  private asPublisher: Publisher | undefined;

  get linkCount(): number {
    return this.outgoing.size + this.incoming.size + this.managementLinks.size;
  }

  /**
   * Whether the client may have one more link (the engine's count, which holds the
   * link being attached, and refused ones until the client answers their detach).
   * Past max-links-per-connection the attach is refused; the connection stays.
   */
  admitLink(link: Link): boolean {
    let links = 0;
    for (const session of this.engine.sessions) links += session.linkCount;
    if (links <= this.policy.maxLinks) return true;
    const limit = this.policy.maxLinks;
    const held = refusalLog.admit('max-links-per-connection');
    if (held !== undefined) this.log.warn({ remote: this.remoteAddress, limit, ...suppressedField(held) }, 'link refused: max-links-per-connection reached');
    link.refuse({ condition: 'amqp:resource-limit-exceeded', description: `too many links on this connection: max-links-per-connection is ${limit}` });
    return false;
  }

  // ---- client wants to receive: we send ------------------------------------

  onSenderOpen(sender: Link): void {
    const source = terminusOf(sender.source);
    try {
      if (!source.address && !source.dynamic) return this.openSubscriptionByName(sender);
      const named = subscriptionOf(source, sender.name, this.containerId);
      // A named subscription's queue is the subscriber's own copy: consumed, not browsed.
      let browse = source.distribution_mode === 'copy' && !named;
      let queue: Queue;
      let address: string;
      let own = false;
      let filter: [AmqpValue, AmqpValue] | undefined;
      let selector: ReturnType<typeof sourceSelector>;
      let noLocal: [AmqpValue, AmqpValue] | undefined;
      const readOnly = this.host.readOnly?.();
      if (source.dynamic && readOnly) {
        // No queue may be made here: replies (management) go straight down this link.
        address = `$reply.${randomUUID()}`;
        sender.accept({ source: sourceValue(source, { address, dynamic: true, browse: false, durable: false, capabilities: [] }), sndSettleMode: settleModeFor(sender) });
        this.replyLinks.set(address, sender);
        return;
      }
      if (source.dynamic) {
        queue = this.createTemporaryQueue('dynamic');
        address = queue.name;
      } else {
        address = requireAddress(source.address);
        if (this.host.openSpecialSender?.(this, address, sender)) return;
        if (readOnly && !browse) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
        this.host.checkLink?.(this, address, 'out', browse);
        selector = sourceSelector(filterEntries(source));
        const noLocalAsked = noLocalEntry(filterEntries(source));
        ({ queue, own, filter } = this.queueForSubscription(address, source, named, selector?.selector.text, noLocalAsked !== undefined));
        // Applied to a subscription to an exchange only: on a queue it is not, and the answer does not name it.
        if (own) noLocal = noLocalAsked;
        // So is the private queue of a subscription to an exchange: browsed, it would keep
        // every message the topic carries for as long as the link lives.
        if (own) browse = false;
      }
      // Attached as the subscription, not reading some queue by its address with a durable source.
      const subscribed = named !== undefined && queue.name === named.queue;
      const shared = subscribed && named.shared;
      const capabilities = source.dynamic ? honoured(source, 'temporary-queue') : own ? honoured(source, 'topic', shared && 'shared', shared && 'global') : honoured(source, 'queue');
      const applied = [filter, selector?.entry, noLocal].filter((e) => e !== undefined);
      // A subscription's own queue selects as messages are routed to it (its settings): its consumer takes all it holds.
      this.attachConsumer(sender, queue, { address, dynamic: source.dynamic ?? false, browse, durable: subscribed && named.durable, filter: applied, capabilities }, own ? undefined : selector?.selects);
      if (subscribed) this.subscriptionLinks.add(sender);
    } catch (err) {
      this.refuseLink(sender, err);
    }
  }

  /**
   * An attach with no source address names a subscription by its link name alone: how
   * qpid-jms finds a durable subscription to unsubscribe from (it then detaches with
   * closed=true). Answered with the subscription's source, or refused as not found.
   */
  private openSubscriptionByName(sender: Link): void {
    try {
      const candidates = [subscriptionQueue(sender.name, this.containerId, false, false), subscriptionQueue(sender.name, this.containerId, true, false), subscriptionQueue(sender.name, undefined, true, true)];
      const name = candidates.find((q) => this.broker.queues.has(q));
      const address = name === undefined ? undefined : subscriptionAddress(this.broker, name);
      if (name === undefined || address === undefined) {
        throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `the link source has no address and no subscription is named '${sender.name}'; name a queue or exchange`);
      }
      this.host.acl.check(this, 'read', this.broker.addressBase(address));
      // This attach is how a client unsubscribes (its detach deletes the queue): read and configure on it.
      this.host.acl.check(this, 'read', name);
      this.host.acl.check(this, 'configure', name);
      // Held to what an attach naming the address is: a consumer, so not on a broker
      // that takes no local changes (an HA backup: its accepts would drop the backup's
      // copy alone), nor of a DR queue that does not serve here.
      const readOnly = this.host.readOnly?.();
      if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
      this.host.checkLink?.(this, name, 'out', false);
      const queue = this.broker.queue(name);
      // A subscription that is not shared takes one consumer at a time (subscriptionQueueFor).
      if (name === candidates[0] && queue.consumerCount > 0) throw new TandemError('TANDEM_ERR_RESOURCE_LOCKED', `subscription '${name}' already has a consumer`);
      // Every candidate is durable; a shared one is said to be so only to a client that asked (it names none here).
      this.attachConsumer(sender, queue, { address, dynamic: false, browse: false, durable: true, capabilities: honoured(terminusOf(sender.source), 'topic', 'shared', 'global') });
      this.subscriptionLinks.add(sender);
    } catch (err) {
      this.refuseLink(sender, err);
    }
  }

  private attachConsumer(sender: Link, queue: Queue, answer: SourceAnswer, selects?: (msg: MessageRecord, deliveryCount: number) => boolean): void {
    this.claimExclusive(queue);
    const presettled = sender.remoteAttach?.fields['snd-settle-mode'] === 1;
    const browse = answer.browse;
    sender.accept({ source: sourceValue(terminusOf(sender.source), answer), sndSettleMode: settleModeFor(sender) });
    const link = new OutgoingLink(`${this.id}/${++this.nextLink}`, this.id, sender, queue, this.broker, browse, presettled, (q) => this.host.schedule(q), (l) => this.outgoing.delete(l), selects);
    this.outgoing.set(sender, link);
    queue.addConsumer(link);
    link.refreshCredit();
  }

  /** Credit or drain changed on one of our sending links, or the socket took our output. */
  onSenderFlow(sender: Link): void {
    const link = this.outgoing.get(sender);
    if (!link) return;
    this.releaseManagementCredit();
    // A drain is answered as soon as this returns (the engine gives back the credit left):
    // what the queue holds goes out first.
    if (sender.drain) this.host.dispatchNow(link.queue);
    else link.refreshCredit();
  }

  /** The client said what became of a delivery we sent (or settled it). */
  onOutcome(delivery: Delivery): void {
    const link = this.outgoing.get(delivery.link);
    if (!link) return;
    this.takeOutcome(link, delivery);
    // A reply read may let a management link have its credit again.
    this.releaseManagementCredit();
  }

  private takeOutcome(link: OutgoingLink, delivery: Delivery): void {
    const state = delivery.remoteState;
    switch (state?.def.name) {
      case 'accepted':
        return link.onAccepted(delivery);
      case 'released':
        return link.onReleased(delivery);
      case 'rejected':
        return link.onRejected(delivery);
      case 'modified':
        return link.onModified(delivery, state);
      case 'transactional-state':
        return this.onTransactionalOutcome(link, delivery);
      default:
        // A state that is no outcome (received) changes nothing until it is settled.
        if (delivery.remoteSettled) link.onSettled(delivery);
    }
  }

  // ---- client wants to send: we receive ------------------------------------

  onReceiverOpen(receiver: Link): void {
    const targetComposite = receiver.target;
    try {
      if (targetComposite?.def.name === 'coordinator') {
        this.coordinator ??= new Coordinator(this.broker, this.gate, this.log, this.policy.transactionLimits, this.publisher);
        this.coordinator.attach(receiver, targetComposite.fields.capabilities);
        return;
      }
      const target = targetComposite ? terminusOf(targetComposite) : undefined;
      // A null address (rhea, proton) means the anonymous relay, like an absent one.
      const address = target?.address ?? undefined;
      if (address === MANAGEMENT_ADDRESS) {
        receiver.accept({ target: targetValue(undefined, { address }), rcvSettleMode: 0 });
        this.managementLinks.add(receiver);
        receiver.flow(MANAGEMENT_CREDIT);
        return;
      }
      const readOnly = this.host.readOnly?.();
      if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
      if (target?.dynamic) return this.openDynamicTarget(receiver, target);
      if (address !== undefined) {
        this.checkWrite(address);
        this.host.checkLink?.(this, address, 'in', false);
        // Sending to an exclusive queue is allowed (replies to another connection's
        // temporary queue); exclusivity is about who consumes.
        this.ensureAddress(address);
      }
      const node = address === undefined ? undefined : this.broker.resolve(address);
      const capabilities = node === undefined ? [] : 'queue' in node ? honoured(target, 'queue') : honoured(target, 'topic');
      receiver.accept({ target: targetValue(target, { address, capabilities }), rcvSettleMode: 0 });
      this.openIncoming(receiver, address);
    } catch (err) {
      this.refuseLink(receiver, err);
    }
  }

  /**
   * A dynamic target (qpid-jms' createTemporaryQueue): a temporary queue owned by this
   * connection, whose name goes back in the attach. It lives until this link detaches
   * (lifetime-policy delete-on-close, what JMS' TemporaryQueue.delete() does) or the
   * connection closes, however often its consumers come and go. With the capability
   * `temporary-topic` (qpid-jms' createTemporaryTopic) it is a temporary topic instead
   * (createTemporaryTopic below), with the same lifetime.
   */
  private openDynamicTarget(receiver: Link, target: Terminus): void {
    let name: string;
    const topic = honoured(target, 'temporary-topic').length > 0;
    if (topic) {
      name = this.createTemporaryTopic();
    } else {
      const queue = this.createTemporaryQueue('dynamic');
      this.claimExclusive(queue);
      // JMS keeps a TemporaryQueue until delete() or the connection's close, and a
      // requester may close its reply consumer and make another: not gone with its last consumer.
      queue.keptByOwner = true;
      name = queue.name;
    }
    this.dynamicTargets.set(receiver, name);
    receiver.accept({ target: targetValue(target, { address: name, dynamic: true, capabilities: honoured(target, topic ? 'temporary-topic' : 'temporary-queue', topic && 'topic') }), rcvSettleMode: 0 });
    this.openIncoming(receiver, name);
  }

  private openIncoming(receiver: Link, address: string | undefined): void {
    const link = new IncomingLink(
      receiver,
      this.broker,
      this.gate,
      {
        address,
        creditWindow: this.policy.creditWindow,
        maxMessageSize: this.policy.maxMessageSize,
        ensureAddress: (a) => {
          this.checkWrite(a);
          this.host.checkLink?.(this, a, 'in', false);
          this.ensureAddress(a);
        },
        onTransactional: (delivery, msg, a, txnId) => {
          if (!this.coordinator) {
            delivery.reject({ condition: 'amqp:transaction:unknown-id', description: 'no transaction coordinator on this connection' });
            return;
          }
          this.coordinator.send(delivery, txnId, a, msg);
        },
        onTransactionalRefused: (txnId, why) => this.coordinator?.refused(txnId, why),
        refusing: () => this.host.readOnly?.(),
        mayNameAnyone: () => this.admin,
        publisher: this.publisher,
      },
      this.log,
    );
    this.incoming.set(receiver, link);
    link.open();
  }

  /** A whole message arrived on one of our receiving links. */
  onMessage(receiver: Link, delivery: Delivery): void {
    const bytes = delivery.payload;
    if (delivery.messageFormat !== 0) return this.refuseFormat(receiver, delivery);
    if (this.coordinator?.isCoordinatorLink(receiver)) {
      this.coordinator.onControl(receiver, delivery, bytes);
      return;
    }
    if (this.managementLinks.has(receiver)) {
      delivery.accept();
      this.grantManagementCredit(receiver, 1);
      void this.host.management.handle(bytes, {
        user: this.user,
        admin: this.admin,
        connectionId: this.id,
        replyDirect: (address, reply) => {
          const link = this.replyLinks.get(address);
          if (!link || !link.sendable) return false;
          // Settled either way: presettled if the client asked for that, else settled at once (no outcome awaited).
          const settled = settleModeFor(link) === 1;
          let d: Delivery;
          try {
            d = link.send(reply, { settled });
          } catch (err) {
            // Over the client's own max-message-size: it cannot take this reply, so its reply
            // link stops, as a consumer's does when a primary delivers it (outgoing-link.ts).
            // Answered all the same: there is no queue here to fall back on.
            const condition = err instanceof EngineError ? err.condition : 'amqp:internal-error';
            const description = err instanceof EngineError ? err.description : (err as Error).message;
            this.log.info({ conn: this.id, replyTo: address, reason: description }, 'a management reply the client cannot take; closing its reply link');
            link.detach({ condition, description });
            return true;
          }
          if (!settled) d.settle();
          return true;
        },
        publishReply: (address, reply) => this.publishReply(address, reply),
      });
      return;
    }
    const link = this.incoming.get(receiver);
    if (link) link.onMessage(delivery, bytes);
    else delivery.reject({ condition: 'amqp:illegal-state', description: 'link is not attached to an address' });
  }

  /**
   * A message-format other than 0 (2.7.5: the payload is not an AMQP message as 3.2 says):
   * rejected, and the credit it took given back, whichever kind of link it came on.
   */
  private refuseFormat(receiver: Link, delivery: Delivery): void {
    const error = { condition: 'amqp:not-implemented', description: `message-format ${delivery.messageFormat} is not taken: only AMQP message format 0` };
    const link = this.incoming.get(receiver);
    if (link) return link.refuseDelivery(delivery, error);
    delivery.reject(error);
    if (this.coordinator?.isCoordinatorLink(receiver)) receiver.flow(receiver.credit + 1);
    else if (this.managementLinks.has(receiver)) this.grantManagementCredit(receiver, 1);
  }

  /** A consumer settled a delivery with transactional-state: accepted under a transaction. */
  private onTransactionalOutcome(link: OutgoingLink, delivery: Delivery): void {
    const state = readTransactionalState(delivery.remoteState);
    const entry = link.entryOf(delivery);
    if (!state || !entry) return;
    if (state.outcome === undefined || state.outcome === 'accepted' || state.outcome === 'rejected') {
      link.take(delivery);
      const held = state.outcome === 'rejected' ? this.coordinator?.reject(state.txnId, link.queue, entry) : this.coordinator?.accept(state.txnId, link.queue, entry);
      if (!held) {
        // Unknown transaction: the outcome cannot be held, so the message goes back.
        link.queue.release(entry, { deliveryFailed: false, undeliverableHere: false });
        this.host.schedule(link.queue);
      }
    } else if (state.outcome === 'modified') {
      // Released or modified: the message goes back now, as a rollback would send it
      // back too; a modified one as its outcome says (delivery-count, annotations).
      link.onModified(delivery, state.outcomeState!);
    } else {
      link.onReleased(delivery);
    }
  }

  // ---- teardown ----------------------------------------------------------------

  /** A link detached (by the client, by the engine for a violation, or with its session). */
  onLinkClosed(l: Link): void {
    if (l.isSender) {
      for (const [address, link] of this.replyLinks) if (link === l) this.replyLinks.delete(address);
      const link = this.outgoing.get(l);
      this.outgoing.delete(l);
      link?.close();
      if (this.subscriptionLinks.delete(l) && link) this.unsubscribeIfClosed(l, link.queue);
      // Its temporary queue (and the replies on it) may have gone with it.
      this.releaseManagementCredit();
      return;
    }
    this.incoming.get(l)?.close();
    this.incoming.delete(l);
    this.dropDynamicTarget(l);
    this.coordinator?.detach(l);
    this.managementLinks.delete(l);
    this.heldManagementCredit.delete(l);
  }

  /**
   * A DR queue stops serving here (switchover, demotion): detach this connection's
   * consumers of `queue` (what they hold unsettled goes back to it) and, with
   * `publishers`, the links that send to it by name, with `err` as the reason.
   */
  detachQueueLinks(queue: string, err: unknown, publishers: boolean): void {
    const error = errorCondition(err);
    for (const [sender, link] of [...this.outgoing]) {
      if (link.queue.name !== queue) continue;
      this.outgoing.delete(sender);
      link.close();
      sender.detach(error);
    }
    if (!publishers) return;
    // Transfers still on the way on a link we detached are dropped by the engine, never taken.
    for (const [receiver, link] of [...this.incoming]) {
      if (link.address !== queue) continue;
      this.incoming.delete(receiver);
      link.close();
      receiver.detach(error);
    }
  }

  /** The connection is gone: release what its consumers held, drop what it owned. */
  cleanup(): void {
    if (this.closed) return;
    this.closed = true;
    // Open transactions roll back first, so their acceptances go back to the queues.
    this.coordinator?.rollbackAll();
    for (const link of this.outgoing.values()) link.close();
    for (const link of this.incoming.values()) link.close();
    this.outgoing.clear();
    this.incoming.clear();
    for (const name of this.ownedQueues) {
      const queue = this.broker.queues.get(name);
      if (!queue || queue.owner !== this.id) continue;
      if (queue.settings.autoDelete) {
        this.deleteOwnedQueue(name, 'could not delete exclusive queue of a closed connection');
      } else {
        queue.owner = undefined;
      }
    }
    this.ownedQueues.clear();
    for (const name of [...this.ownedTopics]) this.deleteTemporaryTopic(name);
  }

  // ---- helpers -----------------------------------------------------------------

  /**
   * A subscription's consumer detached with closed=true (JMS unsubscribe, or a link that
   * ends for good): the subscription goes, once no other consumer holds it. Only a link
   * attached as the subscription (subscriptionLinks), not one reading its queue by
   * address. A detach with closed=false (consumer.close(), a dropped connection) keeps it.
   */
  private unsubscribeIfClosed(sender: Link, queue: Queue): void {
    if (!queue.name.startsWith(SUBSCRIPTION_PREFIX) || queue.consumerCount > 0) return;
    const closed = sender.detachReceived && sender.remoteClosed;
    if (!closed || this.broker.queues.get(queue.name) !== queue) return;
    try {
      // A consumer allowed to read it but not to configure it leaves it in place (an ACL's say).
      this.host.acl.check(this, 'configure', queue.name);
      this.broker.deleteQueue(queue.name);
      this.log.info({ queue: queue.name, conn: this.id }, 'subscription deleted by its consumer (unsubscribe)');
    } catch (err) {
      this.log.warn({ queue: queue.name, err: (err as Error).message }, 'could not delete an unsubscribed subscription');
    }
  }

  /** The link that made a temporary queue detached: the queue goes with it. */
  private dropDynamicTarget(receiver: Link): void {
    const name = this.dynamicTargets.get(receiver);
    if (name === undefined) return;
    this.dynamicTargets.delete(receiver);
    if (this.ownedTopics.has(name)) return this.deleteTemporaryTopic(name);
    const queue = this.broker.queues.get(name);
    if (!queue || queue.owner !== this.id) return;
    this.ownedQueues.delete(name);
    this.deleteOwnedQueue(name, 'could not delete a temporary queue whose link detached');
  }

  /**
   * Delete a queue this connection owned and no longer needs, its messages going to its
   * alternate exchange in slices (deleteQueueInSlices) as an admin delete's do: in one
   * go a big one held the broker for seconds. A queue of at most a slice goes at once.
   */
  private deleteOwnedQueue(name: string, failure: string): void {
    deleteQueueInSlices(this.broker, name).catch((err: unknown) => this.log.warn({ queue: name, err: (err as Error).message }, failure));
  }

  /**
   * A management reply, put where reply-to says as if this connection had sent it there:
   * refused as such a message would be (no permission, a passive DR copy, a backup, the
   * memory alarm), and never a reason to create a queue. Only a reply to the requester's
   * own temporary queue skips those checks.
   */
  private publishReply(address: string, bytes: Buffer): void {
    const own = this.broker.queues.get(address);
    if (own && own.owner === this.id && this.ownedQueues.has(address) && address.startsWith(TEMPORARY_QUEUE_PREFIX)) {
      // The requester's own temporary queue: what the CLI waits on. Even under the memory
      // alarm the answer goes out, as it would down a reply link: operators need it most then.
      // But only to a client that reads them: unread replies are memory no alarm refuses.
      // Credit stops a client's requests once MAX_UNREAD_REPLIES wait, and it has at most
      // MANAGEMENT_CREDIT more in flight then: only past both is a reply dropped.
      const unread = this.unreadReplies();
      if (unread >= MAX_UNREAD_REPLIES + MANAGEMENT_CREDIT) {
        throw new TandemError('TANDEM_ERR_QUEUE_FULL', `the requester has ${unread} management replies unread (at most ${MAX_UNREAD_REPLIES + MANAGEMENT_CREDIT} are kept); read them`);
      }
      this.replyQueues.add(address);
      this.broker.publish(address, parseIncoming(bytes), { internal: true });
      return;
    }
    this.checkWrite(address);
    this.host.checkLink?.(this, address, 'in', false);
    const readOnly = this.host.readOnly?.();
    if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
    if (!this.broker.resolve(address)) throw notFound('queue or exchange', address, 'a reply-to names an existing queue, or use a dynamic receiver');
    this.broker.publish(address, parseIncoming(bytes));
  }

  /**
   * May this connection send to `address`? A temporary queue (a dynamic receiver's) may
   * always be written: its name cannot be guessed, and replies are addressed to it. Not a
   * subscription's private queue: sending to it by name would pass by the ACL's write on
   * its exchange.
   */
  private checkWrite(address: string): void {
    const queue = this.broker.queues.get(address);
    const replies = address.startsWith(TEMPORARY_QUEUE_PREFIX) && !address.startsWith(PRIVATE_SUBSCRIPTION_PREFIX);
    if (queue && replies && queue.settings.exclusive && queue.settings.autoDelete) return;
    this.host.acl.check(this, 'write', this.broker.addressBase(address));
  }

  /** Create a queue for an unknown address when auto-create is on (and the ACL allows it). */
  ensureAddress(address: string): void {
    if (this.broker.resolve(address)) return;
    // A temporary queue or topic that is gone (deleted, or gone with the connection that
    // made it, as a JMS requester's reply queue goes) is not made again: a late reply would
    // make a durable queue nobody will ever read, kept for good.
    if (address.startsWith(TEMPORARY_QUEUE_PREFIX)) {
      throw notFound('temporary queue or topic', address, 'it was deleted, or went with the connection that made it');
    }
    const readOnly = this.host.readOnly?.();
    if (readOnly) throw notFound('queue or exchange', address, readOnly);
    if (!this.policy.autoCreate) {
      throw notFound('queue or exchange', address, "create it with 'tandem queue add', or start the broker with --auto-create yes");
    }
    this.host.acl.check(this, 'configure', address);
    this.refuseNewQueueUnderAlarm();
    // Auto-created queues are durable, so durable messages sent to them survive a crash.
    this.broker.declareQueue(address, { ...this.broker.queueDefaults, durable: true });
    this.log.info({ queue: address, conn: this.id }, 'queue auto-created on attach');
  }

  /**
   * The queue a consumer of `address` takes from; `own` when it is the consumer's own (a
   * subscription to an exchange, which then has the selector and, if `noLocal`, leaves out
   * its subscriber's messages: no-local-filter.ts). A queue's consumer is given the queue.
   */
  private queueForSubscription(address: string, source: Terminus, named: Subscription | undefined, selector: string | undefined, noLocal = false): { queue: Queue; own: boolean; filter?: [AmqpValue, AmqpValue] } {
    // "exchange/key" subscribes to an exchange with a binding key (qpid's address form).
    const base = this.broker.addressBase(address);
    this.host.acl.check(this, 'read', base);
    if (base === address) this.ensureAddress(address);
    const resolved = this.broker.resolve(address);
    if (!resolved) throw notFound('queue or exchange', base);
    if ('queue' in resolved) return { queue: resolved.queue, own: false };
    // Subscribing to an exchange: a private queue bound with the key asked for.
    const exchange = resolved.exchange;
    if (exchange.owner !== undefined && exchange.owner !== this.id) {
      throw new TandemError('TANDEM_ERR_RESOURCE_LOCKED', `temporary topic '${exchange.name}' belongs to another connection: only the connection that made it may consume from it`);
    }
    // A key in the address wins: a binding filter beside it is not applied (nor said to be).
    const binding = resolved.key === undefined ? bindingFilter(source) : undefined;
    const key = resolved.key ?? binding?.key ?? (exchange.type === 'topic' ? '#' : '');
    // Before any queue is made, so a refused key leaves none behind.
    checkBindingKey(exchange.type, key);
    const filters = { selector, noLocal: noLocal ? noLocalOf(named, this.id, this.containerId) : undefined };
    if (named) {
      // The attach named the exchange, so the link check has not seen this queue: a passive
      // DR copy of a subscription (or a fenced or diverged source) is refused here, before
      // it is consumed from, replaced or made. Taken, its consumer dequeued messages the
      // copy's source still held, and a changed selector deleted the copy.
      this.host.checkLink?.(this, named.queue, 'out', false);
      return { queue: this.subscriptionQueueFor(named, exchange.name, key, filters), own: true, filter: binding?.entry };
    }
    const queue = this.createTemporaryQueue('subscription', filters);
    this.broker.bind(exchange.name, queue.name, key);
    return { queue, own: true, filter: binding?.entry };
  }

  /**
   * The queue of a durable or shared subscription, made on first use. Reattaching to the
   * same name with another topic, selector or noLocal replaces the subscription, as JMS
   * says, unless it has consumers; a subscription that is not shared takes one consumer
   * at a time. A name taken by the other kind (shared or not) is refused (kindConflict).
   * Its selector and noLocal are its queue's settings: messages are selected as they are
   * routed to it, and both are kept wherever the queue is (journal, HA, DR).
   */
  private subscriptionQueueFor(sub: Subscription, exchange: string, key: string, filters: SubscriptionFilters): Queue {
    const readOnly = this.host.readOnly?.();
    let queue = this.broker.queues.get(sub.queue);
    // The name is the client's container-id and link name, which any client may give: under
    // an ACL, taking from a subscription needs read on its queue, and making, replacing or
    // unsubscribing it needs configure, as for any queue (docs/security.md).
    this.host.acl.check(this, queue ? 'read' : 'configure', sub.queue);
    // First: a subscription of the other kind is refused, not replaced (as a topic change would).
    const conflict = queue && kindConflict(sub, queue.settings.subscription);
    if (conflict) throw new TandemError('TANDEM_ERR_ALREADY_EXISTS', conflict);
    const changed = !queue ? undefined : subscriptionAddress(this.broker, sub.queue) !== `${exchange}/${key}` ? 'topic' : queue.settings.selector !== filters.selector ? 'selector' : !sameNoLocal(queue.settings.noLocal, filters.noLocal) ? 'noLocal setting' : undefined;
    if (queue && changed) {
      if (queue.consumerCount > 0) throw new TandemError('TANDEM_ERR_RESOURCE_LOCKED', `subscription '${sub.queue}' is in use for another ${changed}`);
      if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
      this.host.acl.check(this, 'configure', sub.queue);
      this.broker.deleteQueue(sub.queue);
      this.log.info({ queue: sub.queue, conn: this.id }, `subscription replaced: its ${changed} changed`);
      queue = undefined;
    }
    if (queue) {
      if (!sub.shared && queue.consumerCount > 0) throw new TandemError('TANDEM_ERR_RESOURCE_LOCKED', `subscription '${sub.queue}' already has a consumer`);
      return queue;
    }
    if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
    this.refuseNewQueueUnderAlarm();
    // Durable: kept, journaled and replicated like any durable queue. Shared and not
    // durable: gone with its last consumer. Its kind is one of its settings, which its
    // queue-declare carries wherever the queue goes (journal, HA backups, DR).
    const settings = { ...defaultQueueSettings, durable: sub.durable, autoDelete: !sub.durable, replicate: sub.durable ? undefined : ('none' as const), subscription: kindOf(sub), ...withFilters(filters) };
    ({ queue } = this.broker.declareQueue(sub.queue, settings));
    this.broker.bind(exchange, sub.queue, key);
    this.log.info({ queue: sub.queue, durable: sub.durable, shared: sub.shared, conn: this.id }, 'subscription created');
    return queue;
  }

  /** A temporary queue: a dynamic node's, or a subscription's private one (with its selector and noLocal, if any). */
  private createTemporaryQueue(use: 'dynamic' | 'subscription', filters: SubscriptionFilters = {}): Queue {
    const readOnly = this.host.readOnly?.();
    if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
    // A connection's first temporary queue is its reply queue (the CLI's, the console's,
    // a JMS requester's): taken even under the alarm, so an admin can still purge and delete.
    if (this.broker.memoryAlarm && (use === 'subscription' || this.ownsTemporaryQueue())) this.refuseNewQueueUnderAlarm();
    const name = `${use === 'subscription' ? PRIVATE_SUBSCRIPTION_PREFIX : TEMPORARY_QUEUE_PREFIX}${randomUUID()}`;
    const { queue } = this.broker.declareQueue(name, { ...defaultQueueSettings, exclusive: true, autoDelete: true, replicate: 'none', ...withFilters(filters) }, this.id);
    return queue;
  }

  /**
   * A temporary topic (qpid-jms' createTemporaryTopic): a fanout exchange of this
   * connection, neither journaled nor replicated. Each consumer gets a private queue bound
   * to it, so each gets a copy of every message, and what is sent while none is attached
   * is dropped, as for any topic. Publishing to it is held to the ACL like any name (its
   * name is no secret: exchanges are listed to every user), consuming is for this
   * connection alone.
   */
  private createTemporaryTopic(): string {
    const readOnly = this.host.readOnly?.();
    if (readOnly) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
    this.refuseNewQueueUnderAlarm();
    const name = `${TEMPORARY_TOPIC_PREFIX}${randomUUID()}`;
    this.broker.declareExchange(name, 'fanout', { ...defaultExchangeSettings, durable: false, replicate: 'none' }).exchange.owner = this.id;
    this.ownedTopics.add(name);
    return name;
  }

  /** A temporary topic's link detached (TemporaryTopic.delete()) or its connection went. */
  private deleteTemporaryTopic(name: string): void {
    this.ownedTopics.delete(name);
    try {
      if (this.broker.exchanges.get(name)?.owner === this.id) this.broker.deleteExchange(name);
    } catch (err) {
      this.log.warn({ exchange: name, err: (err as Error).message }, 'could not delete a temporary topic');
    }
  }

  private ownsTemporaryQueue(): boolean {
    for (const name of this.ownedQueues) if (name.startsWith(TEMPORARY_QUEUE_PREFIX)) return true;
    return false;
  }

  /**
   * Under the memory alarm no new queue is made for a client (temporary, for a
   * subscription, or auto-created for an unknown address): each is memory (about
   * 1 KiB of heap, more with its journal records), and a client attaching to ever
   * new addresses makes them faster than anything drains, up to the heap's end,
   * where the process dies (bar a connection's first temporary queue: see
   * createTemporaryQueue). Attaching to a queue that exists is still taken (a
   * consumer helps drain).
   */
  private refuseNewQueueUnderAlarm(): void {
    const alarm = this.broker.memoryAlarm;
    if (alarm) throw new TandemError('TANDEM_ERR_MEMORY_FULL', `no new queue (temporary, subscription or auto-created) while memory is short: ${alarm}`);
  }

  // ---- management credit -------------------------------------------------------

  /**
   * Messages on the temporary queues this connection's management replies went to
   * (waiting, or delivered and not yet settled). Queues that are gone are forgotten.
   */
  private unreadReplies(): number {
    let n = 0;
    for (const name of this.replyQueues) {
      const queue = this.broker.queues.get(name);
      if (!queue || queue.owner !== this.id) this.replyQueues.delete(name);
      else n += queue.depth;
    }
    return n;
  }

  /**
   * Whether a request taken may be made good with new credit. Each request's reply may
   * land on this connection's own temporary queue, past the memory alarm: a client that
   * never reads them gets no more credit once MAX_UNREAD_REPLIES wait, and none at all
   * during the alarm while any wait. One that reads its replies never notices.
   */
  private repliesRead(): boolean {
    if (this.replyQueues.size === 0) return true;
    const unread = this.unreadReplies();
    return unread < MAX_UNREAD_REPLIES && !(this.broker.memoryAlarm && unread > 0);
  }

  private grantManagementCredit(receiver: Link, n: number): void {
    if (this.repliesRead()) {
      receiver.flow(receiver.credit + n);
      return;
    }
    this.heldManagementCredit.set(receiver, (this.heldManagementCredit.get(receiver) ?? 0) + n);
  }

  /** Replies were read (or their queue went): credit held back is given again. */
  private releaseManagementCredit(): void {
    if (this.heldManagementCredit.size === 0 || this.closed || !this.repliesRead()) return;
    for (const [receiver, n] of this.heldManagementCredit) receiver.flow(receiver.credit + n);
    this.heldManagementCredit.clear();
  }

  private claimExclusive(queue: Queue): void {
    if (!queue.settings.exclusive) return;
    if (queue.owner && queue.owner !== this.id) {
      throw new TandemError('TANDEM_ERR_RESOURCE_LOCKED', `queue '${queue.name}' is exclusive to another connection`);
    }
    queue.owner = this.id;
    this.ownedQueues.add(queue.name);
  }

  private refuseLink(link: Link, err: unknown): void {
    const error = errorCondition(err);
    if (!(err instanceof TandemError)) this.log.error({ err, conn: this.id }, 'link refused by an internal error');
    else this.log.debug({ conn: this.id, reason: error.description }, 'link refused');
    // Spec 2.6.3: attach with a null terminus, then detach with the error (the engine's refuse).
    link.refuse(error);
  }
}

/** Credit a management link keeps open: one more is given for each request taken. */
const MANAGEMENT_CREDIT = 100;

/**
 * Management replies a connection may leave unread on its temporary queues: past it
 * its management links get no more credit (and past it plus MANAGEMENT_CREDIT, which
 * a client keeping to its credit never reaches, further replies are dropped, logged).
 * The CLI and the console wait for each reply, so they hold one at a time.
 */
const MAX_UNREAD_REPLIES = 100;

/** Links refused over max-links-per-connection, from every connection: one line per interval. */
const refusalLog = new LogThrottle();

/**
 * Our snd-settle-mode for a link we send on: settled when the client asked for
 * presettled deliveries, unsettled when it asked for that, else mixed.
 */
function settleModeFor(sender: Link): 0 | 1 | 2 {
  const asked = sender.remoteAttach?.fields['snd-settle-mode'];
  return asked === 1 ? 1 : asked === 0 ? 0 : 2;
}

/** A subscription's private queue: temporary too, but fed by its exchange alone (checkWrite). */
const PRIVATE_SUBSCRIPTION_PREFIX = `${TEMPORARY_QUEUE_PREFIX}sub.`;

/** Temporary topics (fanout exchanges, createTemporaryTopic) are named with this. */
const TEMPORARY_TOPIC_PREFIX = `${TEMPORARY_QUEUE_PREFIX}topic.`;

/** What a subscription's queue selects by: its selector, and whose messages it leaves out (noLocal). */
interface SubscriptionFilters {
  selector?: string | undefined;
  noLocal?: NoLocal | undefined;
}

/** The settings of a subscription queue with these filters: none of those it lacks (the queue is declared as before). */
function withFilters({ selector, noLocal }: SubscriptionFilters): { selector?: string; noLocal?: NoLocal } {
  return { ...(selector === undefined ? {} : { selector }), ...(noLocal === undefined ? {} : { noLocal }) };
}

function requireAddress(address: string | undefined): string {
  if (!address) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'the link source has no address; name a queue or exchange');
  return address;
}

/** The filter's entries (a map the engine decoded and checked: its keys are symbols). */
function filterEntries(source: Terminus): [AmqpValue, AmqpValue][] {
  const f = source.filter;
  return f?.type === 'map' ? f.value : [];
}

/**
 * Binding filters (qpid's legacy-amqp-direct-binding and legacy-amqp-topic-binding), by
 * descriptor symbol and code: their string is the key a subscription to an exchange binds
 * with. With the selector (selector-filter.ts) and noLocal (no-local-filter.ts), the only
 * filters tandem applies; any other is neither applied nor said to be.
 */
const BINDING_FILTERS = [
  { symbol: 'apache.org:legacy-amqp-direct-binding:string', code: 0x0000468c00000000n },
  { symbol: 'apache.org:legacy-amqp-topic-binding:string', code: 0x0000468c00000001n },
];

/**
 * The source's binding filter, if any: its entry (our attach names it as in force) and
 * the key. A bare string value is taken as one too, as tandem always has (clients that
 * predate the descriptors send that). A described string of another descriptor is not a
 * key: it is some filter tandem does not know (a SQL or JMS selector of another name).
 */
function bindingFilter(source: Terminus): { entry: [AmqpValue, AmqpValue]; key: string } | undefined {
  for (const entry of filterEntries(source)) {
    const v = entry[1];
    if (v.type === 'string') return { entry, key: v.value };
    if (v.type !== 'described' || v.value.type !== 'string') continue;
    const d = v.descriptor;
    if (BINDING_FILTERS.some((f) => (d.type === 'symbol' && d.value === f.symbol) || (d.type === 'ulong' && d.value === f.code))) return { entry, key: v.value.value };
  }
  return undefined;
}
