// A clustered broker's HA role: the state machine, following the primary as a
// backup, serving backups as the primary, promotion, client admission and the
// HA settlement gate. The cluster manager (Pacemaker, rgmanager, an operator)
// decides who is primary; this class makes that decision safe.
import { randomUUID } from 'node:crypto';
import { redact } from '../ops/secrets.js';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Refusal } from '../amqp/refusal.js';
import { ManagementClient } from '../admin/client.js';
import { endpointAddress, haIdentity, haLinkTls } from '../admin/peer-addresses.js';
import type { Broker } from '../broker/broker.js';
import type { LoggedChange, ReplicationLevel } from '../broker/changes.js';
import { TandemError } from '../broker/errors.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Settings } from '../ops/config.js';
import type { Logger } from '../ops/log.js';
import { Follower } from '../replication/follower.js';
import { rememberEncoding } from '../store/record-codec.js';
import { FATAL, Props, REPLICATION_ADDRESS, decodeBackupHello, type BackupHelloFields, type StreamMessage } from '../replication/protocol.js';
import type { PeerSender } from '../peer-link/transport.js';
import { ReplicationSource, type BackupStream } from '../replication/source.js';
import { parseBrokersUrl, type BrokersUrl } from './brokers-url.js';
import { clearJournalComplete, isJournalComplete, markJournalComplete } from './journal-marker.js';
import { EpochHistory, type EpochStart } from './epoch-history.js';
import { DIVERGED_DIR, listDiverged, readSnapshotPoint, writeSnapshotPoint, type DivergedInfo } from './diverged-store.js';
import { judgePromotion, readEpochHistory, type GuardRule } from './promotion-guard.js';
import { minReadyBackupsRisk, requiredReadyBackups } from './settle-quorum.js';
import { HaStateMachine, isPrimaryState, servesClients, type HaState } from './states.js';
import { probeTcp } from '../util/tcp-reach.js';
import { peerWholeNumber } from '../peer-link/peer-values.js';
import type { DrCredentials } from '../dr/credentials.js';
import { EpochPromise, MAX_HA_EPOCH, PROMISED_EPOCH_PROPERTY, PROMISE_OPERATION, type PromisedEpoch } from './epoch-promise.js';
import { promiseRound, type PromiseTarget } from './promise-round.js';
import type { BrokerEndpoint } from './brokers-url.js';
import { hostPort } from '../util/host-port.js';
import { monotonicNow } from '../util/monotonic-clock.js';

/**
 * A peer's host must complete a TCP handshake within 300 ms to count as visible: a
 * live host's kernel answers a SYN within a round trip, and three SYNs 100 ms apart
 * survive a lost packet (TCP alone would resend only after a second).
 */
const PEER_HANDSHAKE = { deadlineMs: 300, resendMs: 100 };

/**
 * How long a promotion waits for the brokers that just answered its HA-STATUS to take
 * its promise (epoch-promise.ts), and how long each broker is given: the guard's
 * answer window. A broker that does not answer holds the promotion up no longer.
 */
const PROMISE_ANSWER_MS = 3000;

/** How often a backup whose journal is incomplete looks whether it can mark it complete again. */
const MARK_COMPLETE_EVERY_MS = 2000;

export interface HaHost {
  broker: Broker;
  settings: Settings;
  log: Logger;
  /**
   * Replace the store with an empty journal (a snapshot is coming). `diverged`: the
   * old store holds changes the primary lacks: keep it in the diverged area.
   */
  resetStore(diverged?: DivergedInfo): Promise<void>;
  /** The snapshot is complete and durable: drop the store it replaced. */
  snapshotComplete(): void;
  whenDurable(lsn: number, cb: (err?: Error) => void): void;
  /** This process's id, also in the AMQP open frame of our listener. */
  instanceId: string;
  /** LSN of the data recovered at start (for elections before joining). */
  recoveredLsn: number;
  /**
   * Set when the journal holds every change up to this LSN (see journal-marker.ts):
   * the backup resumes the primary's log there (a diff, not a snapshot).
   */
  resumeLsn?: number;
  /** This broker became the primary: start serving (timers, expiry). */
  onPrimary(): void;
  /** Stop the process: stale primary, fatal misconfiguration, illegal transition. */
  fatal(reason: string): void;
  /** DR source passwords: the primary hands them to its backups, a backup keeps what it is handed. */
  drCredentials: DrCredentials;
}

export interface HaStatusReport {
  state: HaState;
  epoch: number;
  lsn: number;
  'brokers-url': string;
  'public-url': string | null;
  replicate: ReplicationLevel;
  'broker-id': string;
  primary: string | null;
  backups: Array<{ id: string; address: string; state: string; lsn: number; lag: number; 'lag-seconds': number; 'last-ack-ms-ago': number | null }>;
  /** On a backup: how long since the primary last sent anything (null when not following one). */
  'primary-heard-ms-ago': number | null;
  /** This broker's web console, if it serves one (the console links brokers to each other). */
  console: { port: number; tls: boolean } | null;
  /** On the primary: whether publishers' settlements wait, and why (null on a backup). */
  settlement: SettlementReport | null;
  'last-error': string | null;
  /** This process (so a broker can recognise itself among ha-brokers-url). */
  instance: string;
  /** Where each epoch began in this broker's log: what the promotion guard compares. */
  'epoch-history': EpochStart[];
  /**
   * The epoch a promotion promised this broker (epoch-promise.ts): it follows no primary
   * of an older one, and the next promotion goes above it. null: none.
   */
  'promised-epoch': number | null;
  /** Journals set aside on rejoining because they held changes the primary lacked (diverged-store.ts). */
  diverged: Array<{ name: string; path: string; epoch: number; from: number; through: number; 'set-aside-at': string; republished: number }>;
}

/** What the promotion guard checked, in the answer to HA-PROMOTE. */
export interface PromotionReport {
  rule: GuardRule | null;
  checked: string;
  newest: { epoch: number; lsn: number; where: string };
  candidate: { epoch: number; lsn: number };
}

interface PeerStatus {
  state: string;
  epoch?: number;
  lsn?: number;
  instance?: string;
  [k: string]: unknown;
}

/** One address of ha-brokers-url and its HA-STATUS (undefined: not visible). */
interface PeerAnswer {
  address: string;
  answer?: PeerStatus;
  /** An answer left out as malformed (malformedStatus): the state it claimed, if any. */
  malformedState?: unknown;
}

