// The backup's side of replication: find the primary among ha-brokers-url
// (other backups refuse the replication link, and we skip ourselves; every
// address is tried at once, so one that lost power delays nothing), open the
// stream from our log position, and hand every message, in order, to the host,
// acknowledging each once the host says it is safe. When the primary goes we
// keep our data and keep looking.
import rhea, { type Connection, type Container, type EventContext, type Receiver } from 'rhea';
import type { Logger } from '../ops/log.js';
import type { BrokerEndpoint } from '../ha/brokers-url.js';
import { connectWithin } from '../util/tcp-reach.js';
import { describeTlsFailure, tlsConnectOptions, type LinkTls } from '../admin/link-tls.js';
import { LogThrottle } from '../ops/log-throttle.js';
import { Props, REPLICATION_ADDRESS, decodeStreamMessage, type StreamMessage } from './protocol.js';

export interface FollowerHost {
  endpoints: BrokerEndpoint[];
  user: string | undefined;
  password: string | undefined;
  mechanism: 'PLAIN' | 'ANONYMOUS' | 'EXTERNAL';
  /** Set for an amqps: ha-brokers-url: every link is TLS, the primary's certificate verified. */
  tls: LinkTls | undefined;
  brokerId: string;
  instanceId: string;
  replicate: string;
  heartbeatMs: number;
  log: Logger;
  /** Our log position and epoch, sent when we attach; `journalLsn`: the newest change in our journal. */
  position(): { lsn: number; epoch: number; journalLsn: number };
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

/**
 * A TCP handshake that has not completed in this time is a host that is down or
 * unreachable (see src/util/tcp-reach.ts). Retrying soon costs little: every
 * address is searched on its own, so a dead one only delays itself.
 */
const HANDSHAKE_DEADLINE_MS = 500;

/** One address of ha-brokers-url being tried: a connection, or a timer until the next try. */
interface Probe {
  address: string;
  connection?: Connection;
  retry?: NodeJS.Timeout;
  answer?: NodeJS.Timeout;
}

export class Follower {
  private readonly container: Container;
  /** The connection whose replication link the primary accepted. */
  private connection: Connection | undefined;
  private receiver: Receiver | undefined;
  /** Every address is searched at once, each on its own: a silent one holds up nothing. */
  private readonly probes = new Map<string, Probe>();
  private chain: Promise<void> = Promise.resolve();
  private stopped = false;
  /** Watches the primary's connection for silence (see watchSilence). */
  private silenceTimer: NodeJS.Timeout | undefined;
  primaryAddress: string | undefined;
  /** When the primary's connection last sent anything (heartbeats included); undefined when not following. */
  lastHeardAt: number | undefined;
  lastError: string | undefined;
  private readonly tlsWarnings = new LogThrottle(60_000);

  constructor(private readonly host: FollowerHost) {
    this.container = rhea.create_container({ id: `tandem-backup-${host.instanceId}` });
  }

  start(): void {
    this.stopped = false;
    this.search();
  }

  /** Stop following (promotion, shutdown). Resolves once in-flight applies are done. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopSearching();
    this.dropConnection();
    await this.chain.catch(() => undefined);
  }

  /** Try every address of ha-brokers-url, now, each again after a refusal, until one is the primary. */
  private search(): void {
    if (this.stopped || this.connection) return;
    for (const e of this.host.endpoints) {
      const address = `${e.host}:${e.port}`;
      if (!this.probes.has(address)) {
        const probe: Probe = { address };
        this.probes.set(address, probe);
        this.attempt(probe, e);
      }
    }
  }

  private stopSearching(): void {
    for (const p of this.probes.values()) {
      clearTimeout(p.retry);
      clearTimeout(p.answer);
      abandon(p.connection);
    }
    this.probes.clear();
  }

