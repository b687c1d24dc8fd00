// Planned switchover of DR queues, both sides.
//
// Run on the secondary (the site holding the passive copies), it coordinates:
//   1. DR-FENCE on the source: its consumers are detached, then it records the
//      queues as `fenced` (clients are refused with amqp:link:redirect naming this
//      site) and, once that is safe, detaches their publishers; it answers with
//      its log position F, which holds every change of those queues.
//   2. The bridge drains until it has applied F.
//   3. This site activates the copies (one dr-role change each, epoch + 1, safe
//      before going on).
//   4. DR-FOLLOW on the old source: it becomes a passive copy of this site, from
//      this site's position at activation, and its bridge starts.
// Bounded by a timeout. Before 3 a failure unfences the source (nothing changed);
// after 3 the switchover is done even if 4 is not confirmed. A source that stays
// fenced (this site or it was killed, the link was cut) asks this site every 2 s
// how the switchover ended (DR-PEER-STATE): activated at the fenced epoch means
// follow, not activated and not switching any more means unfence. It never decides
// alone, so the two sites never both serve a queue.
import { randomUUID } from 'node:crypto';
import type { DrMode } from '../broker/changes.js';
import { TandemError, invalidArgument, notFound } from '../broker/errors.js';
import { displaySource, listOf, parseSource, sourceWithPassword } from './config.js';
import { knownPassword, rememberPassword } from './credentials.js';
import type { Attributes, DrManager, ManagementRegistry } from './manager.js';
import { MAX_HELD_RANGES, PeerAnswerError, exchangesOk, fenceAnswer, isRanges, modeOk, namesIn, peerRequest, peerStateRows } from './peer.js';
import { shownValue } from '../util/safe-string.js';
import { inRanges } from './protocol.js';
import { FRESH_ROLE, MAX_EPOCH, drRefusal, epochOf, roleOf } from './roles.js';
import type { Broker } from '../broker/broker.js';
import { parseCount } from '../broker/settings.js';
import { parseBrokersUrl, type BrokerEndpoint, type BrokersUrl } from '../ha/brokers-url.js';
import { hostPort } from '../util/host-port.js';
import { monotonicNow } from '../util/monotonic-clock.js';

const PEER_TIMEOUT_MS = 5000;
const MIN_TIMEOUT_MS = 1000;
const MAX_TIMEOUT_MS = 3_600_000;

interface FenceRequest {
  queue: string;
  mode: DrMode;
  /** The pair's epoch on the secondary (the source must be at the same one). */
  epoch: number;
}

interface FollowRequest {
  queue: string;
  mode: DrMode;
  /** The new epoch (the one the source was fenced for). */
  epoch: number;
  /** The new source's position at activation: follow from there. */
  from: number;
  /** The new source's first own message id (its activation's idFloor). */
  floor?: number;
  /** The ids below `floor` the new source holds (ranges), when it named them. */
  held?: number[];
  /** The exchanges copied with the queue (the pair's --exchanges); absent: those this site had. */
  exchanges?: string;
}

export class DrSwitchover {
  /** Queues this broker is switching over now, as the coordinating secondary. */
  private readonly moving = new Set<string>();
  /** Per fenced queue: why it is still fenced (for dr status). */
  private readonly waiting = new Map<string, string>();
  /**
   * Per queue fenced here: the switchover run that fenced it last. A run that is
   * abandoned leaves its fence in place for the next run of the same epoch to reuse, so
   * a late DR-UNFENCE of the old run, or an answer to a question asked before the new
   * run fenced, must not end the new one (both sites would serve). In memory only: a
   * queue fenced before this process started has no run here, and an unfence that names
   * a run is then not taken (whose it is cannot be told); the fence ends as any fence
   * whose run is gone does, by asking the other site (tick()), within 2 s when it answers.
   */
  private readonly fenceRuns = new Map<string, string>();
  private resolving = false;

  constructor(private readonly dr: DrManager) {}

