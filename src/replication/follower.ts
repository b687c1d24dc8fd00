// The backup's side of replication: find the primary among ha-brokers-url
// (other backups refuse the replication link, and we skip ourselves; every
// address is tried at once, so one that lost power delays nothing), open the
// stream from our log position, and hand every message, in order, to the host,
// acknowledging each once the host says it is safe. When the primary goes we
// keep our data and keep looking.
import type { Logger } from '../ops/log.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import type { BrokerEndpoint } from '../ha/brokers-url.js';
import type { LinkTls } from '../admin/link-tls.js';
import { PeerSearch } from '../peer-link/search.js';
import type { InboundDelivery, PeerDialer, PeerMessage } from '../peer-link/transport.js';
import { EngineDialer } from '../peer-link/engine-dialer.js';
import { peerWholeNumber } from '../peer-link/peer-values.js';
import { PROMISED_EPOCH_PROPERTY } from '../ha/epoch-promise.js';
import { DROPPED, FATAL, Props, REPLICATION_ADDRESS, decodeStreamMessage, type StreamMessage } from './protocol.js';

export interface FollowerHost {
  endpoints: BrokerEndpoint[];
  user: string | undefined;
  password: string | undefined;
  mechanism: 'PLAIN' | 'ANONYMOUS' | 'EXTERNAL';
  /** Set for an amqps: ha-brokers-url: every link is TLS, the primary's certificate verified. */
  tls: LinkTls | undefined;
  brokerId: string;
  instanceId: string;
  replicate: string;
  heartbeatMs: number;
  log: Logger;
  /**
   * Our log position and epoch, sent when we attach; `journalLsn`: the newest change in
   * our journal; `promisedEpoch`: the epoch a promotion promised us (0: none), which
   * tells a primary below it that it is stale (ha/epoch-promise.ts).
   */
  position(): { lsn: number; epoch: number; journalLsn: number; promisedEpoch?: number };
  /**
   * Why a primary that states this epoch in its attach is not to be followed
   * (undefined: follow it). A backup that was promised a newer epoch follows no older
   * primary: it keeps looking until the promised one answers.
   */
  refusesPrimary?(epoch: number): string | undefined;
  /**
   * Apply one stream message. Resolves once it is applied (the next message may
   * then be applied) with `safe`, which resolves once it may be acknowledged
   * (journaled): applies stay in order while journal syncs overlap.
   */
  handle(m: StreamMessage): Promise<{ safe: Promise<void> }>;
  /** Attached to the primary at this address (catch-up starts). */
  onFollowing(address: string): void;
  /** Lost the primary (or never found it). `dropped`: the primary dropped us, so we may lack what it settled since. */
  onLost(reason: string, dropped: boolean): void;
  /** The primary refused us for a reason retrying cannot fix (e.g. ha-replicate mismatch). */
  onFatal(reason: string): void;
  /** How brokers are dialled (tests: a scripted link); default tandem's engine. */
  dialer?: PeerDialer;
}

/**
 * A TCP handshake that has not completed in this time is a host that is down or
 * unreachable (see src/util/tcp-reach.ts). Retrying soon costs little: every
 * address is searched on its own, so a dead one only delays itself.
 */
const HANDSHAKE_DEADLINE_MS = 500;

/**
 * Transfers of one primary received and not yet acknowledged (applied, and journaled
 * if durable) that a backup holds. A primary keeps at most 16 batches in flight
 * (source.ts, MAX_UNACKED), and heartbeats only when nothing is; its control messages
 * (membership, dr-credentials) go out beside them unbounded, but one per event: a
 * backup flapping for minutes while this one journals a long snapshot makes
 * hundreds, so the bound is far above that (a drop then would restart the
 * snapshot). The link's credit is topped up as transfers arrive, so it bounds
 * nothing here. A primary past this is not waiting for our acknowledgements: it is
 * dropped, or every transfer it sent would wait in memory (200,000 heartbeats held
 * 107 MB; 4,096 of them hold about 2 MB).
 */
