// Sending a promotion's promise (epoch-promise.ts) to the other brokers: best effort,
// all at once. The round waits only for the brokers that answered the promotion's
// HA-STATUS a moment ago (they are alive, and they are the backups that could follow
// the old primary), and for them at most `deadlineMs`: a broker that does not answer
// never holds a promotion up longer than that. The others (frozen, powered off) are
// still sent it, in the background, each bounded by its own timeout: one that wakes
// in time learns the new epoch too.

export interface PromiseTarget {
  address: string;
  /** Whether the round waits for this one (it answered HA-STATUS for this promotion). */
  awaited: boolean;
  /** Deliver the promise; resolves with the broker's answer, rejects with why not. Bounded in time by the caller. */
  send(): Promise<unknown>;
}

export interface PromiseRoundResult {
  /** Addresses that took the promise before the round ended, with their answers. */
  took: Array<{ address: string; answer: unknown }>;
  /** Addresses that had not (yet) taken it, with why when known. */
  missing: Array<{ address: string; reason: string }>;
}

export async function promiseRound(targets: readonly PromiseTarget[], deadlineMs: number): Promise<PromiseRoundResult> {
  const outcome = new Map<string, { answer: unknown } | string>();
  const sends = targets.map((t) =>
    t.send().then(
      (answer) => void outcome.set(t.address, { answer }),
      (err: unknown) => void outcome.set(t.address, err instanceof Error ? err.message : String(err)),
    ),
  );
  const awaited = sends.filter((_, i) => targets[i]!.awaited);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, deadlineMs);
    timer.unref();
  });
  try {
    await Promise.race([Promise.all(awaited), deadline]);
  } finally {
    clearTimeout(timer);
  }
  const took: Array<{ address: string; answer: unknown }> = [];
  const missing: Array<{ address: string; reason: string }> = [];
  for (const t of targets) {
    const o = outcome.get(t.address);
    if (typeof o === 'object') took.push({ address: t.address, answer: o.answer });
    else missing.push({ address: t.address, reason: o ?? 'no answer yet' });
  }
  return { took, missing };
}