export interface SettlementReport {
  held: boolean;
  reason: string | null;
  'ready-backups': number;
  'min-ready-backups': number;
  'settle-alone': boolean;
  /** Settlements waiting now. */
  waiting: number;
}

export class HaManager {
  readonly sm: HaStateMachine;
  /** Set by the daemon once the web console listens: told to other brokers in HA-STATUS. */
  console: { port: number; tls: boolean } | undefined;
  readonly history: EpochHistory;
  readonly brokerId: string;
  readonly instanceId: string;
  private readonly url: BrokersUrl;
  private follower: Follower | undefined;
  private source: ReplicationSource | undefined;
  /** Ready backups the last primary told us about (what a new primary waits for). */
  private membership: string[] = [];
  /** Our stream position is valid only after a snapshot in this process. */
  private positionValid = false;
  private inSnapshot = false;
  /** A snapshot load replaced the recovered store in this process (complete once positionValid). */
  private storeReplaced = false;
  /** The replication source is off the change log while a snapshot loads. */
  private windowDetached = false;
  private promoting = false;
  /** stop() was called: a stopping primary settles nothing more (it no longer replicates). */
  private stopped = false;
  private recoveringTimer: NodeJS.Timeout | undefined;
  private staleTimer: NodeJS.Timeout | undefined;
  /**
   * Ready backups this primary lost (dropped, or back while their old link was still
   * open), and how many of those losses a finished stale check came after: a backup is
   * admitted only once every loss is covered (see admitsBackups).
   */
  private backupLosses = 0;
  private lossesChecked = 0;
  private lossCheck: Promise<void> | undefined;
  /** The ready backups at the last membership change (to tell a loss). */
  private lastReady: string[] = [];
  /** Whether the journal-complete marker is on disk (see journal-marker.ts). */
  private journalComplete: boolean;
  private completeTimer: NodeJS.Timeout | undefined;
  /** Ready backups a change needs before it is settled (ha-min-ready-backups of this cluster). */
  private readonly minReadyBackups: number;
  /** Last logged: settlements wait for want of ready backups. */
  private quorumShort = false;
  private readonly log: Logger;
  /** The epoch a promotion promised us (epoch-promise.ts). */
  private readonly promise: EpochPromise;
  /** The promised epoch whose refusal of an older primary was logged (logged once per promise). */
  private refusalLogged = 0;

  constructor(private readonly host: HaHost) {
    const s = host.settings;
    this.log = host.log;
    this.url = parseBrokersUrl(s.haBrokersUrl as string);
    this.history = new EpochHistory(s.dataDir);
    this.brokerId = loadBrokerId(s.dataDir);
    this.promise = new EpochPromise(s.dataDir, this.log);
    this.instanceId = host.instanceId;
    this.sm = new HaStateMachine('joining');
    this.positionValid = host.resumeLsn !== undefined;
    this.journalComplete = isJournalComplete(s.dataDir);
    this.minReadyBackups = requiredReadyBackups(s.haMinReadyBackups, this.url.endpoints.length);
    const risk = minReadyBackupsRisk(s.haMinReadyBackups, this.url.endpoints.length);
    if (risk) this.log.warn({ minReadyBackups: s.haMinReadyBackups, brokers: this.url.endpoints.length }, risk);
    this.sm.onChange((e) => {
      this.log.info({ from: e.from, to: e.to, reason: e.reason }, `HA state ${e.to}`);
    });
    // A password given to the primary (tandem dr add, a switchover) reaches the backups at once.
    host.drCredentials.onChange(() => {
      if (this.isPrimary) this.source?.sendToAll({ kind: 'dr-credentials', lsn: 0, credentials: host.drCredentials.all() });
    });
  }

  get state(): HaState {
    return this.sm.state;
  }

  get isPrimary(): boolean {
    return isPrimaryState(this.sm.state);
  }

  /** Settlement gate: on the primary, every ready backup must have the change. */
  readonly gate: SettlementGate = {
    whenSafe: (lsn, durable, cb) => {
      if (this.source && this.isPrimary && !this.stopped) return this.source.whenSafe(lsn, durable, cb);
      // A backup never settles publishers: it has none (clients are refused).
      cb(new TandemError('TANDEM_ERR_PRECONDITION', this.stopped ? 'this broker is stopping and no longer replicates' : 'this broker is not the primary'));
    },
  };

  start(): void {
    // A backup keeps the same window of recent changes a primary does, so when it is
    // promoted the other backups get only the changes they lack, not a snapshot.
    const s = this.host.settings;
    this.source = new ReplicationSource({
      broker: this.host.broker,
      defaultLevel: s.haReplicate,
      history: this.history,
      heartbeatMs: s.haHeartbeatIntervalMs,
      retainCount: s.haRetainChanges,
      retainBytes: s.haRetainBytes,
      minReadyBackups: this.minReadyBackups,
      log: this.log.child({ sub: 'replication' }),
      onMembership: (ready) => this.onMembership(ready),
    });
    this.host.broker.log.attach(this.source);
    if (this.host.resumeLsn !== undefined) this.source.resetWindow(this.host.resumeLsn);
    // Stopped after its log reached the promised epoch, before the promise was let go.
    this.keepPromiseIfReached();
    this.follow();
  }

  /**
   * Every ready backup has acknowledged every change so far (or there is none): what a
   * stopping primary waits for before it stops replicating.
   */
  replicated(): boolean {
    if (!this.source || !this.isPrimary) return true;
    return this.source.readyBackups.every((b) => b.acked >= this.source!.headLsn);
  }

  /** Stop following and serving backups; from now on nothing is settled (the gate refuses). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.recoveringTimer);
    clearInterval(this.staleTimer);
    clearInterval(this.completeTimer);
    await this.follower?.stop();
    this.source?.close();
  }

  // ---- admission -------------------------------------------------------------

  /**
   * Backups admit only admin connections that ask for admin access. The others
   * are told why and, when we know it, where the primary is (see src/amqp/refusal.ts
   * for why this is amqp:connection:forced and not amqp:connection:redirect).
   */
  admission(conn: { admin: boolean; properties: Record<string, unknown> }): Refusal | undefined {
    if (servesClients(this.sm.state)) return undefined;
    if (conn.admin && (conn.properties[Props.haAdmin] === true || conn.properties['tandem.admin'] === true)) return undefined;
    const primary = this.follower?.primaryAddress;
    const publicUrl = this.host.settings.haPublicUrl;
    const where = [
      primary ? `the primary is ${primary}` : 'the primary is not known yet',
      publicUrl ? `clients should connect to ${publicUrl}` : 'give clients every broker address (or the cluster VIP) with reconnect on',
    ].join('; ');
    const info: Record<string, unknown> = { 'tandem:ha-state': this.sm.state };
    const endpoint = primary ? parseBrokersUrl(primary).endpoints[0] : undefined;
    if (endpoint) Object.assign(info, { 'network-host': endpoint.host, port: endpoint.port });
    if (publicUrl) info['tandem:ha-public-url'] = publicUrl;
    return {
      // forced, not redirect: rhea and proton reconnect to their next address after it.
      condition: 'amqp:connection:forced',
      description: `this broker is an HA backup (${this.sm.state}) and does not serve clients; ${where}`,
      info,
    };
  }