  register(m: ManagementRegistry): void {
    m.register('DR-SWITCHOVER', (_t, _n, body) =>
      this.run(listOf(body.queues), body.all === true || body.all === 'true', body.timeout === undefined ? 30_000 : parseCount('timeout', body.timeout), body['reverse-source'], body['reverse-password'], body['reverse-source-default'] === true),
    );
    m.register('DR-FENCE', (_t, _n, body) => this.fence(parseList<FenceRequest>(body.queues, isFenceRequest), body.peer, runOf(body.run)));
    m.register('DR-UNFENCE', (_t, _n, body) => ({ unfenced: this.unfence(parseList<{ queue: string; epoch: number }>(body.queues, isQueueEpoch), runOf(body.run)) }));
    m.register('DR-FOLLOW', (_t, _n, body) => ({ following: this.follow(parseList<FollowRequest>(body.queues, isFollowRequest), body.source) }));
    m.register('DR-PEER-STATE', (_t, _n, body) => ({ queues: this.peerState(queueNames(body.queues), heldFlag(body.held)) }));
  }

  /**
   * The reverse source (this site, as the old source will reach it), checked before
   * anything changes: the old source follows this site, and asks it how a switchover
   * ended, logging in with these credentials, so a site that would turn them away
   * leaves a pair that never replicates. A password given (or kept) here is checked
   * here; without one the old source may still hold one for that user (it was this
   * site's source before), so the old source checks that it can log in before it
   * fences anything (fence()). The password is kept (credentials.ts) only once this
   * site has accepted it.
   */
  private async reverseSource(text: string, passwordValue: unknown): Promise<string> {
    const { source, password: inUrl } = parseSource(text);
    if (passwordValue !== undefined && typeof passwordValue !== 'string') throw invalidArgument('reverse-password must be a string');
    if (passwordValue !== undefined && inUrl !== undefined) throw invalidArgument('give the reverse source password in the URL or apart, not both');
    const password = (passwordValue as string | undefined) ?? inUrl ?? knownPassword(source);
    const at = source.lastIndexOf('@');
    const why = at < 0 || password !== undefined ? await this.dr.host.refusesLogin(at >= 0 ? source.slice(0, at) : undefined, password) : undefined;
    if (why !== undefined) {
      throw new TandemError(
        'TANDEM_ERR_PRECONDITION',
        `the reverse source ${displaySource(source)}${at >= 0 ? ` (user ${source.slice(0, at)})` : ''} ${why}: the old source could not log in here to follow this site; give --reverse-source USER@HOST:PORT,... of an admin of this site and --reverse-source-password-file; nothing was changed`,
      );
    }
    if (password !== undefined) rememberPassword(source, password);
    return source;
  }

  /** Whether this broker is switching `queue` over now, as the coordinating secondary. */
  isMoving(queue: string): boolean {
    return this.moving.has(queue);
  }

  errorOf(queue: string): string | undefined {
    return this.waiting.get(queue);
  }

  // ---- the secondary: coordinate ------------------------------------------------

