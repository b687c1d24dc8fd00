// Who may be promoted and how Pacemaker should rank the candidates. Pure
// functions over broker positions, so the rules are unit-tested without a
// cluster (the way PAF's pgsqlms elects the most advanced standby).
//
// Pacemaker promotes the instance with the highest promotion score. Scores are
// a guide set by monitors; the decision is re-checked in promote against the
// exact positions every instance publishes in the pre-promote notification.

import { comparePositions, judgePromotion, type EpochStartView, type GuardVerdict, type Position } from './broker-facts.js';

export { comparePositions, type Position };

/** What the agent knows of one broker of ha-brokers-url. */
export interface BrokerView extends Position {
  address: string;
  state: string; // an HA state, or 'unreachable'
  /** The primary's own count of how far each backup (by broker id) is behind it. */
  lagById?: Record<string, number>;
  /** The broker's process instance (HA-STATUS `instance`): tells a broker which address is its own. */
  instance?: string;
  /** Where each epoch began in its log (HA-STATUS `epoch-history`), when it said. */
  history?: EpochStartView[];
}

export const PRIMARY_SCORE = 1001; // keeps the primary where it is (PAF's choice too)
export const BEST_SCORE = 1000;
export const LOWEST_SCORE = 100; // still promotable, below every better-placed candidate
const STEP = 100;

export const isPrimary = (state: string): boolean => state === 'active' || state === 'recovering';

/** A broker about to be judged: its state and position, and its epoch history when known. */
export type Candidate = { state: string; history?: EpochStartView[] } & Position;

/**
 * The promotion guard's verdict (src/ha/promotion-guard.ts, the rule the broker
 * applies to HA-PROMOTE too): `ready` always, `catchup` never, `joining` only on a
 * provably new cluster or when a majority of ha-brokers-url answers and none is
 * ahead. `peers` is every broker of ha-brokers-url (this one among them).
 */
export function promotionVerdict(self: Candidate, peers: readonly BrokerView[] | undefined): GuardVerdict {
  return judgePromotion({ state: self.state, epoch: self.epoch, lsn: self.lsn, history: self.history ?? [] }, peers);
}

export const mayBePromoted = (self: Candidate, peers: readonly BrokerView[] | undefined): boolean => promotionVerdict(self, peers).allowed;

/**
 * Distances up to this many changes count as caught up: a busy primary always has
 * changes in flight, and a score that moves with them rewrites the CIB at every
 * monitor, which aborts Pacemaker's transition in progress.
 */
const CAUGHT_UP = 1024;

/** log2 buckets beyond CAUGHT_UP: scores move only when the distance changes by a factor of two. */
function bucket(distance: number): number {
  return distance <= CAUGHT_UP ? 0 : Math.floor(Math.log2(distance)) - Math.floor(Math.log2(CAUGHT_UP)) + 1;
}

/** A ready backup's score by its lag behind the live primary: BEST_SCORE minus 10 per log2 bucket. */
export function lagScore(lag: number): number {
  return Math.max(LOWEST_SCORE, BEST_SCORE - 10 * bucket(lag));
}

/** One backup as its primary lists it in HA-STATUS. */
export interface BackupStream {
  id: string;
  state: string; // catchup | ready
  lag: number;
}

/**
 * The scores a primary gives the backups it knows, by node: `identities` maps each
 * node to the broker id its instance published. A node whose broker the primary
 * streams to as `ready` gets lagScore of the lag the primary counts for it; one in
 * catchup, or not attached to this primary at all, gets none (null). Nodes without
 * a published identity are not the primary's to judge and are left out.
 */
export function backupScores(backups: readonly BackupStream[], identities: ReadonlyMap<string, string>): Map<string, number | null> {
  const out = new Map<string, number | null>();
  for (const [node, id] of identities) {
    const stream = backups.find((b) => b.id === id);
    out.set(node, stream?.state === 'ready' && Number.isFinite(stream.lag) ? lagScore(stream.lag) : null);
  }
  return out;
}

/** The identity an instance publishes as a private node attribute: its broker id and its address in ha-brokers-url. */
export interface Identity {
  id: string;
  address?: string;
}

export function formatIdentity(i: Identity): string {
  return i.address ? `${i.id} ${i.address}` : i.id;
}