  // ---- primary side -------------------------------------------------------

  /** A broker opened the replication link to us. */
  openReplication(sender: PeerSender, remoteAddress: string): BackupStream | undefined {
    const refuse = (condition: string, description: string) => {
      sender.refuse({ condition, description });
      return undefined;
    };
    if (!this.isPrimary || !this.source) return refuse('tandem:ha:not-primary', `this broker is ${this.sm.state}, not the primary`);
    let hello: BackupHelloFields;
    try {
      hello = decodeBackupHello(sender.hello);
    } catch (err) {
      this.log.warn({ address: remoteAddress, err: (err as Error).message }, 'replication link refused: malformed hello');
      return refuse('amqp:invalid-field', (err as Error).message);
    }
    if (hello.epoch > this.host.broker.epoch) {
      // Someone was promoted after us: we are a stale primary and must stop serving.
      this.host.fatal(`a backup of epoch ${hello.epoch} contacted this primary of epoch ${this.host.broker.epoch}: this primary is stale`);
      return refuse('tandem:ha:not-primary', 'this primary is stale');
    }
    let promised: number;
    try {
      promised = peerWholeNumber(sender.hello[PROMISED_EPOCH_PROPERTY], PROMISED_EPOCH_PROPERTY);
      if (promised > MAX_HA_EPOCH) throw new Error(`${PROMISED_EPOCH_PROPERTY} must be at most ${MAX_HA_EPOCH}, not ${promised}`);
    } catch (err) {
      this.log.warn({ address: remoteAddress, err: (err as Error).message }, 'replication link refused: malformed hello');
      return refuse('amqp:invalid-field', `replication hello: ${(err as Error).message}`);
    }
    if (promised > this.host.broker.epoch) {
      // A promotion to that epoch was allowed, and told this backup: we are a stale primary.
      this.host.fatal(`a backup was promised epoch ${promised} by a promotion, above this primary's epoch ${this.host.broker.epoch}: this primary is stale`);
      return refuse('tandem:ha:not-primary', 'this primary is stale');
    }
    if (hello.replicate !== this.host.settings.haReplicate) {
      return refuse(FATAL, `ha-replicate mismatch: the primary uses '${this.host.settings.haReplicate}', this backup '${hello.replicate}'; set the same value on every broker`);
    }
    // Back while its old link is still open: it lost us, as a dropped backup did.
    if ([...this.source.streams].some((st) => st.hello.brokerId === hello.brokerId && st.state === 'ready')) this.noteBackupLost();
    if (!this.admitsBackups()) {
      return refuse('tandem:ha:not-primary', 'this primary lost a backup and is checking that no other broker was promoted meanwhile; try again shortly');
    }
    sender.accept(REPLICATION_ADDRESS, { [Props.epoch]: this.host.broker.epoch });
    const stream = this.source.attach(sender, { brokerId: hello.brokerId, address: remoteAddress, lsn: hello.lsn, epoch: hello.epoch, journalLsn: hello.journalLsn });
    // DR passwords are not in the journal, so not in the stream of changes: they go on their own.
    const credentials = this.host.drCredentials.all();
    if (Object.keys(credentials).length > 0) stream.sendControl({ kind: 'dr-credentials', lsn: 0, credentials });
    return stream;
  }

  onReplicationGone(stream: BackupStream): void {
    this.source?.onLinkGone(stream);
  }

  /**
   * Promotion, only at the cluster manager's request, never while another live
   * primary is visible, and for a joining broker only as promotion-guard.ts allows
   * (`acceptDataLoss`: the operator's --accept-data-loss). The answer says what
   * the guard checked.
   */
  async promote(options: { acceptDataLoss?: boolean } = {}): Promise<HaStatusReport & { guard?: PromotionReport }> {
    if (this.isPrimary) return this.status();
    if (this.promoting) throw new TandemError('TANDEM_ERR_PRECONDITION', 'a promotion is already in progress');
    this.promoting = true;
    try {
      const state = this.sm.state;
      const answers = await this.brokerAnswers();
      const others = answers.filter((a): a is PeerAnswer & { answer: PeerStatus } => a.answer !== undefined && a.answer.instance !== this.instanceId);
      const primary = others.find((o) => o.answer.state === 'active' || o.answer.state === 'recovering');
      if (primary) throw new TandemError('TANDEM_ERR_PRECONDITION', `${primary.address} is already the primary (${primary.answer.state}); refusing to make two`);
      // One that says so in a malformed answer is a primary all the same.
      const claimed = answers.find((a) => a.malformedState === 'active' || a.malformedState === 'recovering');
      if (claimed) throw new TandemError('TANDEM_ERR_PRECONDITION', `${claimed.address} says it is the primary (${String(claimed.malformedState)}), in an answer that is malformed; refusing to make two`);
      const own = this.status();
      const verdict = judgePromotion(
        { state, epoch: own.epoch, lsn: own.lsn, history: own['epoch-history'] },
        answers.map((a) => (a.answer ? { address: a.address, state: a.answer.state, epoch: Number(a.answer.epoch ?? 0), lsn: Number(a.answer.lsn ?? 0), history: readEpochHistory(a.answer['epoch-history']) } : { address: a.address, state: 'unreachable', epoch: 0, lsn: 0 })),
        options.acceptDataLoss === true,
      );
      const report: PromotionReport = { rule: verdict.rule ?? null, checked: verdict.checked, newest: { epoch: verdict.newest.epoch, lsn: verdict.newest.lsn, where: verdict.newest.where }, candidate: verdict.candidate };
      if (!verdict.allowed) {
        this.log.warn({ state, ...report }, `promotion refused: ${verdict.checked}`);
        throw new TandemError('TANDEM_ERR_PRECONDITION', `promotion refused: ${verdict.checked}`);
      }
      // Above every epoch promised to anyone who answered (and to us): a backup holding a
      // promise follows no primary below it.
      const maxEpoch = Math.max(
        this.host.broker.epoch,
        this.history.latest?.epoch ?? 0,
        verdict.newest.epoch,
        this.promise.epoch,
        ...others.map((o) => Math.max(Number(o.answer.epoch ?? 0), promisedIn(o.answer))),
      );
      if (this.sm.state !== state) throw new TandemError('TANDEM_ERR_PRECONDITION', `state changed to ${this.sm.state} during promotion; try again`);
      await this.follower?.stop();
      this.follower = undefined;
      const epoch = maxEpoch + 1;
      if (!Number.isSafeInteger(epoch)) throw new TandemError('TANDEM_ERR_PRECONDITION', `promotion refused: the next epoch would be ${epoch}, past the largest the journal holds`);
      // Only now that the guard has allowed it (a refused promotion must leave no promise
      // anywhere, or the backups would refuse a healthy primary), and before we serve:
      // the backups that answered learn the new epoch, so none follows the old primary
      // again should it wake while we are frozen or cut off.
      const rival = await this.promiseEpoch(epoch, answers);
      if (rival) {
        // Another promotion to this epoch or above was allowed meanwhile (two at once):
        // serving now would make two primaries, or one stale at once. This one gives way.
        clearInterval(this.completeTimer);
        this.follow();
        this.log.warn({ epoch, rival }, `promotion refused: ${rival}`);
        throw new TandemError('TANDEM_ERR_PRECONDITION', `promotion refused: ${rival}; this broker goes on as a backup`);
      }
      // A primary's journal is never resumed from as a replica's is.
      clearInterval(this.completeTimer);
      this.forgetJournalComplete();
      const logged = this.host.broker.raiseEpoch(epoch);
      this.history.record(epoch, logged.lsn);
      this.keepPromiseIfReached();
      await new Promise<void>((resolve, reject) => this.host.whenDurable(logged.lsn, (err) => (err ? reject(err) : resolve())));
      this.becomePrimary();
      if (verdict.rule === 'accept-data-loss') {
        this.log.warn({ epoch, lsn: logged.lsn, mayLose: report.newest, candidate: report.candidate }, `PROMOTED WITH --accept-data-loss: ${verdict.checked}`);
      } else {
        this.log.info({ epoch, lsn: logged.lsn, expected: this.expectedBackups(), rule: verdict.rule, checked: verdict.checked }, 'promoted to primary');
      }
      return { ...this.status(), guard: report };
    } finally {
      this.promoting = false;
    }
  }