  /** `reverseDefaulted`: the operator named no reverse source; `reverseText` is the CLI's -b address (see siteWide). */
  async run(names: string[], all: boolean, timeoutMs: number, reverseText: unknown, reversePassword?: unknown, reverseDefaulted = false): Promise<Attributes> {
    const broker = this.dr.host.broker;
    if (!this.dr.isServing) throw new TandemError('TANDEM_ERR_PRECONDITION', 'this broker does not serve clients (an HA backup): run the switchover against the primary of the secondary site');
    if (names.length === 0 && !all) throw invalidArgument('name the queues to switch over, or pass --all');
    if (!Number.isFinite(timeoutMs) || timeoutMs < MIN_TIMEOUT_MS || timeoutMs > MAX_TIMEOUT_MS) {
      throw invalidArgument(`the switchover timeout must be between ${MIN_TIMEOUT_MS} and ${MAX_TIMEOUT_MS} ms, not ${String(timeoutMs)}`);
    }
    if (typeof reverseText !== 'string' || reverseText === '') throw invalidArgument('reverse-source: the brokers of this site, as the old source will reach them, is required');
    const reverse = await this.reverseSource(reverseDefaulted ? siteWide(reverseText, this.dr.host.siteBrokers) : reverseText, reversePassword);
    // --all moves the mirrors: an enqueue-only copy is not one (see below).
    const passive = [...broker.drQueues].filter(([, c]) => c.state === 'passive');
    const skipped = names.length > 0 ? [] : passive.filter(([, c]) => c.mode === 'enqueue-only').map(([q]) => q);
    const queues = names.length > 0 ? names : passive.filter(([, c]) => c.mode !== 'enqueue-only').map(([q]) => q);
    if (queues.length === 0) throw new TandemError('TANDEM_ERR_PRECONDITION', 'no passive DR copy here to switch over (tandem dr status): run the switchover against the secondary site');
    for (const q of queues) {
      const c = broker.drQueues.get(q);
      if (!c) throw notFound('DR queue', q, 'the switchover runs against the secondary site; tandem dr list shows its DR queues');
      if (c.state !== 'passive') {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `DR queue '${q}' is ${roleOf(c, false)} here, not a passive copy: run the switchover against the site that holds the passive copy`);
      }
      if (c.mode === 'enqueue-only') {
        // It holds every message ever sent, consumed at the source or not: served here, those would be delivered again.
        throw new TandemError(
          'TANDEM_ERR_PRECONDITION',
          `DR queue '${q}' is an enqueue-only copy: it holds every message the source took, consumed there or not, so serving it after a switchover would deliver those again; a switchover moves enqueue-and-dequeue copies only ('tandem dr activate ${q}' serves the copy as it is); nothing was changed`,
        );
      }
      if (this.moving.has(q)) throw new TandemError('TANDEM_ERR_PRECONDITION', `DR queue '${q}' is already being switched over`);
    }
    const sources = new Set(queues.map((q) => broker.drQueues.get(q)!.source));
    if (sources.size > 1) throw invalidArgument(`the queues copy from different sites (${[...sources].map(displaySource).join(', ')}): switch them over one site at a time`);
    const source = [...sources][0]!;
    const deadline = monotonicNow() + timeoutMs;
    const left = () => Math.max(1, deadline - monotonicNow());
    const epochs = new Map(queues.map((q) => [q, broker.drQueues.get(q)!.epoch]));
    const run = randomUUID();
    for (const q of queues) this.moving.add(q);
    const log = this.dr.host.log;
    try {
      log.info({ queues, source: displaySource(source), timeoutMs }, 'DR: switchover: fencing the source');
      let fenceLsn: number;
      try {
        const fence = queues.map((q) => ({ queue: q, mode: broker.drQueues.get(q)!.mode, epoch: epochs.get(q)! }));
        // Read strictly (peer.ts): a position taken as 0 would end the drain at once.
        fenceLsn = fenceAnswer(source, await peerRequest(source, this.dr.host.tls, 'DR-FENCE', { queues: JSON.stringify(fence), peer: sourceWithPassword(reverse), run }, Math.min(left(), PEER_TIMEOUT_MS * 2)), queues);
      } catch (err) {
        // The fence may have been recorded before the answer was lost: undo it.
        throw await this.rollBack(source, queues, epochs, run, `the source did not fence the queues: ${(err as Error).message}`);
      }
      const drained = await waitUntil(() => queues.every((q) => (this.dr.appliedOf(source, q) ?? 0) >= fenceLsn), deadline);
      if (!drained) {
        const at = queues.map((q) => `${q} at ${this.dr.appliedOf(source, q) ?? 'no link'}`).join(', ');
        throw await this.rollBack(source, queues, epochs, run, `the DR link did not bring the source's last change (${fenceLsn}) within ${timeoutMs} ms (${at})`);
      }
      let last = 0;
      for (const q of queues) last = this.dr.activateOne(q, broker.drQueues.get(q)!, false).lsn;
      this.dr.syncBridges();
      await this.dr.whenSafe(last);
      log.warn({ queues, fenceLsn }, 'DR: switchover: the copies are activated; this site serves them');
      const follow = queues.map((q) => {
        const c = broker.drQueues.get(q)!;
        return { queue: q, mode: c.mode, epoch: c.epoch, from: c.since, exchanges: c.exchanges, ...heldOf(broker, q, c) };
      });
      let following = true;
      let note: string | undefined;
      try {
        const reply = await peerRequest(source, this.dr.host.tls, 'DR-FOLLOW', { queues: JSON.stringify(follow), source: sourceWithPassword(reverse) }, Math.max(left(), PEER_TIMEOUT_MS));
        // It names the queues it follows now (not those it followed already, having asked): an answer that does not is no confirmation.
        const named = namesIn(reply, 'following');
        if (named === undefined || !named.every((q) => queues.includes(q))) {
          throw new Error(`it answered DR-FOLLOW with following: ${shownValue(reply.following)}, which is no list of the queues asked`);
        }
      } catch (err) {
        following = false;
        note = `the old source did not confirm (${(err as Error).message}); it follows this site as soon as it asks how the switchover ended (every 2 s while it is fenced)`;
        log.warn({ queues, err: (err as Error).message }, 'DR: switchover: the old source did not confirm that it follows; it will ask');
      }
      return { switched: queues, ...(skipped.length > 0 ? { 'not-moved-enqueue-only': skipped } : {}), epoch: broker.drQueues.get(queues[0]!)!.epoch, 'fence-position': fenceLsn, 'old-source': displaySource(source), 'old-source-following': following, 'reverse-source': displaySource(reverse), ...(note ? { note } : {}) };
    } finally {
      for (const q of queues) this.moving.delete(q);
    }
  }

  /** Undo a fence (nothing was activated here); the error to throw, saying what is left. */
  private async rollBack(source: string, queues: string[], epochs: Map<string, number>, run: string, why: string): Promise<TandemError> {
    const request = queues.map((q) => ({ queue: q, epoch: epochs.get(q)! + 1 }));
    this.dr.host.log.warn({ queues, why }, 'DR: switchover abandoned; unfencing the source');
    let after: string;
    try {
      const reply = await peerRequest(source, this.dr.host.tls, 'DR-UNFENCE', { queues: JSON.stringify(request), run }, PEER_TIMEOUT_MS);
      // `unfenced` names the queues it unfenced (none, if the fence was never recorded); not a list: not understood.
      const unfenced = namesIn(reply, 'unfenced');
      if (unfenced === undefined) throw new Error(`it answered DR-UNFENCE with unfenced: ${shownValue(reply.unfenced)}, which is no list of queue names`);
      // Not named: not fenced there (the fence was never recorded), or fenced by another run, or the source restarted and cannot tell this run's (unfence()).
      const unnamed = queues.filter((q) => !unfenced.includes(q));
      after =
        unnamed.length === 0
          ? 'both sites are as they were'
          : `the source did not say it unfenced ${unnamed.join(', ')}: either the fence was never recorded there (it serves them), or it holds the fence for another run or since a restart, and then serves them again once it asks this site how the switchover ended (every 2 s; tandem dr status there shows which)`;
    } catch (err) {
      after = `the source could not be told to unfence (${(err as Error).message}); it refuses clients on these queues until it asks this site, which it does every 2 s, and then serves them again`;
    }
    return new TandemError('TANDEM_ERR_PRECONDITION', `switchover of ${queues.join(', ')} abandoned: ${why}; nothing was activated here, ${after}`);
  }

  // ---- the source: fence, unfence, follow ----------------------------------------

  async fence(request: FenceRequest[], peerText: unknown, run?: string): Promise<Attributes> {
    const broker = this.dr.host.broker;
    const { source: peer, password: given } = parseSource(peerText);
    const todo: FenceRequest[] = [];
    for (const r of request) {
      if (!broker.queues.has(r.queue)) throw notFound('queue', r.queue, 'nothing was fenced on this site');
      const c = broker.drQueues.get(r.queue);
      if (c?.state === 'fenced' && c.epoch === r.epoch + 1) continue;
      if (c && c.state !== 'active') {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${r.queue}' is ${roleOf(c, false)} on this site (of ${displaySource(c.source)}), not the source of the copy: nothing was fenced`);
      }
      if (epochOf(c) !== r.epoch) {
        throw new TandemError(
          'TANDEM_ERR_PRECONDITION',
          `queue '${r.queue}' is at DR epoch ${epochOf(c)} on this site and ${r.epoch} on the secondary: they are not one pair any more (tandem dr status on both); nothing was fenced`,
        );
      }
      todo.push(r);
    }
    if (todo.length > 0) await this.checkReach(peer, given, todo.map((r) => r.queue));
    if (given !== undefined) rememberPassword(peer, given);
    // Also a fence reused from an abandoned run: it is this run's now.
    for (const r of request) if (run !== undefined) this.fenceRuns.set(r.queue, run);
    for (const r of todo) {
      const c = broker.drQueues.get(r.queue);
      const fenced = { ...FRESH_ROLE, ...(c ?? {}), source: peer, mode: r.mode, state: 'fenced' as const, epoch: r.epoch + 1 };
      // Consumers first: their last acknowledgements are logged before the fence, none after it.
      const err = drRefusal(r.queue, fenced);
      for (const client of this.dr.host.clients()) client.detachQueueLinks(r.queue, err, false);
      this.dr.setRole(r.queue, fenced);
    }
    const lsn = broker.log.lsn;
    await this.dr.whenSafe(lsn);
    // Sends accepted before the fence are settled now; their links go, later ones were refused.
    for (const r of request) this.dr.detachClients(r.queue, true);
    if (todo.length > 0) this.dr.host.log.warn({ queues: todo.map((r) => r.queue), peer: displaySource(peer), lsn }, 'DR: switchover: queues fenced; they move to the other site');
    return { fenced: request.map((r) => r.queue), lsn };
  }

  /**
   * Before fencing: can this site log in to the other one as it will have to, to ask how
   * the switchover ended and to follow it? If not, the pair would never replicate again.
   */
  private async checkReach(peer: string, password: string | undefined, queues: string[]): Promise<void> {
    try {
      await peerRequest(peer, this.dr.host.tls, 'DR-PEER-STATE', { queues: queues.join(',') }, PEER_TIMEOUT_MS, password);
    } catch (err) {
      const at = peer.lastIndexOf('@');
      throw new TandemError(
        'TANDEM_ERR_PRECONDITION',
        `the old source cannot log in to the reverse source ${displaySource(peer)}${at >= 0 ? ` as ${peer.slice(0, at)}` : ''} (${(err as Error).message}): it could not follow that site after the switchover; give --reverse-source USER@HOST:PORT,... of an admin of that site and --reverse-source-password-file; nothing was fenced`,
      );
    }
  }

  /** `run`: the switchover run that asks (its fence only); undefined: any (this site's own check, an older peer). */
  unfence(request: Array<{ queue: string; epoch: number }>, run?: string): string[] {
    const broker = this.dr.host.broker;
    const done: string[] = [];
    for (const r of request) {
      const c = broker.drQueues.get(r.queue);
      if (c?.state !== 'fenced' || c.epoch !== r.epoch) continue;
      const current = this.fenceRuns.get(r.queue);
      if (run !== undefined && current !== run) {
        if (current !== undefined) this.dr.host.log.warn({ queue: r.queue }, 'DR: switchover: ignored an unfence from an earlier switchover run; a newer one holds the fence');
        else this.dr.host.log.warn({ queue: r.queue }, 'DR: switchover: an unfence from a switchover run this broker does not know (it restarted since the fence): not taken; the fence ends when the other site says how its switchover ended');
        continue;
      }
      this.fenceRuns.delete(r.queue);
      this.dr.setRole(r.queue, { ...c, state: 'active', epoch: c.epoch - 1 });
      this.waiting.delete(r.queue);
      done.push(r.queue);
    }
    if (done.length > 0) this.dr.host.log.warn({ queues: done }, 'DR: switchover abandoned by the other site; the queues serve clients here again');
    return done;
  }

  follow(request: FollowRequest[], sourceText: unknown): string[] {
    const broker = this.dr.host.broker;
    // The password in the URL is kept only once the request is taken: a refused one changes nothing.
    const { source, password } = parseSource(sourceText);
    for (const r of request) {
      const c = broker.drQueues.get(r.queue);
      if (c?.state === 'passive' && c.epoch === r.epoch) continue;
      if (c?.state !== 'fenced' || c.epoch !== r.epoch) {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${r.queue}' was not fenced for DR epoch ${r.epoch} on this site (${c ? `${roleOf(c, false)}, epoch ${c.epoch}` : 'not a DR queue'}): it does not follow`);
      }
    }
    if (password !== undefined) rememberPassword(source, password);
    const done: string[] = [];
    for (const r of request) {
      const c = broker.drQueues.get(r.queue)!;
      if (c.state === 'passive') continue;
      // The position first, so a crash between leaves a fenced queue, which asks again. With it, what
      // this site holds from before the other's activation and the other does not: messages its
      // window (a duplicate-detection window of its own) did not take from this site, or consumed
      // there since. A passive copy holds what its source holds: kept, they would be served again
      // after the next switchover.
      const drops = r.mode === 'enqueue-and-dequeue' && r.held && r.floor ? notHeld(broker, r.queue, r.floor, r.held) : [];
      broker.recordDr({ kind: 'dr-transaction', queues: [r.queue], lsn: r.from, time: Date.now(), changes: drops.map((id) => ({ kind: 'dequeue' as const, queue: r.queue, id })) });
      if (drops.length > 0) this.dr.host.log.warn({ queue: r.queue, dropped: drops.length }, 'DR: switchover: dropped the messages the site that serves the queue now does not hold');
      // The pair's exchange filter goes with it: copied from the other site as it was from this one.
      this.dr.setRole(r.queue, { ...FRESH_ROLE, source, mode: r.mode, state: 'passive', epoch: r.epoch, exchanges: r.exchanges ?? c.exchanges ?? FRESH_ROLE.exchanges });
      this.fenceRuns.delete(r.queue);
      this.waiting.delete(r.queue);
      done.push(r.queue);
    }
    if (done.length > 0) this.dr.host.log.warn({ queues: done, source: displaySource(source) }, 'DR: switchover: this site is now a passive copy of the other');
    this.dr.syncBridges();
    return done;
  }

  peerState(queues: string[], held = false): Attributes[] {
    const broker = this.dr.host.broker;
    return queues.map((q) => {
      const c = broker.drQueues.get(q);
      const row: Attributes = { queue: q, state: c?.state ?? 'none', epoch: epochOf(c), since: c?.since ?? 0, divergence: c?.divergence ?? 0, mode: c?.mode ?? null, switching: this.moving.has(q), exchanges: c?.exchanges ?? null };
      return held && c?.state === 'active' ? { ...row, ...heldOf(broker, q, c) } : row;
    });
  }

  /** A fenced source asks the other site how its switchover ended (see the top of this file). */
  tick(): void {
    if (this.resolving) return;
    const broker = this.dr.host.broker;
    const bySource = new Map<string, string[]>();
    for (const [q, c] of broker.drQueues) if (c.state === 'fenced') bySource.set(c.source, [...(bySource.get(c.source) ?? []), q]);
    if (bySource.size === 0) return;
    this.resolving = true;
    void (async () => {
      for (const [source, queues] of bySource) {
        try {
          await this.ask(source, queues);
        } catch (err) {
          // Not the peer's answer (read in ask()): a fault here. The queues stay fenced and are asked about again.
          this.dr.host.log.error({ queues, source: displaySource(source), err: (err as Error).message }, 'DR: switchover: could not resolve a fence; the queues stay fenced');
        }
      }
    })().finally(() => {
      this.resolving = false;
    });
  }

  /**
   * Ask `source` how the switchover of `queues` (fenced here) ended, and follow or unfence
   * as its answer says. An answer that is not what a tandem site writes (peer.ts
   * peerStateRows) decides nothing: the queues stay fenced and are asked about again.
   */
  private async ask(source: string, queues: string[]): Promise<void> {
    const broker = this.dr.host.broker;
    // Which run fenced each when asked: an answer that comes after another run fenced it anew is not about that run.
    const asked = new Map(queues.map((q) => [q, this.fenceRuns.get(q)]));
    let answer: ReturnType<typeof peerStateRows>;
    try {
      answer = peerStateRows(source, await peerRequest(source, this.dr.host.tls, 'DR-PEER-STATE', { queues: queues.join(','), held: true }, PEER_TIMEOUT_MS), queues);
    } catch (err) {
      const why = `fenced by a switchover: waiting for ${displaySource(source)} to say how it ended: ${(err as Error).message}`;
      if (err instanceof PeerAnswerError) this.warnOnce(queues, why);
      for (const q of queues) this.waiting.set(q, why);
      return;
    }
    const still = (q: string) => {
      const c = broker.drQueues.get(q);
      return c?.state === 'fenced' && c.source === source && asked.get(q) === this.fenceRuns.get(q) ? c : undefined;
    };
    for (const [q, why] of answer.bad) {
      if (!still(q)) continue;
      this.warnOnce([q], `fenced by a switchover: ${why}; it stays fenced until that site answers as a tandem site does`);
      this.waiting.set(q, `fenced by a switchover: ${why}; it stays fenced until that site answers as a tandem site does`);
    }
    for (const [q, row] of answer.rows) {
      const c = still(q);
      if (!c) continue;
      if (row.state === 'active' && row.epoch === c.epoch) {
        this.follow([{ queue: q, mode: c.mode, epoch: c.epoch, from: row.since, ...(row.crossed ?? {}), ...(row.exchanges !== undefined ? { exchanges: row.exchanges } : {}) }], source);
      } else if (!row.switching && (row.state !== 'active' || row.epoch < c.epoch)) {
        this.unfence([{ queue: q, epoch: c.epoch }]);
      } else {
        this.waiting.set(q, `fenced by a switchover that ${displaySource(source)} is still running`);
      }
    }
  }

  /** Log why fenced queues wait, once per reason (the question is asked every 2 s). */
  private warnOnce(queues: string[], why: string): void {
    const fresh = queues.filter((q) => this.waiting.get(q) !== why);
    if (fresh.length > 0) this.dr.host.log.warn({ queues: fresh, why }, 'DR: switchover: the other site answered what a tandem site does not write; the queues stay fenced');
  }
}

