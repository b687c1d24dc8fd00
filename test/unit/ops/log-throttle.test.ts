import { describe, expect, it } from 'vitest';
import { LogThrottle } from '../../../src/ops/log-throttle.js';

describe('LogThrottle', () => {
  it('admits one event per key per interval and tells how many it held back', () => {
    let now = 0;
    const t = new LogThrottle(1000, () => now);
    expect(t.admit('a')).toBe(0);
    expect(t.admit('a')).toBeUndefined();
    expect(t.admit('b')).toBe(0);
    now = 999;
    expect(t.admit('a')).toBeUndefined();
    now = 1000;
    expect(t.admit('a')).toBe(2);
    expect(t.admit('a')).toBeUndefined();
  });

  it('tracks a bounded number of keys', () => {
    let now = 0;
    const t = new LogThrottle(1000, () => now, 2);
    t.admit('a');
    t.admit('b');
    t.admit('c'); // forgets 'a'
    expect(t.admit('a')).toBe(0);
    now = 1;
    expect(t.admit('c')).toBeUndefined();
  });
});