export function parseIdentity(value: string): Identity | undefined {
  const [id, address, ...rest] = value.trim().split(/\s+/);
  if (!id || rest.length > 0) return undefined;
  return address ? { id, address } : { id };
}

/**
 * In pre-promote: the candidate strictly ahead of the node Pacemaker is about to
 * promote, from the positions published so far (`published` maps node -> position;
 * only `candidates`, the nodes that could be promoted in this transition, count).
 * Undefined when the target is the best known, or its own position is not known yet.
 */
export function aheadOfTarget(target: string, published: readonly Published[], candidates: ReadonlySet<string>): Published | undefined {
  const t = published.find((p) => p.node === target);
  if (!t) return undefined;
  return betterCandidate(t, published.filter((p) => p.node !== target && candidates.has(p.node)));
}

/**
 * The promotion score this broker should give itself, or null for none.
 * `peers` is every broker of ha-brokers-url (this one may be among them), or
 * undefined when they could not be asked.
 *
 * - primary: PRIMARY_SCORE.
 * - ready, a live primary visible: BEST_SCORE minus 10 per log2 bucket of lag
 *   behind the primary, as the primary counts it when it lists this backup (all
 *   caught-up backups tie; Pacemaker picks among them).
 * - ready, no primary visible: BEST_SCORE minus STEP per ready broker ahead of it.
 * - ready, peers unknown: its own position bucketed (more data, higher score), below BEST_SCORE.
 * - joining: BEST_SCORE when the promotion guard would allow it (a new cluster, or a
 *   majority of ha-brokers-url answering with none ahead), else none.
 * - catchup, standalone, anything else: none.
 */
export function promotionScore(self: Candidate & { id?: string }, peers: readonly BrokerView[] | undefined): number | null {
  if (isPrimary(self.state)) return PRIMARY_SCORE;
  if (self.state === 'ready') {
    if (peers === undefined) return Math.min(BEST_SCORE - 1, LOWEST_SCORE + 20 * Math.floor(Math.log2(self.lsn + 1)));
    const primary = peers.find((p) => isPrimary(p.state));
    if (primary) {
      if (primary.epoch !== self.epoch) return LOWEST_SCORE; // following an older generation: keep it last
      // The primary's own figure when it lists this backup: two status snapshots taken
      // at different instants of a busy log would disagree by the traffic in between.
      const lag = self.id !== undefined ? primary.lagById?.[self.id] : undefined;
      return lagScore(lag ?? primary.lsn - self.lsn);
    }
    const ahead = peers.filter((p) => p.state === 'ready' && comparePositions(p, self) > 0).length;
    return Math.max(LOWEST_SCORE, BEST_SCORE - STEP * ahead);
  }
  if (self.state === 'joining') return mayBePromoted(self, peers) ? BEST_SCORE : null;
  return null;
}

/** A position published by one node in the pre-promote notification. */
export interface Published extends Position {
  node: string;
  state: string;
}

export function formatPublished(state: string, p: Position): string {
  return `${state}:${p.epoch}:${p.lsn}`;
}

export function parsePublished(node: string, value: string): Published | undefined {
  const m = /^([a-z]+):(\d+):(\d+)$/.exec(value.trim());
  return m ? { node, state: m[1], epoch: Number(m[2]), lsn: Number(m[3]) } : undefined;
}

/**
 * The published candidate strictly ahead of this one, if any. Only brokers that
 * could themselves be promoted count: a restarted old primary (joining) with an
 * unreplicated tail must not block a ready backup, or the two would hand the
 * score back and forth.
 */
export function betterCandidate(self: { state: string } & Position, published: readonly Published[]): Published | undefined {
  const most = (list: readonly Published[]) => list.reduce<Published | undefined>((b, p) => (b === undefined || comparePositions(p, b) > 0 ? p : b), undefined);
  const ready = most(published.filter((p) => p.state === 'ready'));
  // A ready broker beats any joining one, whatever their positions (joining may hold an unreplicated tail).
  if (self.state !== 'ready' && ready) return ready;
  const best = self.state === 'ready' ? ready : most(published.filter((p) => p.state === 'joining'));
  return best && comparePositions(best, self) > 0 ? best : undefined;
}
