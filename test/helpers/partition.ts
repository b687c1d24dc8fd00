// A primary cut off from both backups and replaced, as the partition tests need it:
// the backups frozen (SIGSTOP) until the primary drops them, so it holds what it had
// not yet settled; then the primary frozen, the backups woken; once both have lost it,
// the one further ahead promoted and the old primary killed -9.
import { expect } from 'vitest';
import { waitFor } from './broker.js';
import type { TestCluster } from './cluster.js';

/**
 * Cut broker 0 of a 3-broker cluster off and replace it; `whileCut` runs when both
 * backups are dropped, before the primary is frozen. The index of the new primary.
 */
export async function replaceCutOffPrimary(c: TestCluster, whileCut: () => Promise<void> = async () => undefined): Promise<number> {
  c.brokers[1]!.signal('SIGSTOP');
  c.brokers[2]!.signal('SIGSTOP');
  await waitFor(() => (c.brokers[0]!.stderr.match(/"msg":"backup dropped"/g)?.length ?? 0) >= 2, { timeout: 30_000, name: 'both backups dropped' });
  await whileCut();
  c.brokers[0]!.signal('SIGSTOP');
  c.brokers[1]!.signal('SIGCONT');
  c.brokers[2]!.signal('SIGCONT');
  // Each has lost the frozen primary: told it was dropped (joining), or, when the drop had
  // not left the primary before it froze, by its silence (still ready: it was not dropped).
  for (const i of [1, 2]) await waitFor(() => /lost the link to the primary/.test(c.brokers[i]!.stderr), { timeout: 30_000, name: `broker ${i} lost the primary` });
  const next = await promoteFurtherAhead(c);
  await c.kill(0);
  return next;
}

/**
 * Promote whichever of brokers 1 and 2 is further ahead, as a cluster manager would (the
 * two were not stopped at one instant, so either may be; the guard refuses the other).
 * Its index, once it is active.
 */
export async function promoteFurtherAhead(c: TestCluster): Promise<number> {
  const lsn1 = (await c.status(1))?.lsn ?? -1;
  const lsn2 = (await c.status(2))?.lsn ?? -1;
  const next = lsn2 > lsn1 ? 2 : 1;
  const promoted = await c.promote(next);
  expect(promoted.code, promoted.stderr).toBe(0);
  await c.waitState(next, 'active', 30_000);
  return next;
}
