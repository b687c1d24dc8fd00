// Finding the peer that serves us among the brokers of a brokers-url, and
// following it: what an HA backup does to find its primary and a DR bridge to
// find its source's primary. Every address is tried at once, each on its own
// (one that lost power delays nothing; a broker that is not the one refuses our
// link, and that address is tried again later). Each attempt says hello with our
// position as it is then; the first broker to serve the link is followed, every
// other attempt is abandoned. Following, the link is watched for silence, and a
// loss is reported once; searching again is the owner's call (it may first let
// what it applies settle, and its position move).
import { describeTlsFailure } from '../admin/link-tls.js';
import { type BrokerEndpoint, endpointKey } from '../ha/brokers-url.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle } from '../ops/log-throttle.js';
import type { DialOptions, InboundDelivery, PeerConnection, PeerDialer, PeerError, PeerMessage, PeerReceiver, RemoteAttach, ReceiverOptions } from './transport.js';
import { monotonicNow } from '../util/monotonic-clock.js';

/** How a peer's attach answers ours. */
export type Verdict =
  /** It serves us: follow it. */
  | { serving: true }
  /** It does not (and may not detach by itself): give up on it after `graceMs`, unless its detach says why first. */
  | { serving: false; reason: string; graceMs: number };

export interface SearchOptions {
  dialer: PeerDialer;
  endpoints: BrokerEndpoint[];
  log: Logger;
  /** Everything of a dial but the address. */
  dial: Omit<DialOptions, 'host' | 'port'>;
  /** A broker whose open carries this connection property and value is ourselves (a brokers-url lists us too). */
  self?: { property: string; value: string };
  /** The hello for an attempt now: link address, properties (our position as it is now), credit. */
  hello(): ReceiverOptions;
  /** How the attach of a broker that did not refuse (it named a source) answers us. */
  judge(remote: RemoteAttach): Verdict;
  /** Time between two attempts at one address. */
  retryMs: number;
  /** Time before trying ourselves again. */
  selfRetryMs: number;
  /** An attempt given no answer (open and attach) in this time is given up. */
  answerTimeoutMs: number;
  /** Following, this long without a byte from the peer is a lost peer (it sends at least every half of our idle-time-out). */
  silenceLimitMs: number;
  /** A refusal with this condition is one retrying cannot fix: reported as fatal, the search stops. */
  fatalCondition?: string;
  /** What the reasons of a loss call the link and the peer ('replication link', 'primary'). */
  names: { link: string; peer: string };
  /** Names the TLS options in what a certificate failure says (ha-tls, dr-tls). */
  tlsOption: 'ha-tls' | 'dr-tls';
  events: SearchEvents;
}

export interface SearchEvents {
  /** An address did not serve us this time, and why (it is tried again). */
  refused(address: string, reason: string): void;
  /** Following the peer at `address`: messages follow, in order. */
  following(link: FollowedLink): void;
  message(message: PeerMessage, delivery: InboundDelivery): void;
  /** The followed peer is gone; `error`: the detach's error, if that is how it went. */
  lost(reason: string, error: PeerError | undefined): void;
  /** A refusal with the fatal condition. */
  fatal?(reason: string): void;
}

export interface FollowedLink {
  address: string;
  /** The hello the peer accepted. */
  hello: ReceiverOptions;
  /** The peer's attach. */
  remote: RemoteAttach;
  addCredit(transfers: number): void;
}

/** One address being tried: an attempt in progress, or a timer until the next. */
interface Probe {
  endpoint: BrokerEndpoint;
  address: string;
  attempt?: Attempt;
  retry?: NodeJS.Timeout;
}

interface Attempt {
  /** Set once the dial returns (the transport reports nothing before that). */
  connection?: PeerConnection;
  receiver?: PeerReceiver;
  /** Decided: followed, or given up. Events after that are for the followed link only. */
  decided: boolean;
  timers: NodeJS.Timeout[];
}

/** What is being followed: the attempt that won, and its silence watch. */
interface Followed {
  attempt: Attempt;
  link: FollowedLink;
  heardAt: number;
  watch: NodeJS.Timeout;
}

export class PeerSearch {
  private readonly probes = new Map<string, Probe>();
  private followed: Followed | undefined;
  private searching = false;
  /** Counts the peers followed: tells the current link's deliveries from an earlier one's. */
  private followedCount = 0;
  private readonly tlsWarnings = new LogThrottle(60_000);

  constructor(private readonly o: SearchOptions) {}

  /** Following a peer: its address. */
  get address(): string | undefined {
    return this.followed?.link.address;
  }

  /** When the followed peer last sent anything; undefined when not following. */
  get lastHeardAt(): number | undefined {
    return this.followed?.heardAt;
  }

  /** Which following this is (changes with every peer followed). */
  get generation(): number {
    return this.followedCount;
  }

  get isFollowing(): boolean {
    return this.followed !== undefined;
  }

  /** Search every address, now, each again after a refusal, until one serves us. Nothing if already at it. */
  start(): void {
    if (this.followed || this.searching) return;
    this.searching = true;
    for (const endpoint of this.o.endpoints) {
      const address = endpointKey(endpoint);
      if (this.probes.has(address)) continue;
      const probe: Probe = { endpoint, address };
      this.probes.set(address, probe);
      this.attempt(probe);
    }
  }

  /** Stop searching and following; every connection is abandoned, nothing more is reported. Idempotent. */
  stop(): void {
    this.stopSearching();
    this.unfollow();
  }

