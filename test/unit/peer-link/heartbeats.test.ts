import { afterEach, describe, expect, it, vi } from 'vitest';
import { Heartbeats } from '../../../src/peer-link/heartbeats.js';

describe('Heartbeats', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('offers every stream open at each interval a heartbeat, and none after stop', () => {
    vi.useFakeTimers();
    const offered: string[] = [];
    const streams = new Set([{ heartbeat: () => offered.push('a') }]);
    const beats = new Heartbeats(100, () => streams);
    vi.advanceTimersByTime(99);
    expect(offered).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(offered).toEqual(['a']);
    // A stream that joins later is offered one from the next interval on.
    streams.add({ heartbeat: () => offered.push('b') });
    vi.advanceTimersByTime(100);
    expect(offered).toEqual(['a', 'a', 'b']);
    beats.stop();
    beats.stop();
    vi.advanceTimersByTime(1000);
    expect(offered).toEqual(['a', 'a', 'b']);
  });
});
