// The backup's side of replication: find the primary among ha-brokers-url
// (other backups refuse the replication link, and we skip ourselves), open the
// stream from our log position, and hand every message, in order, to the host,
// acknowledging each once the host says it is safe. When the primary goes we
// keep our data and keep looking.
import rhea, { type Connection, type Container, type EventContext, type Receiver } from 'rhea';
import type { Logger } from '../ops/log.js';
import type { BrokerEndpoint } from '../ha/brokers-url.js';
import { Props, REPLICATION_ADDRESS, decodeStreamMessage, type StreamMessage } from './protocol.js';

export interface FollowerHost {
  endpoints: BrokerEndpoint[];
  user: string | undefined;
  password: string | undefined;
  mechanism: 'PLAIN' | 'ANONYMOUS';
  brokerId: string;
  instanceId: string;
  replicate: string;
  heartbeatMs: number;
  log: Logger;
  /** Our log position and epoch, sent when we attach. */
  position(): { lsn: number; epoch: number };
  /**
   * Apply one stream message. Resolves once it is applied (the next message may
   * then be applied) with `safe`, which resolves once it may be acknowledged
   * (journaled): applies stay in order while journal syncs overlap.
   */
  handle(m: StreamMessage): Promise<{ safe: Promise<void> }>;
  /** Attached to the primary at this address (catch-up starts). */
  onFollowing(address: string): void;
  /** Lost the primary (or never found it) with this reason. */
  /** Lost the primary (or never found it). `dropped`: the primary dropped us, so we may lack what it settled since. */
  onLost(reason: string, dropped: boolean): void;
  /** The primary refused us for a reason retrying cannot fix (e.g. ha-replicate mismatch). */
  onFatal(reason: string): void;
}

export class Follower {
  private readonly container: Container;
  private connection: Connection | undefined;
  private receiver: Receiver | undefined;
  private chain: Promise<void> = Promise.resolve();
  private next = 0;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private attemptTimer: NodeJS.Timeout | undefined;
  primaryAddress: string | undefined;
  lastError: string | undefined;

  constructor(private readonly host: FollowerHost) {
    this.container = rhea.create_container({ id: `tandem-backup-${host.instanceId}` });
  }

  start(): void {
    this.stopped = false;
    this.tryNext(0);
  }

