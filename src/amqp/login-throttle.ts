// Failed logins slow the next ones down, per remote address and per user name, so a
// password cannot be guessed at the speed of scrypt. The first FREE_FAILURES cost
// nothing (people mistype); each later attempt waits twice as long as the one before,
// up to MAX_DELAY_MS. The wait is a timer before the password is checked: it holds no
// thread, no other client waits for it, and a right password after it is accepted.
// A key is forgotten FORGET_AFTER_MS after its last failure; a success forgets the user's.

import { setTimeout as sleep } from 'node:timers/promises';
import type { Role, UserDirectory } from '../admin/users.js';
import { monotonicNow } from '../util/monotonic-clock.js';

export const FREE_FAILURES = 3;
export const FIRST_DELAY_MS = 200;
export const MAX_DELAY_MS = 5_000;
const FORGET_AFTER_MS = 5 * 60_000;
/** Keys remembered at most (the oldest go first), so a spray of names cannot grow memory. */
const MAX_KEYS = 10_000;

interface Record {
  failures: number;
  /** Attempts under way: counted too, so parallel guesses do not all get the same small delay. */
  inFlight: number;
  lastFailure: number;
}

export class LoginThrottle {
  private readonly keys = new Map<string, Record>();

  constructor(private readonly now: () => number = monotonicNow) {}

  /** An attempt begins: how long to wait before checking it. Pair with succeeded(), failed() or abandoned(). */
  begin(source: string, user: string): number {
    let delay = 0;
    for (const key of keysOf(source, user)) {
      const r = this.record(key);
      delay = Math.max(delay, delayFor(r.failures + r.inFlight));
      r.inFlight++;
    }
    return delay;
  }

  failed(source: string, user: string): void {
    for (const key of keysOf(source, user)) {
      const r = this.record(key);
      r.inFlight = Math.max(0, r.inFlight - 1);
      r.failures++;
      r.lastFailure = this.now();
    }
  }

  /** An attempt whose client left before it was checked: neither a failure nor a success. */
  abandoned(source: string, user: string): void {
    for (const key of keysOf(source, user)) {
      const r = this.keys.get(key);
      if (r) r.inFlight = Math.max(0, r.inFlight - 1);
    }
  }

  succeeded(source: string, user: string): void {
    const [sourceKey, userKey] = keysOf(source, user);
    const r = this.record(sourceKey);
    r.inFlight = Math.max(0, r.inFlight - 1);
    this.keys.delete(userKey);
  }

  private record(key: string): Record {
    let r = this.keys.get(key);
    if (r && r.inFlight === 0 && this.now() - r.lastFailure > FORGET_AFTER_MS) {
      this.keys.delete(key);
      r = undefined;
    }
    if (!r) {
      if (this.keys.size >= MAX_KEYS) this.keys.delete(this.keys.keys().next().value!);
      r = { failures: 0, inFlight: 0, lastFailure: this.now() };
    } else {
      // Most recently used last, so the map's first key is the one to drop.
      this.keys.delete(key);
    }
    this.keys.set(key, r);
    return r;
  }
}

/** The wait before an attempt that follows `failures` failed (or pending) ones. */
export function delayFor(failures: number): number {
  if (failures < FREE_FAILURES) return 0;
  return Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** Math.min(20, failures - FREE_FAILURES));
}

function keysOf(source: string, user: string): [string, string] {
  return [`source ${source}`, `user ${user}`];
}

/** How a login behind the throttle ended: left by its client, or checked (the role, if its password matched). */
export type ThrottledLogin = { status: 'abandoned' } | { status: 'checked'; role: Role | undefined; delayMs: number };

/**
 * One login behind the throttle, for SASL PLAIN and the console alike: its wait, then
 * the password's check, each recorded. A client that leaves meanwhile (`signal`)
 * abandons it: the wait and a queued hash are dropped, and it counts as no attempt,
 * since its verdict could reach nobody. A check that fails to run counts as a wrong
 * password, after `onCheckError` has said why.
 */
export async function throttledLogin(
  throttle: LoginThrottle,
  users: Pick<UserDirectory, 'authenticate'>,
  source: string,
  user: string,
  password: string,
  signal: AbortSignal | undefined,
  onCheckError: (err: Error) => void,
): Promise<ThrottledLogin> {
  const delayMs = throttle.begin(source, user);
  let role: Role | undefined;
  try {
    // Rejects (AbortError) and clears its timer when the client leaves meanwhile.
    if (delayMs > 0) await sleep(delayMs, undefined, { signal });
    role = await users.authenticate(user, password, signal);
  } catch (err) {
    if (signal?.aborted) {
      throttle.abandoned(source, user);
      return { status: 'abandoned' };
    }
    onCheckError(err as Error);
  }
  if (role) throttle.succeeded(source, user);
  else throttle.failed(source, user);
  return { status: 'checked', role, delayMs };
}