  /**
   * Tell every other broker of ha-brokers-url that a primary of `epoch` is coming
   * (epoch-promise.ts), best effort: the round waits only for the brokers that answered
   * this promotion's HA-STATUS, at most PROMISE_ANSWER_MS; the others are sent it in
   * the background. A broker that did not take the promise does not fail the promotion
   * (it is what a promotion was before promises: README, HA guarantees). What does: a
   * rival promotion seen meanwhile (returned, said in words), because another broker was
   * promised to us at this epoch or above, or answers as a primary of such an epoch.
   */
  private async promiseEpoch(epoch: number, answers: readonly PeerAnswer[]): Promise<string | undefined> {
    const promise: PromisedEpoch = { epoch, by: this.brokerId };
    const targets: PromiseTarget[] = [];
    for (const e of this.url.endpoints) {
      const address = hostPort(e.host, e.port);
      const answer = answers.find((a) => a.address === address)?.answer;
      if (answer?.instance === this.instanceId) continue;
      targets.push({ address, awaited: answer !== undefined, send: () => this.sendPromise(e, promise) });
    }
    const r = await promiseRound(targets, PROMISE_ANSWER_MS);
    this.log.info(
      { epoch, promised: r.took.map((t) => t.address), notPromised: r.missing.map((m) => `${m.address}: ${m.reason}`) },
      `promised epoch ${epoch} to ${r.took.length} of the ${targets.length} other brokers`,
    );
    if (this.promise.epoch >= epoch) return `broker ${this.promise.by} is being promoted to epoch ${this.promise.epoch} at the same time`;
    for (const { address, answer } of r.took) {
      const a = answer as Record<string, unknown> | null;
      const theirs = typeof a?.epoch === 'number' ? a.epoch : 0;
      if ((a?.state === 'active' || a?.state === 'recovering') && theirs >= epoch) return `${address} is already the primary of epoch ${theirs}`;
    }
    return undefined;
  }

  private async sendPromise(e: BrokerEndpoint, promise: PromisedEpoch): Promise<unknown> {
    if ((await probeTcp(e.host, e.port, PEER_HANDSHAKE)) !== 'answered') throw new Error('no TCP handshake');
    const s = this.host.settings;
    const client = await ManagementClient.connect(endpointAddress(e, this.url, haIdentity(s), haLinkTls(s)), {
      timeoutMs: PROMISE_ANSWER_MS,
      properties: { [Props.haAdmin]: true, [Props.instance]: this.instanceId },
    });
    try {
      return await client.request(PROMISE_OPERATION, 'broker', 'broker', { epoch: promise.epoch, by: promise.by });
    } finally {
      client.close();
    }
  }

  /**
   * HA-EPOCH-PROMISE: another broker was allowed a promotion to `p.epoch`. A backup keeps
   * the promise (and lets go of an older primary it follows); a primary below it is
   * stale and stops. `requestedBy`: who sent it, for the log.
   */
  receivePromise(p: PromisedEpoch, requestedBy: string): { state: HaState; epoch: number; 'promised-epoch': number | null } {
    const answer = () => ({ state: this.sm.state, epoch: this.host.broker.epoch, 'promised-epoch': this.promise.epoch > 0 ? this.promise.epoch : null });
    // Our own promotion's round reaching ourselves (an address of ours that did not answer HA-STATUS).
    if (p.by === this.brokerId) return answer();
    if (this.isPrimary) {
      if (p.epoch <= this.host.broker.epoch) return answer();
      const reason = `broker ${p.by} was allowed a promotion to epoch ${p.epoch}, above this primary's epoch ${this.host.broker.epoch}: this primary is stale`;
      this.host.fatal(reason);
      throw new TandemError('TANDEM_ERR_PRECONDITION', reason);
    }
    // Our log holds that epoch already (we follow its primary): nothing left to wait for.
    if (this.host.broker.epoch >= p.epoch) return answer();
    const followed = this.follower?.primaryEpoch;
    if (this.promise.raise(p)) {
      // Every promotion sends one: worth a warning only when it makes us leave a primary.
      this.log[followed === undefined ? 'info' : 'warn'](
        { promisedEpoch: p.epoch, by: p.by, requestedBy, followedEpoch: followed ?? null },
        `broker ${p.by} is being promoted to epoch ${p.epoch}: this broker follows no primary of an older epoch until one of epoch ${p.epoch} or newer answers`,
      );
      if (followed !== undefined && followed < p.epoch) this.follower?.leave(`promised epoch ${p.epoch} to broker ${p.by}, above the followed primary's epoch ${followed}`);
    }
    return answer();
  }

