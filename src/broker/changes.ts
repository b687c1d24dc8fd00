// The change log: every change of broker state, as plain data.
//
// One ordered log serves four readers (see DESIGN.md): the journal (durable
// records only), HA backups (everything replicated), the DR bridge (enqueues and
// dequeues of chosen queues) and promotion (the applied LSN). So a record must
// carry everything needed to apply it elsewhere: a backup applying the same
// records in LSN order ends in the same state, with the same message ids.
import type { DedupDigest } from './dedup-key.js';

export const ReplicationLevel = {
  none: 'none',
  configuration: 'configuration',
  all: 'all',
} as const;
export type ReplicationLevel = (typeof ReplicationLevel)[keyof typeof ReplicationLevel];

export function isReplicationLevel(value: unknown): value is ReplicationLevel {
  return value === 'none' || value === 'configuration' || value === 'all';
}

/** A message key as it entered a window: its digest (dedup-key.ts) and when (ms since epoch). */
export interface DedupStamp {
  key: DedupDigest;
  at: number;
}

export type LimitPolicy = 'reject' | 'ring';

export interface QueueSettings {
  durable: boolean;
  autoDelete: boolean;
  /** Milliseconds a queue that lost its last consumer waits before it is deleted. */
  autoDeleteDelayMs: number;
  exclusive: boolean;
  /** 0 means no limit. */
  maxCount: number;
  /** Bytes of message data; 0 means no limit. */
  maxSize: number;
  limitPolicy: LimitPolicy;
  /** Default time to live in ms for messages that carry none; 0 means none. */
  defaultTtlMs: number;
  alternateExchange: string;
  /** Number of priority levels (1 = plain FIFO, up to 10 for AMQP priorities 0-9). */
  priorities: number;
  /** undefined: the broker-wide default (ha-replicate) applies. */
  replicate: ReplicationLevel | undefined;
  /** Duplicate detection: keys of the last this many messages (0: off; see dedup-window.ts). */
  dedupWindow: number;
  /** ...for at most this many ms (0: no age limit). */
  dedupTtlMs: number;
  /** Application property holding the key; '' means the AMQP message-id. */
  dedupKey: string;
  /**
   * A named subscription's queue (src/amqp/subscriptions.ts): the kind it was made
   * as, so the other kind of the same name is refused. Absent on every other queue,
   * and on a subscription queue made before kinds were recorded.
   */
  subscription?: SubscriptionKind;
  /**
   * Message groups (queue argument qpid.message-groups, message-groups.ts): a message's
   * group-id keeps its group at one consumer at a time. Absent (off) on other queues.
   */
  messageGroups?: boolean;
  /**
   * A topic subscription's JMS message selector (src/selector/): a message routed to this
   * queue goes in only when the selector selects it, so a subscription keeps nothing its
   * consumers will never take. Absent on every other queue.
   */
  selector?: string;
  /**
   * JMS noLocal on a topic subscription's queue (src/broker/no-local.ts): a message its
   * publisher (NoLocal.by) published is not routed to it. Absent on every other queue.
   */
  noLocal?: NoLocal;
}

/** A JMS durable subscription is shared or not; both kinds of one name share a queue name. */
export type SubscriptionKind = 'shared' | 'unshared';

/**
 * Whose messages a noLocal subscription does not take: those of one connection (a
 * private subscription's, by the broker's connection id) or of every connection with
 * one container-id (a named subscription's: its JMS clientID).
 */
export interface NoLocal {
  by: NoLocalScope;
  id: string;
}
export type NoLocalScope = 'connection' | 'container';

export type ExchangeType = 'direct' | 'topic' | 'fanout';

export interface ExchangeSettings {
  durable: boolean;
  alternateExchange: string;
  replicate: ReplicationLevel | undefined;
  /**
   * A DR secondary: the source whose bridge made this exchange here (its URL without the
   * user, as `tandem dr status` shows it), so the source's delete of it deletes it here,
   * and of no exchange this site had of its own (record code 27). Absent on every other
   * exchange, and on one a bridge made before the mark existed: those are the site's own.
   */
  madeByDr?: string;
}

/** What the broker keeps of a message: its encoded bytes plus the header fields it acts on. */
export interface MessageRecord {
  /** Broker-wide unique id, assigned by the broker that first accepted it. */
  id: number;
  /** The message exactly as the sender encoded it (all sections). */
  bytes: Buffer;
  /** Length of the header section at the start of `bytes` (0 if none). */
  headerLength: number;
  durable: boolean;
  priority: number;
  /** Absolute expiry, ms since epoch; 0 = never. */
  expiresAt: number;
  /** Deliveries that ended without acceptance (redeliveries). */
  deliveryCount: number;
  /**
   * The key it was routed by, which its dead letter is routed by: properties.subject, or
   * the key of the `exchange/key` address it was sent to (routed-by.ts). Not read for
   * anything else (a selector's JMSType is read from `bytes`).
   */
  subject: string | undefined;
}

