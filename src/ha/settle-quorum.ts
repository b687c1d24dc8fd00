// The settlement quorum: how many ready backups must hold a change before the
// primary settles it (`ha-min-ready-backups`). The default, a majority, makes
// the primary plus the backups that acknowledged a change a majority of
// ha-brokers-url. Any two majorities meet, so whichever side of a partition can
// promote a broker (the side with quorum) has a ready backup holding every
// change a client was told was accepted; a primary cut off from its backups
// settles nothing and its publishers wait. `0` is the explicit choice to settle
// alone when no backup is ready (the behaviour before this rule).

/** `ha-min-ready-backups` as configured: a count, or `majority` of ha-brokers-url. */
export type MinReadyBackups = number | 'majority';

export const MAJORITY = 'majority';

/** Ready backups a primary of a cluster of `brokers` needs: majority is floor(brokers/2). */
export function requiredReadyBackups(setting: MinReadyBackups, brokers: number): number {
  return setting === MAJORITY ? Math.floor(brokers / 2) : setting;
}

/** Why a setting cannot be used with this many brokers (undefined: it can). */
export function minReadyBackupsRefusal(setting: MinReadyBackups, brokers: number): string | undefined {
  if (setting === MAJORITY || setting < brokers) return undefined;
  return `ha-min-ready-backups = ${setting} can never be met: ha-brokers-url lists ${brokers} broker${brokers === 1 ? '' : 's'}, so a primary has at most ${brokers - 1} backup${brokers === 2 ? '' : 's'}; use majority (the default) or at most ${brokers - 1}`;
}

/**
 * What a setting risks, for a start-up warning (undefined: nothing). Below a
 * majority, a primary cut off from its backups keeps settling while the other
 * side may promote one of them: what it settled then is lost.
 */
export function minReadyBackupsRisk(setting: MinReadyBackups, brokers: number): string | undefined {
  const needed = requiredReadyBackups(setting, brokers);
  const majority = Math.floor(brokers / 2);
  if (needed >= majority) return undefined;
  const alone = needed === 0 ? 'settles alone when no backup is ready' : `settles with ${needed} ready backup${needed === 1 ? '' : 's'}, fewer than a majority of the ${brokers} brokers`;
  return `ha-min-ready-backups = ${setting}: the primary ${alone}; a partition or a promotion on the other side then loses what it accepted meanwhile (the default, majority, needs ${majority})`;
}