/** Poll `done` every 20 ms until it holds or the deadline passes. */
async function waitUntil(done: () => boolean, deadline: number): Promise<boolean> {
  while (!done()) {
    if (monotonicNow() >= deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

function parseList<T>(raw: unknown, check: (v: unknown) => v is T): T[] {
  let list: unknown;
  try {
    list = typeof raw === 'string' ? JSON.parse(raw) : raw;
  } catch {
    throw invalidArgument('queues: expected a JSON list');
  }
  if (!Array.isArray(list) || list.length === 0 || list.length > 10_000) throw invalidArgument('queues: expected a JSON list of 1 to 10000 entries');
  const named = new Set<string>();
  for (const v of list) {
    if (!check(v)) throw invalidArgument(`queues: bad entry ${shownValue(v)}`);
    // One entry per queue: with two, which of them holds would depend on their order.
    const queue = (v as { queue: string }).queue;
    if (named.has(queue)) throw invalidArgument(`queues: ${shownValue(queue)} is named twice`);
    named.add(queue);
  }
  return list as T[];
}

/** The queues a DR-PEER-STATE names: a comma-separated string or a list of names, 1 to 10,000. */
function queueNames(raw: unknown): string[] {
  const names = listOf(raw);
  if (names.length === 0) throw invalidArgument('queues: name at least one queue');
  return names;
}

/** DR-PEER-STATE's `held`: absent, or true or false. */
function heldFlag(v: unknown): boolean {
  if (v === undefined || v === false || v === 'false') return false;
  if (v === true || v === 'true') return true;
  throw invalidArgument(`held must be true or false, not ${shownValue(v)}`);
}

const isEpoch = (v: unknown): boolean => Number.isSafeInteger(v) && (v as number) >= 1 && (v as number) <= MAX_EPOCH;
function isQueueEpoch(v: unknown): v is { queue: string; epoch: number } {
  const o = v as Record<string, unknown>;
  return typeof o?.queue === 'string' && o.queue !== '' && isEpoch(o.epoch);
}
function isFenceRequest(v: unknown): v is FenceRequest {
  return isQueueEpoch(v) && modeOk((v as Record<string, unknown>).mode);
}
/**
 * A switchover run's id as a peer names it (a uuid), or undefined when it names none (an
 * older peer). Anything else is refused: taken as none, it would end any run's fence.
 */
function runOf(v: unknown): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v === 'string' && /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v)) return v.toLowerCase();
  throw invalidArgument(`run: a switchover run's id is a uuid, not ${shownValue(v)}`);
}
function isFollowRequest(v: unknown): v is FollowRequest {
  const o = v as Record<string, unknown>;
  // Both or neither: heldOf() names the ids below the floor, and a floor alone says nothing.
  const held = o?.held === undefined ? o?.floor === undefined : isRanges(o.held) && Number.isSafeInteger(o.floor) && (o.floor as number) >= 0;
  return isFenceRequest(v) && Number.isSafeInteger(o.from) && (o.from as number) >= 0 && held && (o.exchanges === undefined || exchangesOk(o.exchanges));
}