  /**
   * The promise is kept once our own log holds the promised epoch (the new primary's
   * epoch record reached us, or we raised it): not when we merely attach to that
   * primary, which may freeze before it sends anything, and a backup that let the
   * promise go then would follow the old primary again, its epoch still the old one.
   */
  private keepPromiseIfReached(): void {
    const promised = this.promise.epoch;
    if (promised === 0 || this.host.broker.epoch < promised) return;
    this.promise.keptBy(this.host.broker.epoch);
    this.log.info({ promisedEpoch: promised, epoch: this.host.broker.epoch }, `this broker's log reached epoch ${this.host.broker.epoch}: the promise of epoch ${promised} is kept`);
  }

  /** Why a primary of `epoch` is not followed (undefined: it may be): it is older than the epoch promised us. */
  private refusesPrimary(epoch: number): string | undefined {
    const promised = this.promise.epoch;
    if (epoch >= promised) return undefined;
    const reason = `this broker was promised epoch ${promised} (by broker ${this.promise.by}): it does not follow a primary of epoch ${epoch}`;
    // Once per promise: the search tries the old primary again every few hundred ms.
    if (this.refusalLogged !== promised) {
      this.refusalLogged = promised;
      this.log.warn({ promisedEpoch: promised, by: this.promise.by, primaryEpoch: epoch }, `${reason}; waiting for a primary of epoch ${promised} or newer`);
    }
    return reason;
  }

  /**
   * Each backup's lag for metrics (none unless primary): in changes, and in seconds as
   * the age of the oldest change it has not acknowledged (0 when it owes none).
   */
  backupLags(now = monotonicNow()): Array<{ id: string; state: string; changes: number; seconds: number; bytes: number | null }> {
    if (!this.source || !this.isPrimary) return [];
    return [...this.source.streams].map((s) => {
      const sent = s.oldestUnackedSentAt;
      return { id: s.hello.brokerId, state: s.state, changes: s.lag, seconds: sent === undefined ? 0 : Math.max(0, now - sent) / 1000, bytes: s.lagBytes };
    });
  }

  status(): HaStatusReport {
    // The backups' send and acknowledgement times are monotonic (outbound.ts).
    const now = monotonicNow();
    const backups = this.source && this.isPrimary
      ? [...this.source.streams].map((s) => {
          const sent = s.oldestUnackedSentAt;
          return {
            id: s.hello.brokerId,
            address: s.hello.address,
            state: s.state,
            lsn: s.acked,
            lag: s.lag,
            'lag-seconds': sent === undefined ? 0 : Math.max(0, now - sent) / 1000,
            'lag-bytes': s.lagBytes,
            'last-ack-ms-ago': s.lastAckedAt > 0 ? now - s.lastAckedAt : null,
          };
        })
      : [];
    const heard = this.isPrimary ? undefined : this.follower?.lastHeardAt;
    return {
      state: this.sm.state,
      epoch: this.host.broker.epoch,
      lsn: this.positionValid || this.isPrimary ? this.host.broker.log.lsn : this.host.recoveredLsn,
      'brokers-url': redact(this.host.settings.haBrokersUrl ?? ''),
      'public-url': this.host.settings.haPublicUrl ?? null,
      replicate: this.host.settings.haReplicate,
      'broker-id': this.brokerId,
      primary: this.isPrimary ? 'self' : (this.follower?.primaryAddress ?? null),
      backups,
      settlement: this.source && this.isPrimary ? this.settlementReport(this.source) : null,
      'last-error': this.follower?.lastError ?? null,
      'primary-heard-ms-ago': heard === undefined ? null : now - heard,
      console: this.console ?? null,
      instance: this.instanceId,
      'epoch-history': [...this.history.all],
      'promised-epoch': this.promise.epoch > 0 ? this.promise.epoch : null,
      diverged: listDiverged(this.host.settings.dataDir).map((d) => ({ name: d.name, path: d.path, epoch: d.epoch, from: d.after + 1, through: d.through, 'set-aside-at': d.setAsideAt, republished: d.republished })),
    };
  }

  /** On the primary: whether publishers' settlements wait now (tandem_ha_settlements_held); false elsewhere. */
  get settlementsHeld(): boolean {
    return this.source !== undefined && this.isPrimary && this.settlementReport(this.source).held;
  }

  private settlementReport(source: ReplicationSource): SettlementReport {
    const q = source.quorum;
    const recovering = this.sm.state === 'recovering';
    const reason = recovering
      ? `recovering: waiting for the backups that were ready (${this.expectedBackups().join(', ')}), at most ha-backup-timeout`
      : q.short
        ? `${q.ready} of the ${q.needed} ready backup${q.needed === 1 ? '' : 's'} ha-min-ready-backups needs: publishers wait until one is ready (tandem ha settle-alone lifts this once the missing brokers are known to be stopped)`
        : null;
    return { held: reason !== null, reason, 'ready-backups': q.ready, 'min-ready-backups': q.needed, 'settle-alone': q.settleAlone, waiting: q.waiting };
  }

  /**
   * Settle without the ready backups ha-min-ready-backups asks for, until enough are
   * ready again (or `on` is false): for a cluster manager or an operator who knows
   * the missing brokers are stopped (fenced, powered off). A new primary in
   * recovering stops waiting for the backups that were ready too.
   */
  settleAlone(on: boolean, requestedBy: string): HaStatusReport {
    if (!this.source || !this.isPrimary) {
      throw new TandemError('TANDEM_ERR_PRECONDITION', `this broker is ${this.sm.state}, not the primary: only the primary settles publishers' messages`);
    }
    const q = this.source.quorum;
    if (on) {
      this.log.warn(
        { requestedBy, readyBackups: q.ready, minReadyBackups: q.needed, waiting: q.waiting },
        'settling alone on request (tandem ha settle-alone): settlements no longer wait for ha-min-ready-backups until enough backups are ready again; if a missing backup is alive and is promoted, what this primary settles meanwhile is lost',
      );
      this.source.settleAlone(true);
      if (this.sm.state === 'recovering') this.goActive(`settle-alone requested by ${requestedBy}`);
    } else if (q.settleAlone) {
      this.log.warn({ requestedBy }, 'settle-alone withdrawn: settlements wait for ha-min-ready-backups again');
      this.source.settleAlone(false);
    }
    this.reviewQuorum();
    return this.status();
  }