export const MAX_UNACKNOWLEDGED = 4096;

export class Follower {
  private readonly search: PeerSearch;
  private chain: Promise<void> = Promise.resolve();
  /** Transfers received and not yet answered, of the primary followed in `generation`. */
  private unanswered = { generation: -1, count: 0 };
  private stopped = false;
  /** Losses of the primary's link: logged once a minute, with how many more there were. */
  private readonly lossLog = new LogThrottle(60_000);
  lastError: string | undefined;
  /** The epoch the followed primary stated in its attach (undefined: not following). */
  private followedEpoch: number | undefined;

  constructor(private readonly host: FollowerHost) {
    const mechanism = host.mechanism;
    this.search = new PeerSearch({
      dialer: host.dialer ?? new EngineDialer(`tandem-backup-${host.instanceId}`),
      endpoints: host.endpoints,
      log: host.log,
      dial: {
        tls: host.tls,
        credentials:
          mechanism === 'PLAIN' ? { mechanism, user: host.user, password: host.password } : mechanism === 'EXTERNAL' ? { mechanism, orAnonymous: false } : { mechanism },
        idleTimeoutMs: host.heartbeatMs,
        handshakeDeadlineMs: HANDSHAKE_DEADLINE_MS,
        properties: { [Props.haAdmin]: true, [Props.instance]: host.instanceId, [Props.brokerId]: host.brokerId },
      },
      self: { property: Props.instance, value: host.instanceId },
      hello: () => {
        const pos = host.position();
        return {
          address: REPLICATION_ADDRESS,
          creditWindow: 64,
          properties: {
            [Props.brokerId]: host.brokerId,
            [Props.lsn]: pos.lsn,
            [Props.journalLsn]: pos.journalLsn,
            [Props.epoch]: pos.epoch,
            [Props.replicate]: host.replicate,
            // Only when there is one: the hello of a broker without a promise stays what it was.
            ...(pos.promisedEpoch ? { [PROMISED_EPOCH_PROPERTY]: pos.promisedEpoch } : {}),
          },
        };
      },
      // A primary names the address it serves; anything else is not serving us (yet).
      judge: (remote) => {
        if (typeof remote.source?.address !== 'string') return { serving: false, reason: 'attached without a replication source', graceMs: this.answerTimeoutMs };
        // Let go at once (graceMs 0): this primary is older than a promotion we were told of.
        const refusal = host.refusesPrimary?.(primaryEpoch(remote.properties));
        return refusal === undefined ? { serving: true } : { serving: false, reason: refusal, graceMs: 0 };
      },
      // Little: a new primary holds its publishers' settlements until the backups that
      // were ready are back, so this wait is paid by every failover.
      retryMs: Math.min(200, host.heartbeatMs / 4),
      // Ourselves (ha-brokers-url lists this broker too): looked at again only now and then.
      selfRetryMs: Math.max(1000, host.heartbeatMs),
      // Generous: a loaded primary may take a while to answer; giving up early only restarts the work.
      answerTimeoutMs: this.answerTimeoutMs,
      // The primary sends something at least every half heartbeat interval (AMQP empty
      // frames at half our idle-time-out, stream heartbeats): two intervals of silence is
      // a primary that lost power, which sends nothing, not even a FIN.
      silenceLimitMs: 2 * host.heartbeatMs,
      fatalCondition: FATAL,
      names: { link: 'replication link', peer: 'primary' },
      tlsOption: 'ha-tls',
      events: {
        refused: (address, reason) => {
          if (!this.stopped) this.lastError = `${address}: ${reason}`;
        },
        following: (link) => {
          this.lastError = undefined;
          this.followedEpoch = primaryEpoch(link.remote.properties);
          host.log.info({ primary: link.address, lsn: link.hello.properties[Props.lsn], epoch: link.hello.properties[Props.epoch], primaryEpoch: this.followedEpoch }, 'following the primary');
          host.onFollowing(link.address);
        },
        message: (m, delivery) => this.onMessage(m, delivery),
        lost: (reason, error) => {
          // Said once a minute at most (a primary that comes and goes would fill the log):
          // a ready backup stays ready, so without this line the loss shows only in status.
          const held = this.lossLog.admit('lost');
          if (held !== undefined && !this.stopped) host.log.warn({ reason, ...suppressedField(held) }, 'lost the link to the primary; looking for it again');
          this.lost(reason, error?.condition === DROPPED);
        },
        fatal: (reason) => host.onFatal(reason),
      },
    });
  }