/**
 * What an activated queue here holds from before its activation (ids below its idFloor),
 * as ranges: for the old source to follow it (follow()), or to quarantine only what never
 * crossed (failback.ts); nothing when there are too many ranges.
 */
function heldOf(broker: Broker, queue: string, c: { idFloor: number }): { floor?: number; held?: number[] } {
  const q = broker.queues.get(queue);
  if (!q || c.idFloor <= 0) return {};
  const out: number[] = [];
  for (const id of q.ids()) {
    if (id >= c.idFloor) break;
    if (out.length > 0 && out[out.length - 1] === id - 1) out[out.length - 1] = id;
    else {
      if (out.length >= 2 * MAX_HELD_RANGES) return {};
      out.push(id, id);
    }
  }
  return { floor: c.idFloor, held: out };
}

/** The ids below `floor` that `queue` holds here and `held` does not name. */
function notHeld(broker: Broker, queue: string, floor: number, held: readonly number[]): number[] {
  const q = broker.queues.get(queue);
  if (!q) return [];
  const out: number[] = [];
  for (const id of q.ids()) {
    if (id >= floor) break;
    if (!inRanges(held, id)) out.push(id);
  }
  return out;
}

/**
 * The reverse source when the operator named none: the CLI sends its -b address, one
 * broker. On an HA site the old source, following that broker alone, lost this site at
 * its next failover (its copy stayed connecting to a backup). When that address is one
 * of this site's ha-brokers-url, the old source is given every broker listed there, with
 * -b's scheme and user (and password, if it had one). Anything else (a virtual address,
 * a name the other site uses, a standalone site) is taken as given.
 */
export function siteWide(text: string, site: readonly BrokerEndpoint[]): string {
  if (site.length < 2) return text;
  let url: BrokersUrl;
  try {
    url = parseBrokersUrl(text);
  } catch {
    return text; // reverseSource() refuses it with the reason
  }
  const only = url.endpoints.length === 1 ? url.endpoints[0]! : undefined;
  if (!only || !site.some((e) => e.port === only.port && e.host.toLowerCase() === only.host.toLowerCase())) return text;
  const user = url.user === undefined ? '' : `${url.user}${url.password === undefined ? '' : `/${url.password}`}@`;
  return `${url.tls ? 'amqps:' : ''}${user}${site.map((e) => hostPort(e.host, e.port)).join(',')}`;
}
