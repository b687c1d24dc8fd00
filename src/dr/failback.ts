// Failback after a disaster: the old source learns that its DR copy was
// activated without it (the activated site tells it, DR-DEMOTE, until it
// answers; or an operator runs `tandem dr demote` on it), and refuses clients on
// those queues: it is `diverged`. Then `tandem dr reattach` makes it a passive
// copy of the site that serves them now, without copying everything again:
//
//   1. It asks the other site (DR-PEER-STATE) for the queue's activation: its
//      epoch, the divergence point D (the last change of this site the other had
//      applied) and the other site's position at activation S.
//   2. What this site holds that was enqueued after D (its journal says when each
//      message was enqueued; a message the journal does not hold, non-durable, is
//      taken as after D) never crossed: it moves to QUEUE.dr-diverged, in
//      transactions of QUARANTINE_BATCH, for the operator to inspect, replay or purge.
//   3. It records position S and the passive role with `fill` set; its bridge
//      names the ids it holds, the other site first sends what it held before its
//      activation and this site lacks (what was consumed here after D), then its
//      log after S: only what changed since the divergence.
// Each step can be redone: a reattach killed half way is run again.
import type { DrMode } from '../broker/changes.js';
import { DEDUP_DIGEST_BYTES } from '../broker/dedup-key.js';
import { DEDUP_ROW_BYTES } from '../broker/dedup-window.js';
import { TandemError, invalidArgument, notFound } from '../broker/errors.js';
import { displaySource, listOf, parseDrMode, parseSource } from './config.js';
import { rememberPassword } from './credentials.js';
import type { Attributes, DrManager, ManagementRegistry } from './manager.js';
import { PeerAnswerError, namesIn, peerRequest, peerStateRows } from './peer.js';
import { shownValue } from '../util/safe-string.js';
import { FRESH_ROLE, MAX_EPOCH, drRefusal, epochOf, quarantineOf, roleOf } from './roles.js';
import { inRanges } from './protocol.js';

const PEER_TIMEOUT_MS = 5000;
const QUARANTINE_BATCH = 1000;
/** Duplicate-detection keys forgotten per logged change at reattach. */
const FORGET_BATCH = 10_000;

export class DrFailback {
  private telling = false;
  /** Activated queues whose old source answered DR-DEMOTE without naming them (warned once; told again). */
  private readonly garbled = new Set<string>();

  constructor(private readonly dr: DrManager) {}

  register(m: ManagementRegistry): void {
    m.register('DR-DEMOTE', (_t, _n, body) => this.demote(demoteList(body), body.peer, body.mode));
    m.register('DR-REATTACH', (_t, _n, body) => this.reattach(listOf(body.queues), body.source, body.password));
  }

  /** This site serves none of `request` any more: the other site was activated (at `epoch`). */
  demote(request: Array<{ queue: string; epoch?: number }>, peerText: unknown, modeText: unknown): Attributes {
    const broker = this.dr.host.broker;
    // A password in the peer's URL is kept only once the request is taken: a refused one changes nothing.
    const { source: peer, password } = peerText === undefined || peerText === '' ? { source: '', password: undefined } : parseSource(peerText);
    const mode: DrMode | undefined = modeText === undefined ? undefined : parseDrMode(modeText);
    const demoted: string[] = [];
    const already: string[] = [];
    for (const r of request) {
      if (!broker.queues.has(r.queue) && !broker.drQueues.has(r.queue)) throw notFound('queue', r.queue, 'nothing was demoted');
      const c = broker.drQueues.get(r.queue);
      const epoch = r.epoch ?? epochOf(c) + 1;
      if (c && c.state !== 'active' && c.epoch >= epoch) continue;
      if (c?.state === 'active' && c.epoch >= epoch) {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${r.queue}' is served here at DR epoch ${c.epoch}, not older than ${epoch}: the site that asks is the stale one; nothing was demoted`);
      }
    }
    if (password !== undefined) rememberPassword(peer, password);
    for (const r of request) {
      const c = broker.drQueues.get(r.queue);
      const epoch = r.epoch ?? epochOf(c) + 1;
      if (c && c.state !== 'active' && c.epoch >= epoch) {
        already.push(r.queue);
        continue;
      }
      const role = { ...FRESH_ROLE, ...(c ?? {}), source: peer || c?.source || '', mode: mode ?? c?.mode ?? 'enqueue-and-dequeue', state: 'diverged' as const, epoch };
      const err = drRefusal(r.queue, role);
      for (const client of this.dr.host.clients()) client.detachQueueLinks(r.queue, err, false);
      this.dr.setRole(r.queue, role);
      this.dr.detachClients(r.queue, true);
      demoted.push(r.queue);
    }
    if (demoted.length > 0) this.dr.host.log.warn({ queues: demoted, peer: displaySource(peer) }, 'DR: the other site was activated; these queues refuse clients here until tandem dr reattach');
    return { demoted, already };
  }