  private get answerTimeoutMs(): number {
    return Math.max(5000, 5 * this.host.heartbeatMs);
  }

  /** The primary followed: its address. */
  get primaryAddress(): string | undefined {
    return this.search.address;
  }

  /** The epoch the followed primary stated in its attach; undefined when not following. */
  get primaryEpoch(): number | undefined {
    return this.search.isFollowing ? this.followedEpoch : undefined;
  }

  /** Let go of the followed primary (it is older than a promotion we were told of) and look again. */
  leave(reason: string): void {
    if (this.stopped || !this.search.isFollowing) return;
    this.drop(reason);
  }

  /** When the primary's connection last sent anything (heartbeats included); undefined when not following. */
  get lastHeardAt(): number | undefined {
    return this.search.lastHeardAt;
  }

  start(): void {
    this.stopped = false;
    this.search.start();
  }

  /** Stop following (promotion, shutdown). Resolves once in-flight applies are done. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.search.stop();
    await this.chain.catch(() => undefined);
  }

  private onMessage(message: PeerMessage, delivery: InboundDelivery): void {
    let m: StreamMessage;
    try {
      m = decodeStreamMessage(message);
    } catch (err) {
      this.host.log.error({ err: (err as Error).message }, 'undecodable replication message; reconnecting');
      delivery.reject({ condition: 'amqp:decode-error', description: (err as Error).message });
      this.drop('undecodable replication message');
      return;
    }
    // Acknowledgements go only on the link they came from: after a loss, the next
    // primary is told our position in the hello instead.
    const followed = this.search.generation;
    const current = () => this.search.isFollowing && this.search.generation === followed;
    if (this.unanswered.generation !== followed) this.unanswered = { generation: followed, count: 0 };
    const unanswered = this.unanswered;
    if (++unanswered.count > MAX_UNACKNOWLEDGED) {
      const reason = `the primary sent more than ${MAX_UNACKNOWLEDGED} transfers that were not yet acknowledged`;
      this.host.log.error({ kind: m.kind }, `${reason}; reconnecting`);
      delivery.reject({ condition: 'amqp:resource-limit-exceeded', description: reason });
      this.drop(reason);
      return;
    }
    const answered = () => void unanswered.count--;
    const failed = (err: Error) => {
      answered();
      this.host.log.error({ err: err.message, kind: m.kind }, 'could not apply a replicated change; reconnecting');
      if (current()) {
        delivery.reject({ condition: 'amqp:internal-error', description: err.message });
        this.drop(`apply failed: ${err.message}`);
      }
    };
    this.chain = this.chain.then(
      () =>
        this.host.handle(m).then(({ safe }) => {
          safe.then(() => {
            answered();
            if (current()) delivery.accept();
          }, failed);
        }, failed),
    );
  }

  /** We found the stream bad: let go of the primary, as if it had gone. */
  private drop(reason: string): void {
    this.search.unfollow();
    this.lost(reason, false);
  }

  private lost(reason: string, dropped: boolean): void {
    this.followedEpoch = undefined;
    if (this.stopped) return;
    this.lastError = reason;
    this.host.onLost(reason, dropped);
    // Let in-flight applies finish before attaching again from our new position.
    void this.chain.finally(() => {
      if (!this.stopped) this.search.start();
    });
  }
}

/** The epoch a primary states in its attach; one it states malformed, or not at all, reads as 0 (older than any promise). */
function primaryEpoch(properties: Record<string, unknown>): number {
  try {
    return peerWholeNumber(properties[Props.epoch], 'epoch');
  } catch {
    return 0;
  }
}