  /**
   * Log when settlements start or stop waiting for ready backups; end settle-alone once
   * it is not needed. Not in recovering: that state holds every settlement anyway, and
   * says so; the review follows when it ends.
   */
  private reviewQuorum(): void {
    if (!this.source || this.sm.state !== 'active') return;
    let q = this.source.quorum;
    if (q.settleAlone && q.ready >= q.needed) {
      this.source.settleAlone(false);
      this.log.warn({ readyBackups: q.ready, minReadyBackups: q.needed }, 'settle-alone ended: enough backups are ready again, settlements wait for ha-min-ready-backups again');
      q = this.source.quorum;
    }
    if (q.short === this.quorumShort) return;
    this.quorumShort = q.short;
    if (q.short) {
      this.log.warn(
        { readyBackups: q.ready, minReadyBackups: q.needed, waiting: q.waiting },
        `settlements held: ${q.ready} of the ${q.needed} ready backup${q.needed === 1 ? '' : 's'} ha-min-ready-backups needs; publishers wait until a backup is ready (tandem ha settle-alone lifts the hold once the missing brokers are known to be stopped)`,
      );
    } else {
      this.log.info({ readyBackups: q.ready, minReadyBackups: q.needed, waiting: q.waiting }, 'settlements resume: enough backups are ready');
    }
  }

  // ---- backup side ------------------------------------------------------------

  /**
   * The newest change in the journal: what the primary compares with its own log to
   * find changes only this broker has. 0 while the store is a partial snapshot.
   */
  private journalLsn(): number {
    if (this.positionValid || this.isPrimary) return this.host.broker.log.lsn;
    return this.storeReplaced ? 0 : this.host.recoveredLsn;
  }

  /** What to note with the store a snapshot replaces, when the primary says it holds changes the primary lacks. */
  private divergedInfo(m: StreamMessage): DivergedInfo | undefined {
    if (m.divergedAfter === undefined || m.divergedThrough === undefined || !(m.divergedThrough > m.divergedAfter)) return undefined;
    return {
      epoch: this.host.broker.epoch,
      after: m.divergedAfter,
      through: m.divergedThrough,
      primaryEpoch: m.epoch ?? 0,
      reason: m.reason ?? '',
      setAsideAt: new Date().toISOString(),
      snapshotPoint: readSnapshotPoint(this.host.settings.dataDir),
      history: [...this.history.all],
    };
  }

  private follow(): void {
    const s = this.host.settings;
    this.follower = new Follower({
      endpoints: this.url.endpoints,
      user: s.haUsername ?? this.url.user,
      password: s.haPassword ?? this.url.password,
      mechanism: s.haMechanism,
      tls: this.url.tls ? haLinkTls(s) : undefined,
      brokerId: this.brokerId,
      instanceId: this.instanceId,
      replicate: s.haReplicate,
      heartbeatMs: s.haHeartbeatIntervalMs,
      log: this.log.child({ sub: 'replication' }),
      position: () => ({ lsn: this.positionValid ? this.host.broker.log.lsn : 0, epoch: this.host.broker.epoch, journalLsn: this.journalLsn(), promisedEpoch: this.promise.epoch }),
      refusesPrimary: (epoch) => this.refusesPrimary(epoch),
      handle: (m) => this.handle(m),
      onFollowing: () => this.transition('catchup', 'attached to the primary'),
      onLost: (reason, dropped) => {
        // A ready backup that lost the primary stays ready: it has everything the primary
        // confirmed. One the primary dropped does not (the primary settled without it).
        if (this.sm.state === 'catchup' || (dropped && this.sm.state === 'ready')) this.transition('joining', reason);
      },
      onFatal: (reason) => this.host.fatal(reason),
    });
    this.follower.start();
    this.completeTimer = setInterval(() => this.maybeMarkJournalComplete(), MARK_COMPLETE_EVERY_MS);
    this.completeTimer.unref();
  }

  /**
   * The marker says the journal plus the primary's log after its newest record is
   * everything this backup holds. It must go, synced, before the journal skips a
   * change (a non-durable one) that a restart would need.
   */
  private forgetJournalComplete(): void {
    if (!this.journalComplete) return;
    clearJournalComplete(this.host.settings.dataDir);
    this.journalComplete = false;
  }

  /**
   * Mark the journal complete again once this backup holds nothing non-durable: a
   * restart then resumes from the journal's newest change and is sent only the
   * changes after it (the skipped ones among them). Checked now and then, not per
   * change: each mark and clear is a synced directory update.
   */
  private maybeMarkJournalComplete(): void {
    if (this.journalComplete || !this.positionValid || this.inSnapshot || this.promoting || this.isPrimary) return;
    if (this.host.broker.holdsNonDurableState()) return;
    markJournalComplete(this.host.settings.dataDir);
    this.journalComplete = true;
  }