  async reattach(names: string[], sourceText: unknown, passwordValue?: unknown): Promise<Attributes> {
    const broker = this.dr.host.broker;
    if (!this.dr.isServing) throw new TandemError('TANDEM_ERR_PRECONDITION', 'this broker does not serve clients (an HA backup): run reattach against the primary of the old site');
    if (names.length === 0) throw invalidArgument('name the queues to reattach');
    if (typeof sourceText !== 'string' || sourceText === '') throw invalidArgument('--source: the brokers of the site that serves the queues now is required');
    const { source, password: inUrl } = parseSource(sourceText);
    if (passwordValue !== undefined && typeof passwordValue !== 'string') throw invalidArgument('the source password must be a string');
    if (passwordValue !== undefined && inUrl !== undefined) throw invalidArgument('give the source password in the URL or apart, not both');
    const password = (passwordValue as string | undefined) ?? inUrl;
    for (const q of names) {
      if (!broker.queues.has(q)) throw notFound('queue', q, 'reattach runs against the old source site, which holds the queue');
      const c = broker.drQueues.get(q);
      if (c?.state === 'fenced') throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${q}' is fenced by a switchover in progress here: it resolves by itself (tandem dr status ${q})`);
    }
    // Read strictly (peer.ts): a position or epoch taken from a garbled answer would be journaled here.
    const { rows, bad } = peerStateRows(source, await peerRequest(source, this.dr.host.tls, 'DR-PEER-STATE', { queues: names.join(','), held: true }, PEER_TIMEOUT_MS, password), names);
    // Kept only now that the other site took it: a mistyped password must not replace a good one.
    if (password !== undefined) rememberPassword(source, password);
    const plans = names.map((q) => {
      const garbled = bad.get(q);
      if (garbled !== undefined) throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${q}' is not reattached: ${garbled}; nothing was changed`);
      const row = rows.get(q);
      const c = broker.drQueues.get(q);
      const theirs = row?.epoch ?? 0;
      if (c?.state === 'passive' && c.source === source && c.epoch === theirs) return { queue: q, already: true as const };
      if (row?.state !== 'active') {
        const why = row?.state === 'none' || !row ? 'is not a DR queue there' : `is ${roleOf({ ...FRESH_ROLE, source: '', mode: 'enqueue-and-dequeue', state: row.state }, false)} there, not activated`;
        throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${q}' ${why} (${displaySource(source)}): there is nothing to reattach to; nothing was changed${row?.state === 'passive' ? " (to move it there, 'tandem dr switchover' against that site)" : ''}`);
      }
      if (theirs <= epochOf(c) && c?.state !== 'diverged') {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${q}' is at DR epoch ${epochOf(c)} here and ${theirs} at ${displaySource(source)}: that site is not newer; nothing was changed`);
      }
      // What the other site holds from before its activation crossed, whatever its enqueue's LSN here
      // (an activation in the middle of a copy of the contents holds messages from after its divergence point).
      return { queue: q, already: false as const, epoch: theirs, divergence: row.divergence, since: row.since, mode: row.mode!, crossed: row.crossed };
    });
    // What the journal holds, synced, is what step 2 reads.
    await this.dr.whenSafe(broker.log.lsn);
    const quarantined: Record<string, number> = {};
    for (const p of plans) {
      if (p.already) continue;
      this.demote([{ queue: p.queue, epoch: p.epoch }], source, p.mode);
      quarantined[p.queue] = this.quarantine(p.queue, p.divergence, p.crossed);
      this.forgetKeysAfter(p.queue, p.divergence);
      // The position first: a crash before the role leaves a diverged queue, reattached again.
      broker.recordDr({ kind: 'dr-transaction', queues: [p.queue], lsn: p.since, time: Date.now(), changes: [] });
      this.dr.setRole(p.queue, { ...FRESH_ROLE, source, mode: p.mode, state: 'passive', epoch: p.epoch, divergence: p.divergence, fill: true });
    }
    this.dr.syncBridges();
    const done = plans.filter((p) => !p.already).map((p) => p.queue);
    if (done.length > 0) this.dr.host.log.warn({ queues: done, source: displaySource(source), quarantined }, 'DR: reattached as passive copies of the site that serves them');
    return {
      reattached: done,
      already: plans.filter((p) => p.already).map((p) => p.queue),
      quarantined,
      'divergence-point': Object.fromEntries(plans.filter((p) => !p.already).map((p) => [p.queue, p.divergence!])),
    };
  }

