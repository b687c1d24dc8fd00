// The one rule for promoting a broker, used by the broker itself (HA-PROMOTE, so
// `tandem ha promote`) and by the Pacemaker agent's election (scores, promote).
//
// A `ready` backup has everything the primary confirmed: it may be promoted (the
// callers still refuse while another primary is alive). A `joining` one may hold
// anything from nothing to a stale copy, and promoting a stale copy makes every
// broker that is ahead throw its changes away when it rejoins. So a joining
// broker is promoted only when:
//   (a) the cluster is provably new: a majority of ha-brokers-url answers, and
//       every broker that answers has no epoch history and an empty journal;
//   (b) a majority of ha-brokers-url answers and none of them, nor the
//       candidate's own epoch history, shows a newer (epoch, LSN) than the
//       candidate's; or
//   (c) the operator accepts the loss (--accept-data-loss), told what may be lost.
// A majority, because the brokers that do not answer may be the ones ahead: with
// a majority answering, at least one broker that took part in any confirmed
// change of a majority-replicated history is among them.

/** Where a broker is in the replicated log: epoch first, then the LSN. */
export interface Position {
  epoch: number;
  lsn: number;
}

/** Where each epoch began in a broker's log (its ha-epochs.json). */
export interface EpochStartView {
  epoch: number;
  startLsn: number;
}

/** One broker of ha-brokers-url as the guard sees it; `state` is an HA state or 'unreachable'. */
export interface GuardBroker extends Position {
  address: string;
  state: string;
  /** The broker's epoch history (HA-STATUS `epoch-history`); undefined: it did not say. */
  history?: readonly EpochStartView[];
}

export interface GuardCandidate extends Position {
  state: string;
  history: readonly EpochStartView[];
}

export type GuardRule = 'ready' | 'new-cluster' | 'none-newer' | 'accept-data-loss';

export interface GuardVerdict {
  allowed: boolean;
  /** The rule that allowed it (undefined when refused). */
  rule?: GuardRule;
  /** One sentence: what was checked and what was seen (CLI output, logs, refusals). */
  checked: string;
  /** The newest position seen anywhere (answers and histories), with where it was seen. */
  newest: Position & { where: string };
  candidate: Position;
  answered: number;
  listed: number;
}

export const comparePositions = (a: Position, b: Position): number => (a.epoch !== b.epoch ? a.epoch - b.epoch : a.lsn - b.lsn);

const formatPosition = (p: Position): string => `epoch ${p.epoch} LSN ${p.lsn}`;
const beyondJoining = (state: string): boolean => state === 'catchup' || state === 'ready' || state === 'recovering' || state === 'active';
const isEmpty = (b: { lsn: number; history?: readonly EpochStartView[] }): boolean => b.lsn === 0 && (b.history?.length ?? 1) === 0;

/**
 * Judge a promotion. `brokers` is every broker of ha-brokers-url, the candidate's
 * own address among them when it answers (unreachable ones as such), or undefined
 * when they could not be asked at all.
 */
export function judgePromotion(candidate: GuardCandidate, brokers: readonly GuardBroker[] | undefined, acceptDataLoss = false): GuardVerdict {
  const list = brokers ?? [];
  const answering = list.filter((b) => b.state !== 'unreachable');
  const self = { epoch: candidate.epoch, lsn: candidate.lsn };
  const newest = newestSeen(candidate, answering);
  const base = { newest, candidate: self, answered: answering.length, listed: list.length };
  const verdict = (allowed: boolean, checked: string, rule?: GuardRule): GuardVerdict => ({ allowed, rule, checked, ...base });
  if (candidate.state === 'ready') return verdict(true, 'this broker is a ready backup: it has every change the primary confirmed', 'ready');
  if (candidate.state !== 'joining') return verdict(false, `a broker in state ${candidate.state} is never promoted: only a ready backup, or a joining one under the rules for joining brokers`);

  const seen = `${answering.length} of ${list.length} brokers of ha-brokers-url answered; this broker is at ${formatPosition(self)}; the newest position seen is ${formatPosition(newest)} (${newest.where})`;
  const refusal = (why: string): GuardVerdict => {
    if (!acceptDataLoss) return verdict(false, `${why}; ${seen}. Bring the other brokers back, or promote with --accept-data-loss to lose what this broker lacks`);
    const lost = comparePositions(newest, self) > 0
      ? `the changes after ${formatPosition(self)} up to at least ${formatPosition(newest)} may be lost`
      : `whatever the brokers that did not answer hold beyond ${formatPosition(self)} may be lost`;
    return verdict(true, `promoted with --accept-data-loss although ${why}; ${seen}: ${lost} (a broker that rejoins with them keeps them aside: tandem ha diverged)`, 'accept-data-loss');
  };
  if (brokers === undefined) return refusal('the other brokers could not be asked');
  const majority = answering.length * 2 > list.length;
  if (!majority) return refusal('no majority of ha-brokers-url answered (the brokers that did not may be ahead)');
  const beyond = answering.find((b) => beyondJoining(b.state));
  if (beyond) return refusal(`this broker is joining while ${beyond.address} is ${beyond.state}: promote a ready backup instead`);
  if (isEmpty({ lsn: candidate.lsn, history: candidate.history }) && answering.every(isEmpty)) {
    return verdict(true, `the cluster is new: ${answering.length} of ${list.length} brokers answered, none has an epoch history or anything in its journal`, 'new-cluster');
  }
  if (comparePositions(newest, self) > 0) return refusal(`${newest.where} shows a newer position`);
  return verdict(true, `no broker is ahead: ${seen}`, 'none-newer');
}

/** The newest (epoch, LSN) among the candidate's history and the brokers' answers and histories. */
function newestSeen(candidate: GuardCandidate, answering: readonly GuardBroker[]): Position & { where: string } {
  let best: Position & { where: string } = { epoch: candidate.epoch, lsn: candidate.lsn, where: 'this broker' };
  const consider = (p: Position, where: string) => {
    if (comparePositions(p, best) > 0) best = { epoch: p.epoch, lsn: p.lsn, where };
  };
  for (const e of candidate.history) consider({ epoch: e.epoch, lsn: e.startLsn }, "this broker's epoch history");
  for (const b of answering) {
    consider(b, b.address);
    for (const e of b.history ?? []) consider({ epoch: e.epoch, lsn: e.startLsn }, `the epoch history of ${b.address}`);
  }
  return best;
}

/** Read an `epoch-history` field of an HA-STATUS answer; undefined when absent or malformed. */
export function readEpochHistory(value: unknown): EpochStartView[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const out: EpochStartView[] = [];
  // Bounded by the answer's own size; entries that are not two integers are skipped.
  for (const e of value as Array<Record<string, unknown>>) {
    const epoch = Number(e?.epoch);
    const startLsn = Number(e?.startLsn);
    if (Number.isSafeInteger(epoch) && Number.isSafeInteger(startLsn) && epoch >= 0 && startLsn >= 0) out.push({ epoch, startLsn });
  }
  return out;
}
