// The clock for durations: timeouts, heartbeats, silence limits, rate limits, session
// expiry, deadlines. Production machines get their wall clock stepped (NTP at boot, a VM
// resumed after hours, `date -s`): measured with Date.now(), a step of an hour forward
// timed out every client, backup and session at once, and one backward held timeouts off
// and starved rate limits for an hour. CLOCK_MONOTONIC (performance.now()) is never
// stepped. Values are on the scale of Date.now() (the wall clock at process start plus
// the monotonic time since), so 0 still reads as "never"; they are comparable only with
// each other, in this process: a time that is journaled, replicated, sent to a peer or
// shown as a date stays Date.now() (README.md, "Clock steps").

/** Milliseconds, whole, on a clock that only moves forward at the rate of real time. */
export function monotonicNow(): number {
  // The global, looked up at each call: tests' fake timers replace it (and move it with their clock).
  return Math.floor(performance.timeOrigin + performance.now());
}
