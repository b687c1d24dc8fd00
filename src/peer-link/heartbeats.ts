// The heartbeat rule HA and DR sources share: every interval each open stream is
// offered a heartbeat, and sends one only if it is idle (nothing unanswered, and
// credit for one more transfer: Outbound.idle), so a busy stream's batches are its
// heartbeats and a stream the peer gives no credit is never pushed past it. What a
// heartbeat says (the position the peer is current to) is each protocol's own.
export interface HeartbeatStream {
  /** Send a heartbeat if idle; a no-op otherwise. */
  heartbeat(): void;
}

export class Heartbeats {
  private timer: NodeJS.Timeout | undefined;

  constructor(intervalMs: number, streams: () => Iterable<HeartbeatStream>) {
    this.timer = setInterval(() => {
      for (const s of streams()) s.heartbeat();
    }, intervalMs);
    // A source's timer never keeps a stopping process alive.
    this.timer.unref();
  }

  /** Idempotent. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