  /**
   * Move what `queue` holds from after `divergence` (this site's LSN) to its quarantine, but
   * for what the other site holds from before its activation (`crossed`: those messages did
   * cross, and stay here as its copy); returns how many.
   */
  private quarantine(queue: string, divergence: number, crossed?: { floor: number; held: number[] }): number {
    const broker = this.dr.host.broker;
    const enqueued = this.dr.host.enqueueLsns(queue);
    const local = broker.queues.get(queue)!;
    const after: number[] = [];
    for (const id of local.ids()) {
      const lsn = enqueued.get(id);
      if (crossed && id < crossed.floor && inRanges(crossed.held, id)) continue;
      if (lsn === undefined || lsn > divergence) after.push(id);
    }
    if (after.length === 0) return 0;
    const target = quarantineOf(queue);
    if (!broker.queues.has(target)) broker.declareQueue(target, { ...local.settings, durable: true, autoDelete: false, exclusive: false, maxCount: 0, maxSize: 0, defaultTtlMs: 0 });
    let moved = 0;
    for (let i = 0; i < after.length; i += QUARANTINE_BATCH) moved += broker.moveMessages(queue, target, after.slice(i, i + QUARANTINE_BATCH));
    return moved;
  }

  /**
   * Take out of `queue`'s duplicate-detection window every key this site took after
   * `divergence`: those messages never crossed (they are quarantined, or were consumed
   * here), so the other site's window lacks their keys, and a publisher that resent one
   * there after the activation had it taken. As this site's copy of the other, it must
   * take it too; a key kept here dropped it as a duplicate, and the copy lacked what the
   * other site serves (the switch back lost it). Keys from before `divergence` crossed
   * with their messages: both windows hold them.
   */
  private forgetKeysAfter(queue: string, divergence: number): void {
    const broker = this.dr.host.broker;
    const rows = broker.queues.get(queue)?.dedup?.rows();
    if (!rows) return;
    let keys: Buffer[] = [];
    for (let at = 0; at + DEDUP_ROW_BYTES <= rows.length; at += DEDUP_ROW_BYTES) {
      if (rows.readDoubleLE(at + DEDUP_DIGEST_BYTES + 8) <= divergence) continue;
      keys.push(rows.subarray(at, at + DEDUP_DIGEST_BYTES));
      if (keys.length >= FORGET_BATCH) {
        broker.forgetDedupKeys(queue, Buffer.concat(keys));
        keys = [];
      }
    }
    if (keys.length > 0) broker.forgetDedupKeys(queue, Buffer.concat(keys));
  }