  private attempt(probe: Probe, e: BrokerEndpoint): void {
    if (this.stopped || this.connection) return;
    const address = probe.address;
    // Little: a new primary holds its publishers' settlements until the backups that
    // were ready are back, so this wait is paid by every failover.
    const retryDelay = Math.min(200, this.host.heartbeatMs / 4);
    let settledAttempt = false;
    const giveUp = (reason: string, retryMs = retryDelay) => {
      if (settledAttempt) return;
      settledAttempt = true;
      clearTimeout(probe.answer);
      abandon(conn);
      if (probe.connection === conn) probe.connection = undefined;
      // Following another broker already (or stopped): this search is over.
      if (this.stopped || this.connection) return;
      this.lastError = `${address}: ${reason}`;
      this.host.log.debug({ address, reason }, 'not following this broker');
      probe.retry = setTimeout(() => this.attempt(probe, e), retryMs);
      probe.retry.unref();
    };
    const pos = this.host.position();
    const conn = this.container.connect({
      host: e.host,
      port: e.port,
      connect: connectWithin(HANDSHAKE_DEADLINE_MS, this.host.tls ? tlsConnectOptions(e.host, this.host.tls) : undefined),
      reconnect: false,
      username: this.host.mechanism === 'PLAIN' ? this.host.user : undefined,
      password: this.host.mechanism === 'PLAIN' ? this.host.password : undefined,
      // EXTERNAL: rhea offers it when the connection is TLS and `cert` is among its options.
      ...(this.host.mechanism === 'EXTERNAL' ? { enable_sasl_external: true, cert: this.host.tls?.cert } : {}),
      idle_time_out: this.host.heartbeatMs,
      properties: { [Props.haAdmin]: true, [Props.instance]: this.host.instanceId, [Props.brokerId]: this.host.brokerId },
    } as never);
    probe.connection = conn;
    // Generous: a loaded primary may take a while to answer; giving up early only restarts the work.
    probe.answer = setTimeout(() => giveUp('no answer within five heartbeat intervals'), Math.max(5000, 5 * this.host.heartbeatMs));
    probe.answer.unref();
    conn.on('connection_open', (ctx: EventContext) => {
      const props = (ctx.connection as unknown as { remote: { open: { properties?: Record<string, unknown> } } }).remote.open.properties ?? {};
      // Ourselves: looked at again only now and then (ha-brokers-url lists this broker too).
      if (props[Props.instance] === this.host.instanceId) return giveUp('this is ourselves', Math.max(1000, this.host.heartbeatMs));
      const receiver = conn.open_receiver({
        source: { address: REPLICATION_ADDRESS },
        autoaccept: false,
        credit_window: 64,
        properties: {
          [Props.brokerId]: this.host.brokerId,
          [Props.lsn]: pos.lsn,
          [Props.journalLsn]: pos.journalLsn,
          [Props.epoch]: pos.epoch,
          [Props.replicate]: this.host.replicate,
        },
      } as never);
      receiver.on('receiver_open', (c: EventContext) => {
        // A broker that is not the primary refuses by attaching with no source, then detaching.
        const source = (c.receiver as unknown as { remote: { attach: { source?: { address?: unknown } | null } } }).remote.attach.source;
        if (!source || typeof source.address !== 'string') return;
        if (settledAttempt) return;
        // Two brokers accepting at once (a stale primary not yet stopped): the first one wins.
        if (this.connection || this.stopped) return giveUp('already following another broker');
        settledAttempt = true;
        clearTimeout(probe.answer);
        this.probes.delete(address);
        this.stopSearching();
        this.connection = conn;
        this.receiver = receiver;
        this.primaryAddress = address;
        this.lastError = undefined;
        this.host.log.info({ primary: address, lsn: pos.lsn, epoch: pos.epoch }, 'following the primary');
        this.watchSilence(conn);
        this.host.onFollowing(address);
      });
      receiver.on('message', (c: EventContext) => {
        if (this.connection === conn) this.onMessage(c);
      });
      receiver.on('receiver_close', (c: EventContext) => {
        const err = (c.receiver as unknown as { error?: { condition?: string; description?: string } }).error;
        if (err?.condition === 'tandem:ha:fatal') {
          settledAttempt = true;
          this.host.onFatal(err.description ?? 'refused by the primary');
          return;
        }
        if (!settledAttempt) return giveUp(err?.description ?? 'replication refused');
        if (this.connection === conn) this.lost(`replication link closed${err?.description ? `: ${err.description}` : ''}`, err?.condition === 'tandem:ha:dropped');
      });
      receiver.on('receiver_error', () => undefined);
    });
    conn.on('connection_error', (ctx: EventContext) => {
      const err = (ctx.connection as unknown as { error?: { description?: string } }).error;
      if (!settledAttempt) giveUp(err?.description ?? 'connection refused');
    });
    conn.on('disconnected', (ctx: EventContext) => {
      const error = (ctx as unknown as { error?: Error & { code?: string } }).error;
      if (!settledAttempt) {
        const tlsFailure = this.host.tls ? describeTlsFailure(error, 'ha-tls', this.host.tls.ca !== undefined) : undefined;
        // A broker whose certificate does not verify is never followed, however often we
        // retry: say so at WARN (once a minute per address), not only in ha status.
        if (tlsFailure && this.tlsWarnings.admit(address) !== undefined) this.host.log.warn({ address, err: error?.message }, `not following ${address}: ${tlsFailure}`);
        return giveUp(tlsFailure ? `${tlsFailure} (${error?.message})` : (error?.message ?? 'disconnected'));
      }
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
    void this.chain.finally(() => this.search());
  }

  /**
   * A primary that lost power sends nothing, not even a FIN: only its silence tells.
   * It sends something at least every half heartbeat interval (AMQP empty frames at
   * half our idle-time-out, stream heartbeats), so two intervals of silence is lost.
   * rhea would find it too, a second later: after the same two intervals it still
   * waits a second for its close frame to go out.
   */
  private watchSilence(conn: Connection): void {
    const socket = (conn as unknown as { socket?: { on(ev: 'data', cb: () => void): void } }).socket;
    if (!socket) return;
    let heardAt = Date.now();
    this.lastHeardAt = heardAt;
    socket.on('data', () => (this.lastHeardAt = heardAt = Date.now()));
    const limit = 2 * this.host.heartbeatMs;
    clearInterval(this.silenceTimer);
    this.silenceTimer = setInterval(
      // setImmediate: data that arrived while this process was busy is read (I/O runs
      // first) before its silence is judged.
      () => setImmediate(() => {
        if (this.connection === conn && Date.now() - heardAt > limit) this.lost(`nothing from the primary for ${Date.now() - heardAt} ms (two heartbeat intervals)`);
      }),
      Math.max(50, this.host.heartbeatMs / 4),
    );
    this.silenceTimer.unref();
  }

  private dropConnection(): void {
    clearInterval(this.silenceTimer);
    this.silenceTimer = undefined;
    this.lastHeardAt = undefined;
    const conn = this.connection;
    this.connection = undefined;
    this.receiver = undefined;
    abandon(conn);
  }
}

/** Close a connection and its socket at once (a closing peer may never answer). */
function abandon(conn: Connection | undefined): void {
  if (!conn) return;
  try {
    conn.close();
  } catch {
    // already closed
  }
  (conn as unknown as { socket?: { destroy(): void } }).socket?.destroy();
}