export type Change =
  | { kind: 'queue-declare'; name: string; settings: QueueSettings }
  | { kind: 'queue-delete'; name: string }
  | { kind: 'exchange-declare'; name: string; type: ExchangeType; settings: ExchangeSettings }
  | { kind: 'exchange-delete'; name: string }
  | { kind: 'bind'; exchange: string; queue: string; key: string }
  | { kind: 'unbind'; exchange: string; queue: string; key: string }
  /**
   * `dedup`: the message's key entered the queue's duplicate-detection window with it.
   * `restored`: a message a failed commit had accepted, given back to its queue under
   * its own id (Broker.withdraw), or one moved from another queue (tandem queue move,
   * a new id): not a new publish, so a DR copy whose window holds its key (from its
   * first copy) takes it rather than drop it as a duplicate.
   * Set only to true (record code 21; without it an enqueue is written as code 14).
   */
  | { kind: 'enqueue'; queue: string; message: MessageRecord; dedup?: DedupStamp; restored?: boolean }
  | { kind: 'dequeue'; queue: string; id: number }
  /** A committed transaction: its enqueues and dequeues, applied as one unit. */
  | { kind: 'transaction'; changes: Array<Extract<Change, { kind: 'enqueue' | 'dequeue' }>> }
  /**
   * An auto-delete queue got its first consumer (a browser counts): from now on the
   * departure of its last consumer deletes it, after its delay, here or on whichever
   * broker serves it after a restart or a failover. Logged once per queue (per
   * declare: a queue made again under the name starts without it), so it costs
   * nothing per message. Without it a serving broker keeps the queue: it is waiting
   * for its first consumer (record code 23).
   */
  | { kind: 'queue-consumed'; name: string }
  /** An existing queue's duplicate-detection settings changed (`tandem queue set`). */
  | { kind: 'queue-dedup'; name: string; dedupWindow: number; dedupTtlMs: number; dedupKey: string }
  /**
   * A queue's duplicate-detection window as rows (DedupWindow.rows): an HA
   * snapshot carries it, so a new backup refuses what the primary refused.
   */
  | { kind: 'dedup-keys'; queue: string; rows: Buffer }
  /**
   * Keys taken back out of a queue's window (digests, 16 bytes each): the publish or
   * commit that brought them in was refused after its record went out (its journal
   * write failed), so a resend must get in wherever the key went, a backup promoted
   * later included, and must not meet it after a restart.
   * `ids`: the refused messages of a queue that keeps no window here (so took no
   * key from them), named because a DR copy of it keeps one and read each one's key
   * from the message: the copy takes those keys out too, and its resend gets in
   * there after an activation. Set only on a cluster a DR copy follows (record code
   * 22; without it the change is written as code 20).
   */
  | { kind: 'dedup-forget'; queue: string; keys: Buffer; ids?: number[] }
  /** A new cluster epoch (raised at each HA promotion). */
  | { kind: 'epoch'; epoch: number }
  /**
   * DR source: a DR copy first attached to this cluster (`since`, ms). From then on
   * every broker of the cluster keeps the DR window of recent changes, across
   * restarts and failovers; before it, none does (the window costs ~16% of a
   * non-durable message's CPU, for nobody).
   */
  | { kind: 'dr-followed'; since: number }
  /**
   * DR secondary: changes copied from another cluster's primary, applied as one
   * unit together with the source position (`lsn`, source clock `time`) they
   * bring each of `queues` to, so a restart never loses or repeats one.
   */
  | { kind: 'dr-transaction'; queues: string[]; lsn: number; time: number; changes: Array<Extract<Change, { kind: 'enqueue' | 'dequeue' }>> }
  /** DR secondary: a queue's DR configuration and state (`removed` forgets it). */
  | { kind: 'dr-queue'; queue: string; source: string; mode: DrMode; state: DrQueueState }
  /**
   * DR: a queue's role in its DR pair (what `dr-queue` says, plus the round trip's
   * state); supersedes `dr-queue`, which is only read from older journals.
   * `source` is the other site of the pair. `epoch` is raised at each activation
   * and switchover, so a stale side can never overwrite a newer one. On a side that
   * was activated: `divergence` is the other site's last change applied before
   * activation, `since` this broker's own LSN at activation (the other site follows
   * from there), `idFloor` the first message id this broker gave out after it.
   * `fill`: a reattached copy still has to get what the new source holds from
   * before its activation and it lacks. `exchanges`: the topology filter.
   */
  | DrRoleChange;

export interface DrRoleChange {
  kind: 'dr-role';
  queue: string;
  source: string;
  mode: DrMode;
  state: DrQueueState;
  epoch: number;
  divergence: number;
  since: number;
  idFloor: number;
  fill: boolean;
  /** Passive copy: which exchanges binding it are copied too (comma-separated names, `*` wildcards; '' none). */
  exchanges: string;
  /** Activated side: the old source was unreachable at activation and is to be told, when it is back, that it serves the queue no more. */
  tell: boolean;
}

/** enqueue-and-dequeue mirrors the source queue; enqueue-only copies its enqueues only. */
export type DrMode = 'enqueue-and-dequeue' | 'enqueue-only';
/**
 * passive: fed by the bridge, refused to clients; active: activated, a normal queue
 * (and the source its pair's other site may follow); fenced: a source handing over
 * in a switchover (refuses clients); diverged: a source that learned its pair's other
 * site was activated (refuses clients until `tandem dr reattach`).
 */
export type DrQueueState = 'passive' | 'active' | 'removed' | 'fenced' | 'diverged';
export const DR_STATES: readonly DrQueueState[] = ['passive', 'active', 'removed', 'fenced', 'diverged'];
export const DR_MODES: readonly DrMode[] = ['enqueue-and-dequeue', 'enqueue-only'];

export type ChangeKind = Change['kind'];

/** A change with its place in the log. */
export interface LoggedChange {
  lsn: number;
  change: Change;
  /** Whether the journal must keep it (durable object, or durable message on a durable queue). */
  durable: boolean;
}

/** Something that reads the log as it is written: the journal, the replication source. */
export interface ChangeSink {
  /** Called synchronously, in LSN order, for every change. */
  append(entry: LoggedChange): void;
}