  /** Apply a stream message in order; `safe` says when it may be acknowledged. */
  private async handle(m: StreamMessage): Promise<{ safe: Promise<void> }> {
    const done = { safe: Promise.resolve() };
    const broker = this.host.broker;
    switch (m.kind) {
      case 'snapshot-begin': {
        this.log.info({ lsn: m.lsn, epoch: m.epoch, reason: m.reason }, 'receiving a snapshot from the primary');
        // A store that is itself a snapshot cut short holds nothing of its own to keep.
        const diverged = this.storeReplaced && !this.positionValid ? undefined : this.divergedInfo(m);
        if (diverged) {
          this.log.warn(
            { epoch: diverged.epoch, from: diverged.after + 1, through: diverged.through, primaryEpoch: diverged.primaryEpoch },
            `this broker's journal holds changes the primary lacks (epoch ${diverged.epoch}, LSN ${diverged.after + 1} to ${diverged.through}); they may have been confirmed to clients: keeping them in ${join(this.host.settings.dataDir, DIVERGED_DIR)}`,
          );
        }
        this.inSnapshot = true;
        this.positionValid = false;
        this.storeReplaced = true;
        // A restart during the load goes back to the old store, for a snapshot again.
        this.forgetJournalComplete();
        // Our window of recent changes is reset when the snapshot is in: feeding it the
        // snapshot's records on the way (copying each one) was a tenth of the load's cost.
        this.detachWindow();
        await this.host.resetStore(diverged);
        return done;
      }
      case 'changes': {
        const entries = m.entries ?? [];
        // The epoch records of a batch reach the history file in one write.
        const lastDurable = this.history.batch(() => this.applyBatch(m, entries));
        this.keepPromiseIfReached();
        // Journal syncs overlap with the next applies; the acknowledgement waits for its own.
        return lastDurable > 0 ? { safe: durable(this.host, lastDurable) } : done;
      }
      case 'snapshot-end': {
        // Without a snapshot-begin our state was never reset: taking it as a snapshot
        // point would put the primary's position on a state that is not its snapshot.
        if (!this.inSnapshot) throw new Error('the primary sent snapshot-end without a snapshot being loaded');
        const epoch = m.epoch ?? 0;
        broker.apply({ lsn: m.lsn, change: { kind: 'epoch', epoch }, durable: true });
        this.history.replace(epoch > 0 ? [{ epoch, startLsn: 0 }] : []);
        await durable(this.host, m.lsn);
        this.keepPromiseIfReached();
        // Its records are numbered 1..N below this point: a later set-aside must know.
        writeSnapshotPoint(this.host.settings.dataDir, m.lsn);
        this.inSnapshot = false;
        this.positionValid = true;
        // Snapshot records are numbered 1..N, not primary LSNs: never serve them as a diff.
        this.source?.resetWindow(m.lsn);
        this.attachWindow();
        this.host.snapshotComplete();
        // Only now: until snapshotComplete() a restart goes back to the store this one replaced.
        this.maybeMarkJournalComplete();
        this.log.info({ lsn: m.lsn, queues: broker.queues.size }, 'snapshot loaded');
        return done;
      }
      case 'ready':
        // Not while a snapshot loads: the store holds part of one, and ready would make
        // this broker promotable and its next hello ask for a diff from that part.
        if (this.inSnapshot) throw new Error('the primary sent ready while a snapshot was being loaded');
        this.positionValid = true;
        if (this.sm.state === 'catchup') this.transition('ready', 'caught up with the primary');
        return done;
      case 'membership':
        this.membership = (m.ready ?? []).filter((id) => id !== this.brokerId);
        return done;
      case 'heartbeat':
        return done;
      case 'dr-credentials':
        // Kept as this broker's own (0600, synced), for when it is promoted.
        this.host.drCredentials.setAll(m.credentials ?? {});
        return done;
    }
    return done;
  }

