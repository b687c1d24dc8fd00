// The login throttle's schedule: free failures, doubling delays, the bound, parallel
// attempts counted, a success clearing the user, memory bounded.
import { describe, expect, it } from 'vitest';
import { FIRST_DELAY_MS, FREE_FAILURES, LoginThrottle, MAX_DELAY_MS, delayFor } from '../../../src/amqp/login-throttle.js';

describe('login throttle', () => {
  it('throttle - free failures, then doubling, bounded', () => {
    for (let n = 0; n < FREE_FAILURES; n++) expect(delayFor(n)).toBe(0);
    expect(delayFor(FREE_FAILURES)).toBe(FIRST_DELAY_MS);
    expect(delayFor(FREE_FAILURES + 1)).toBe(2 * FIRST_DELAY_MS);
    expect(delayFor(1000)).toBe(MAX_DELAY_MS);
  });

  it('throttle - per address and per user; a success clears the user, not the address', () => {
    const t = new LoginThrottle(() => 0);
    for (let i = 0; i < FREE_FAILURES + 2; i++) {
      t.begin('10.0.0.1', 'bob');
      t.failed('10.0.0.1', 'bob');
    }
    expect(t.begin('10.0.0.2', 'bob')).toBe(4 * FIRST_DELAY_MS); // the user's count
    t.succeeded('10.0.0.2', 'bob');
    expect(t.begin('10.0.0.1', 'alice')).toBe(4 * FIRST_DELAY_MS); // the address's count
    t.failed('10.0.0.1', 'alice');
    expect(t.begin('10.0.0.3', 'bob')).toBe(0);
  });

  it('throttle - parallel attempts do not share one small delay', () => {
    const t = new LoginThrottle(() => 0);
    const delays = Array.from({ length: FREE_FAILURES + 3 }, () => t.begin('10.0.0.9', 'eve'));
    expect(delays).toEqual([0, 0, 0, FIRST_DELAY_MS, 2 * FIRST_DELAY_MS, 4 * FIRST_DELAY_MS]);
  });

  it('throttle - forgotten after five minutes without failure', () => {
    let now = 0;
    const t = new LoginThrottle(() => now);
    for (let i = 0; i < FREE_FAILURES + 4; i++) {
      t.begin('10.0.0.1', 'bob');
      t.failed('10.0.0.1', 'bob');
    }
    now += 5 * 60_000 + 1;
    expect(t.begin('10.0.0.1', 'bob')).toBe(0);
  });

  it('throttle - an abandoned attempt (its client left before the check) is neither a failure nor still in flight', () => {
    const t = new LoginThrottle(() => 0);
    for (let i = 0; i < 50; i++) t.begin('10.0.0.7', 'mallory');
    for (let i = 0; i < 50; i++) t.abandoned('10.0.0.7', 'mallory');
    expect(t.begin('10.0.0.7', 'mallory')).toBe(0);
  });
});