  /** Stop following (promotion, shutdown). Resolves once in-flight applies are done. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.attemptTimer);
    this.dropConnection();
    await this.chain.catch(() => undefined);
  }

  private tryNext(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.attempt(), delayMs);
    this.retryTimer.unref();
  }

  private attempt(): void {
    if (this.stopped) return;
    const endpoints = this.host.endpoints;
    const e = endpoints[this.next % endpoints.length];
    this.next++;
    // After a full round without a primary, wait a little before the next round. Little:
    // a new primary holds its publishers' settlements until the backups that were ready
    // are back, so this wait is paid by every failover (up to 1 s of it with 1000 ms here).
    const roundDelay = this.next % endpoints.length === 0 ? Math.min(200, this.host.heartbeatMs / 4) : 50;
    const address = `${e.host}:${e.port}`;
    let settledAttempt = false;
    const giveUp = (reason: string, retryMs = roundDelay) => {
      if (settledAttempt) return;
      settledAttempt = true;
      clearTimeout(this.attemptTimer);
      this.lastError = `${address}: ${reason}`;
      this.host.log.debug({ address, reason }, 'not following this broker');
      this.dropConnection();
      this.tryNext(retryMs);
    };
    const pos = this.host.position();
    const conn = this.container.connect({
      host: e.host,
      port: e.port,
      reconnect: false,
      username: this.host.mechanism === 'PLAIN' ? this.host.user : undefined,
      password: this.host.mechanism === 'PLAIN' ? this.host.password : undefined,
      idle_time_out: this.host.heartbeatMs,
      properties: { [Props.haAdmin]: true, [Props.instance]: this.host.instanceId, [Props.brokerId]: this.host.brokerId },
    } as never);
    this.connection = conn;
    // Generous: a loaded primary may take a while to answer; giving up early only restarts the work.
    this.attemptTimer = setTimeout(() => giveUp('no answer within five heartbeat intervals'), Math.max(5000, 5 * this.host.heartbeatMs));
    this.attemptTimer.unref();
    conn.on('connection_open', (ctx: EventContext) => {
      const props = (ctx.connection as unknown as { remote: { open: { properties?: Record<string, unknown> } } }).remote.open.properties ?? {};
      if (props[Props.instance] === this.host.instanceId) return giveUp('this is ourselves', 0);
      const receiver = conn.open_receiver({
        source: { address: REPLICATION_ADDRESS },
        autoaccept: false,
        credit_window: 64,
        properties: {
          [Props.brokerId]: this.host.brokerId,
          [Props.lsn]: pos.lsn,
          [Props.epoch]: pos.epoch,
          [Props.replicate]: this.host.replicate,
        },
      } as never);
      this.receiver = receiver;
      receiver.on('receiver_open', (c: EventContext) => {
        // A broker that is not the primary refuses by attaching with no source, then detaching.
        const source = (c.receiver as unknown as { remote: { attach: { source?: { address?: unknown } | null } } }).remote.attach.source;
        if (!source || typeof source.address !== 'string') return;
        clearTimeout(this.attemptTimer);
        settledAttempt = true;
        this.primaryAddress = address;
        this.lastError = undefined;
        this.host.log.info({ primary: address, lsn: pos.lsn, epoch: pos.epoch }, 'following the primary');
        this.host.onFollowing(address);
      });
      receiver.on('message', (c: EventContext) => this.onMessage(c));
      receiver.on('receiver_close', (c: EventContext) => {
        const err = (c.receiver as unknown as { error?: { condition?: string; description?: string } }).error;
        if (err?.condition === 'tandem:ha:fatal') {
          settledAttempt = true;
          this.host.onFatal(err.description ?? 'refused by the primary');
          return;
        }
        if (!settledAttempt) return giveUp(err?.description ?? 'replication refused');
        this.lost(`replication link closed${err?.description ? `: ${err.description}` : ''}`, err?.condition === 'tandem:ha:dropped');
      });
      receiver.on('receiver_error', () => undefined);
    });
    conn.on('connection_error', (ctx: EventContext) => {
      const err = (ctx.connection as unknown as { error?: { description?: string } }).error;
      if (!settledAttempt) giveUp(err?.description ?? 'connection refused');
    });
    conn.on('disconnected', (ctx: EventContext) => {
      if (!settledAttempt) return giveUp((ctx as unknown as { error?: Error }).error?.message ?? 'disconnected');
      if (this.connection === conn) this.lost('connection to the primary lost');
    });
    conn.on('error', () => undefined);
  }

  private onMessage(ctx: EventContext): void {
    const delivery = ctx.delivery!;
    let m: StreamMessage;
    try {
      m = decodeStreamMessage(ctx.message as never);
    } catch (err) {
      this.host.log.error({ err: (err as Error).message }, 'undecodable replication message; reconnecting');
      delivery.reject({ condition: 'amqp:decode-error', description: (err as Error).message });
      this.lost('undecodable replication message');
      return;
    }
    const conn = this.connection;
    const failed = (err: Error) => {
      this.host.log.error({ err: err.message, kind: m.kind }, 'could not apply a replicated change; reconnecting');
      if (this.connection === conn) {
        delivery.reject({ condition: 'amqp:internal-error', description: err.message });
        this.lost(`apply failed: ${err.message}`);
      }
    };
    this.chain = this.chain.then(
      () =>
        this.host.handle(m).then(({ safe }) => {
          safe.then(() => {
            if (this.connection === conn) delivery.accept();
          }, failed);
        }, failed),
    );
  }

  private lost(reason: string, dropped = false): void {
    if (this.stopped) return;
    this.dropConnection();
    this.primaryAddress = undefined;
    this.lastError = reason;
    this.host.onLost(reason, dropped);
    // Let in-flight applies finish before attaching again from our new position.
    void this.chain.finally(() => this.tryNext(100));
  }

  private dropConnection(): void {
    const conn = this.connection;
    this.connection = undefined;
    this.receiver = undefined;
    if (!conn) return;
    try {
      conn.close();
    } catch {
      // already closed
    }
    (conn as unknown as { socket?: { destroy(): void } }).socket?.destroy();
  }
}