  /**
   * On an activated site: tell each old source that it serves these queues no more (every
   * activation but one run with keep-source-serving, a drill or a chosen split; a
   * switchover tells its own way). Until it answers: again at each check.
   */
  tick(): void {
    if (this.telling) return;
    const broker = this.dr.host.broker;
    const bySource = new Map<string, Array<{ queue: string; epoch: number; mode: DrMode }>>();
    for (const [q, c] of broker.drQueues) {
      if (c.state !== 'active' || !c.tell || c.source === '') continue;
      bySource.set(c.source, [...(bySource.get(c.source) ?? []), { queue: q, epoch: c.epoch, mode: c.mode }]);
    }
    if (bySource.size === 0) return;
    this.telling = true;
    void (async () => {
      for (const [source, queues] of bySource) {
        for (const q of queues) {
          try {
            const reply = await peerRequest(source, this.dr.host.tls, 'DR-DEMOTE', { queues: JSON.stringify([{ queue: q.queue, epoch: q.epoch }]), mode: q.mode }, PEER_TIMEOUT_MS);
            // A tandem site names the queue as demoted or demoted already; an answer that does not is no answer: told again.
            if (![...(namesIn(reply, 'demoted') ?? []), ...(namesIn(reply, 'already') ?? [])].includes(q.queue)) {
              if (!this.garbled.has(q.queue)) {
                this.garbled.add(q.queue);
                this.dr.host.log.warn(
                  { queue: q.queue, source: displaySource(source), demoted: shownValue(reply.demoted), already: shownValue(reply.already) },
                  'DR: the old source answered DR-DEMOTE without naming the queue (not what a tandem site writes); it is told again every 2 s',
                );
              }
              continue;
            }
          } catch (err) {
            // Unreachable: try again next time. A refusal (that site is newer, or lacks the queue) is final.
            if (!(err instanceof TandemError) || err instanceof PeerAnswerError || /cannot be reached/.test(err.message)) continue;
            this.dr.host.log.error({ queue: q.queue, source: displaySource(source), err: err.message }, 'DR: the old source refused to stop serving an activated queue');
          }
          this.garbled.delete(q.queue);
          const c = broker.drQueues.get(q.queue);
          if (c?.state === 'active' && c.tell && c.epoch === q.epoch) this.dr.setRole(q.queue, { ...c, tell: false });
        }
      }
    })().finally(() => {
      this.telling = false;
    });
  }
}

function demoteList(body: Attributes): Array<{ queue: string; epoch?: number }> {
  const raw = body.queues;
  if (typeof raw === 'string' && raw.startsWith('[')) {
    let list: unknown;
    try {
      list = JSON.parse(raw);
    } catch {
      throw invalidArgument('queues: expected a JSON list');
    }
    if (!Array.isArray(list) || list.length === 0 || list.length > 10_000) throw invalidArgument('queues: expected a JSON list of 1 to 10000 entries');
    const named = new Set<string>();
    return list.map((v: { queue?: unknown; epoch?: unknown }) => {
      if (typeof v?.queue !== 'string' || v.queue === '' || (v.epoch !== undefined && !(Number.isSafeInteger(v.epoch) && (v.epoch as number) >= 1 && (v.epoch as number) <= MAX_EPOCH))) {
        throw invalidArgument(`queues: bad entry ${shownValue(v)}`);
      }
      // One entry per queue: with two, the epoch it ends at would depend on their order.
      if (named.has(v.queue)) throw invalidArgument(`queues: ${shownValue(v.queue)} is named twice`);
      named.add(v.queue);
      return { queue: v.queue, epoch: v.epoch as number | undefined };
    });
  }
  const names = listOf(raw);
  if (names.length === 0) throw invalidArgument('name the queues to demote');
  return names.map((queue) => ({ queue }));
}