  /** Apply a batch of the primary's changes; the LSN of the last that must be durable before it is acknowledged (0: none). */
  private applyBatch(m: StreamMessage, entries: NonNullable<StreamMessage['entries']>): number {
    const broker = this.host.broker;
    let lastDurable = 0;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      // A backup journals what the primary journals: non-durable messages, queues and
      // exchanges stay in memory, as on the primary (journaling them cost a backup a
      // third of its CPU). Epochs and DR state are recorded durable at the primary.
      const entry: LoggedChange = { lsn: e.lsn, change: e.change, durable: e.durable };
      if (e.lsn <= broker.log.lsn) continue; // already applied (a resent batch)
      if (journalSkipsPart(entry) && !this.inSnapshot) this.forgetJournalComplete();
      // Journal, HA window and DR window take the primary's bytes instead of encoding the change again.
      const record = m.records?.[i];
      if (record) rememberEncoding(entry, record);
      broker.apply(entry);
      if (e.change.kind === 'epoch') this.history.record(e.change.epoch, e.lsn);
      if (e.durable || this.inSnapshot) lastDurable = e.lsn;
    }
    return lastDurable;
  }

  // ---- becoming primary --------------------------------------------------------

  private becomePrimary(): void {
    const s = this.host.settings;
    this.positionValid = true;
    // Before it serves: the old primary may have delivered any message held now (counts are not replicated).
    this.host.broker.markHeldInDoubt();
    if (this.windowDetached) {
      // Promoted with a snapshot load cut short: the window serves diffs from here on only.
      this.source?.resetWindow(this.host.broker.log.lsn);
      this.attachWindow();
    }
    const expected = this.expectedBackups();
    this.transition('recovering', 'promoted by the cluster manager');
    this.host.onPrimary();
    if (expected.length === 0) {
      this.transition('active', 'no backups were ready before the promotion');
    } else {
      // Hold publishers' settlements until the backups that were ready are ready again.
      this.source!.hold(true);
      this.recoveringTimer = setTimeout(() => this.goActive(`ha-backup-timeout (${s.haBackupTimeoutMs} ms) passed`), s.haBackupTimeoutMs);
      this.recoveringTimer.unref();
    }
    this.reviewQuorum();
    this.staleTimer = setInterval(() => void this.checkStale(), Math.max(1000, s.haHeartbeatIntervalMs * 2));
    this.staleTimer.unref();
  }

  /** Stop feeding the window of recent changes (a snapshot is loading; see snapshot-begin). */
  private detachWindow(): void {
    if (!this.source || this.windowDetached) return;
    this.host.broker.log.detach(this.source);
    this.windowDetached = true;
  }

  private attachWindow(): void {
    if (!this.source || !this.windowDetached) return;
    this.host.broker.log.attach(this.source);
    this.windowDetached = false;
  }

  private expectedBackups(): string[] {
    return this.membership.filter((id) => id !== this.brokerId);
  }

  private onMembership(ready: string[]): void {
    if (this.isPrimary && this.lastReady.some((id) => !ready.includes(id))) this.noteBackupLost();
    this.lastReady = ready;
    this.reviewQuorum();
    if (this.sm.state !== 'recovering') return;
    const missing = this.expectedBackups().filter((id) => !ready.includes(id));
    if (missing.length === 0) this.goActive('every backup that was ready is ready again');
  }

  private goActive(reason: string): void {
    clearTimeout(this.recoveringTimer);
    if (this.sm.state !== 'recovering') return;
    this.transition('active', reason);
    this.source?.hold(false);
    this.reviewQuorum();
  }

  /**
   * A backup lost us, or we lost it: we may have been frozen or cut off long enough
   * for a cluster manager to promote another broker, and a backup that has not found
   * the new primary yet would follow us again and let us settle what the new primary
   * never gets (split brain). So a check that no broker is a newer primary starts now.
   */
  private noteBackupLost(): void {
    this.backupLosses++;
    this.checkAfterLoss();
  }

  /** Whether a backup may attach: every loss of a backup so far came before a finished stale check (else one is started). */
  private admitsBackups(): boolean {
    if (this.lossesChecked >= this.backupLosses) return true;
    this.checkAfterLoss();
    return false;
  }

  private checkAfterLoss(): void {
    if (this.lossCheck || !this.isPrimary) return;
    const covers = this.backupLosses;
    this.lossCheck = this.checkStale().then(
      (stale) => {
        this.lossCheck = undefined;
        // A stale primary is stopping (checkStale): it admits nobody while it does.
        if (stale) return;
        if (this.isPrimary) this.lossesChecked = Math.max(this.lossesChecked, covers);
        if (this.lossesChecked < this.backupLosses) this.checkAfterLoss();
      },
      () => (this.lossCheck = undefined),
    );
  }

  /** A primary that sees a newer primary is stale: it stops rather than split the brain. */
  private async checkStale(): Promise<boolean> {
    if (!this.isPrimary) return false;
    const others = await this.peerStates(2000);
    const newer = others.find((o) => (o.state === 'active' || o.state === 'recovering') && (o.epoch ?? 0) > this.host.broker.epoch);
    if (newer) {
      this.host.fatal(`${newer.address} is primary with epoch ${newer.epoch} > ours (${this.host.broker.epoch}): this primary is stale`);
      return true;
    }
    // A broker promised a newer epoch: a promotion above us was allowed, its primary may
    // just be frozen or cut off from us. That broker will not follow us; nor may we serve.
    const promised = others.find((o) => promisedIn(o) > this.host.broker.epoch);
    if (promised) {
      this.host.fatal(`${promised.address} was promised epoch ${promisedIn(promised)} by a promotion, above ours (${this.host.broker.epoch}): this primary is stale`);
      return true;
    }
    return false;
  }

  /**
   * HA state of every other broker in ha-brokers-url, asked in parallel; brokers
   * that are not visible are omitted. Visible means: the host completes a TCP
   * handshake within PEER_HANDSHAKE.deadlineMs, then the broker answers HA-STATUS within
   * `answerMs`. A host that answers no SYN (powered off, cable out, or cut off by a
   * partition) is not waited for: a primary behind a partition would not answer in
   * 3 s or 30 s either, so a longer wait would make the "another live primary" guard
   * no sounder, only slower. What keeps two primaries apart in that case is the
   * cluster manager (quorum and fencing) and the epoch (a stale primary that meets
   * the newer one stops). A hung broker on a live host (SIGSTOP, overload) gets the
   * full `answerMs`, as before.
   */
  private async peerStates(answerMs = 3000): Promise<Array<{ address: string } & PeerStatus>> {
    const answers = await this.brokerAnswers(answerMs);
    return answers.flatMap((a) => (a.answer && a.answer.instance !== this.instanceId ? [{ ...a.answer, address: a.address }] : []));
  }

  /** Every address of ha-brokers-url with its HA-STATUS, this broker's own included (see peerStates). */
  private async brokerAnswers(answerMs = 3000): Promise<PeerAnswer[]> {
    const s = this.host.settings;
    return Promise.all(
      this.url.endpoints.map(async (e): Promise<PeerAnswer> => {
        const address = hostPort(e.host, e.port);
        if ((await probeTcp(e.host, e.port, PEER_HANDSHAKE)) !== 'answered') return { address };
        let client: ManagementClient | undefined;
        try {
          client = await ManagementClient.connect(endpointAddress(e, this.url, haIdentity(s), haLinkTls(s)), {
            timeoutMs: answerMs,
            properties: { [Props.haAdmin]: true, [Props.instance]: this.instanceId },
          });
          const answer = (await client.request('HA-STATUS', 'broker', 'broker')) as PeerStatus;
          const malformed = malformedStatus(answer);
          if (malformed) {
            // Taken as it was, an epoch of "abc" or 1e300 became this broker's epoch at a
            // promotion (NaN, or one the journal cannot write): its position is not known, as
            // for a broker that does not answer.
            this.log.warn({ address, problem: malformed }, `${address} answered HA-STATUS with ${malformed}: counted as not answering`);
            return { address, malformedState: (answer as PeerStatus | null)?.state };
          }
          return { address, answer };
        } catch {
          return { address };
        } finally {
          client?.close();
        }
      }),
    );
  }

  private transition(to: HaState, reason: string): void {
    try {
      this.sm.transition(to, reason);
    } catch (err) {
      this.host.fatal((err as Error).message);
    }
  }
}

/** What is wrong with another broker's HA-STATUS answer, or undefined when its position reads as whole numbers. */
function malformedStatus(answer: unknown): string | undefined {
  if (answer === null || typeof answer !== 'object' || Array.isArray(answer)) return 'an answer that is not a map';
  const a = answer as PeerStatus;
  if (typeof a.state !== 'string') return 'no state';
  try {
    peerWholeNumber(a.epoch, 'epoch');
    peerWholeNumber(a.lsn, 'lsn');
    // Beyond the bound, the next promotion (promise + 1) would leave the epochs a journal and a promise can hold.
    if (peerWholeNumber(a['promised-epoch'], 'promised-epoch') > MAX_HA_EPOCH) return `a promised-epoch above ${MAX_HA_EPOCH}`;
  } catch (err) {
    return (err as Error).message;
  }
  return undefined;
}

/** The epoch promised to a broker, as its HA-STATUS says (checked by malformedStatus); 0: none. */
function promisedIn(answer: PeerStatus): number {
  return peerWholeNumber(answer['promised-epoch'], 'promised-epoch');
}

/**
 * Whether the journal keeps less of a change than this backup applies: a change that
 * is not durable, or a durable transaction with non-durable messages in it (the
 * journal keeps only its durable part, src/store/journal.ts). Such a message is held
 * in memory only, so a restart may not resume from the journal: the marker must go.
 */
function journalSkipsPart(entry: LoggedChange): boolean {
  if (!entry.durable) return true;
  const c = entry.change;
  return c.kind === 'transaction' && c.changes.some((op) => op.kind === 'enqueue' && !op.message.durable);
}

function durable(host: HaHost, lsn: number): Promise<void> {
  return new Promise((resolve, reject) => host.whenDurable(lsn, (err) => (err ? reject(err) : resolve())));
}

/** A stable id for this broker's data, kept in <data-dir>/broker-id. */
function loadBrokerId(dataDir: string): string {
  const file = join(dataDir, 'broker-id');
  if (existsSync(file)) {
    const id = readFileSync(file, 'utf8').trim();
    if (id) return id;
  }
  const id = randomUUID();
  writeFileSync(file, `${id}\n`);
  return id;
}
