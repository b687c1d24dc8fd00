// ClockStepWatch with scripted clocks: a change of the wall clock against the monotonic
// one of a second or more between two checks is a step, logged once with its size and
// what it moves; NTP's slew (at most 0.5 ms a second) is not.
import { describe, expect, it } from 'vitest';
import { ClockStepWatch } from '../../../src/ops/clock-step-watch.js';

function watched(): { watch: ClockStepWatch; lines: string[]; clocks: { wall: number; mono: number } } {
  const clocks = { wall: 1_800_000_000_000, mono: 5_000 };
  const lines: string[] = [];
  const log = { warn: (_fields: unknown, msg: string) => void lines.push(msg) } as never;
  return { watch: new ClockStepWatch(log, () => clocks.wall, () => clocks.mono), lines, clocks };
}

describe('ClockStepWatch', () => {
  it('time passing on both clocks, or slewed by NTP, is no step', () => {
    const { watch, lines, clocks } = watched();
    for (let i = 0; i < 100; i++) {
      clocks.mono += 1000;
      clocks.wall += 1000 + 0.5;
      expect(watch.check()).toBe(0);
    }
    expect(lines).toEqual([]);
  });

  it('a step forward and one back are each logged once, with their size', () => {
    const { watch, lines, clocks } = watched();
    clocks.mono += 1000;
    clocks.wall += 1000 + 3600_000;
    expect(watch.check()).toBe(3600_000);
    clocks.mono += 1000;
    clocks.wall += 1000;
    expect(watch.check()).toBe(0);
    clocks.mono += 1000;
    clocks.wall += 1000 - 7200_000;
    expect(watch.check()).toBe(-7200_000);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^the wall clock stepped forward by 3600 s: timeouts and heartbeats do not follow it/);
    expect(lines[1]).toMatch(/^the wall clock stepped back by 7200 s: .* up to 7200 s later/);
  });
});