  /** Let go of the followed peer without a report (the owner found the stream bad). Idempotent. */
  unfollow(): void {
    const f = this.followed;
    if (!f) return;
    this.followed = undefined;
    clearInterval(f.watch);
    f.attempt.connection?.abandon();
  }

  private stopSearching(): void {
    this.searching = false;
    for (const p of this.probes.values()) {
      clearTimeout(p.retry);
      if (p.attempt) this.abandonAttempt(p.attempt);
    }
    this.probes.clear();
  }

  private abandonAttempt(a: Attempt): void {
    a.decided = true;
    for (const t of a.timers) clearTimeout(t);
    a.connection?.abandon();
  }

  private attempt(probe: Probe): void {
    if (!this.searching) return;
    const hello = this.o.hello();
    const attempt: Attempt = { decided: false, timers: [] };
    const giveUp = (reason: string, retryMs = this.o.retryMs) => {
      if (attempt.decided) return;
      this.abandonAttempt(attempt);
      if (probe.attempt === attempt) probe.attempt = undefined;
      // Following another broker already (or stopped): this search is over.
      if (!this.searching || this.probes.get(probe.address) !== probe) return;
      this.o.log.debug({ address: probe.address, reason }, 'this broker does not serve us');
      this.o.events.refused(probe.address, reason);
      probe.retry = setTimeout(() => this.attempt(probe), retryMs);
      probe.retry.unref();
    };
    const later = (ms: number, fn: () => void) => {
      const t = setTimeout(fn, ms);
      t.unref();
      attempt.timers.push(t);
    };
    const isFollowed = () => this.followed?.attempt === attempt;
    attempt.connection = this.o.dialer.dial(
      { ...this.o.dial, host: probe.endpoint.host, port: probe.endpoint.port },
      {
        opened: (props) => {
          if (attempt.decided) return;
          // Ourselves: looked at again only now and then.
          if (this.o.self && props[this.o.self.property] === this.o.self.value) return giveUp('this is ourselves', this.o.selfRetryMs);
          if (!attempt.connection) return giveUp('the transport opened before it connected');
          attempt.receiver = attempt.connection.openReceiver(hello, {
            attached: (remote) => {
              // A broker that will not serve us attaches with no source, then detaches (below).
              if (!remote.source || attempt.decided) return;
              const verdict = this.o.judge(remote);
              if (!verdict.serving) return later(verdict.graceMs, () => giveUp(verdict.reason));
              // Two brokers serving at once (a stale primary not yet stopped): the first one wins.
              if (this.followed || !this.searching) return giveUp('already following another broker');
              this.follow(probe, attempt, hello, remote);
            },
            message: (message, delivery) => {
              if (isFollowed()) this.o.events.message(message, delivery);
            },
            detached: (error) => {
              if (this.o.fatalCondition !== undefined && error?.condition === this.o.fatalCondition && (!attempt.decided || isFollowed())) {
                this.stop();
                this.o.events.fatal?.(error.description ?? 'refused by the peer');
                return;
              }
              if (!attempt.decided) return giveUp(error?.description ?? error?.condition ?? 'link refused');
              if (isFollowed()) this.lose(`${this.o.names.link} closed${error?.description ? `: ${error.description}` : ''}`, error);
            },
          });
        },
        closedWithError: (error) => {
          if (!attempt.decided) giveUp(error.description ?? error.condition ?? 'connection refused');
        },
        disconnected: (error) => {
          if (!attempt.decided) {
            const tlsFailure = this.o.dial.tls ? describeTlsFailure(error, this.o.tlsOption, this.o.dial.tls.ca !== undefined) : undefined;
            // A broker whose certificate does not verify is never followed, however often we
            // retry: say so at WARN (once a minute per address), not only in status.
            if (tlsFailure && this.tlsWarnings.admit(probe.address) !== undefined) this.o.log.warn({ address: probe.address, err: error?.message }, `not following ${probe.address}: ${tlsFailure}`);
            return giveUp(tlsFailure ? `${tlsFailure} (${error?.message})` : (error?.message ?? 'disconnected'));
          }
          if (isFollowed()) this.lose(`connection to the ${this.o.names.peer} lost`, undefined);
        },
        heard: () => {
          if (isFollowed()) this.followed!.heardAt = monotonicNow();
        },
      },
    );
    probe.attempt = attempt;
    later(this.o.answerTimeoutMs, () => giveUp(`no answer within ${this.o.answerTimeoutMs} ms`));
  }

  private follow(probe: Probe, attempt: Attempt, hello: ReceiverOptions, remote: RemoteAttach): void {
    attempt.decided = true;
    for (const t of attempt.timers) clearTimeout(t);
    this.probes.delete(probe.address);
    this.stopSearching();
    const receiver = attempt.receiver!;
    const link: FollowedLink = { address: probe.address, hello, remote, addCredit: (n) => receiver.addCredit(n) };
    const watch = setInterval(
      // setImmediate: data that arrived while this process was busy is read (I/O runs
      // first) before its silence is judged.
      () =>
        setImmediate(() => {
          if (this.followed === f && monotonicNow() - f.heardAt > this.o.silenceLimitMs) this.lose(`nothing from the ${this.o.names.peer} for ${monotonicNow() - f.heardAt} ms`, undefined);
        }),
      Math.max(50, this.o.silenceLimitMs / 8),
    );
    watch.unref();
    const f: Followed = { attempt, link, heardAt: monotonicNow(), watch };
    this.followed = f;
    this.followedCount++;
    this.o.events.following(link);
  }

  private lose(reason: string, error: PeerError | undefined): void {
    if (!this.followed) return;
    this.unfollow();
    this.o.events.lost(reason, error);
  }
}
