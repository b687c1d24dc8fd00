// The cluster as the console shows it: every broker of ha-brokers-url with its HA
// state, epoch, applied LSN, lag and last heartbeat, asked once a second over one
// long-lived management connection per broker (a login per question would make
// every broker hash a password every second). This broker answers for itself
// without a connection. A broker that does not answer within the deadline is shown
// as unreachable with the last thing it said, so a failover is seen as it happens.
import { ManagementClient, type BrokerAddress } from '../admin/client.js';
import type { BrokerEndpoint } from '../ha/brokers-url.js';
import { Props } from '../replication/protocol.js';
import { hostPort } from '../util/host-port.js';

/** One broker's answer to HA-STATUS, as far as the console reads it. */
export interface HaAnswer {
  state: string;
  epoch: number;
  lsn: number;
  'broker-id'?: string;
  instance?: string;
  primary?: string | null;
  backups?: Array<{ id: string; state: string; lsn: number; lag: number; 'lag-seconds'?: number; 'lag-bytes'?: number | null; 'last-ack-ms-ago'?: number | null }>;
  settlement?: { held: boolean; reason: string | null; 'ready-backups': number; 'min-ready-backups': number } | null;
  'primary-heard-ms-ago'?: number | null;
  'last-error'?: string | null;
  console?: { port: number; tls: boolean } | null;
}

export interface BrokerRow {
  address: string;
  self: boolean;
  reachable: boolean;
  state: string | null;
  epoch: number | null;
  lsn: number | null;
  'broker-id': string | null;
  'lag-changes': number | null;
  'lag-seconds': number | null;
  'lag-bytes': number | null;
  /** Since the backup last heard from the primary (or the primary from it), ms. */
  'last-heartbeat-ms-ago': number | null;
  /** The broker's own console, when it serves one. */
  console: string | null;
  /** When its last answer came (ms since the epoch), null: never. */
  'answered-at': number | null;
  error: string | null;
}

export interface ClusterView {
  ha: boolean;
  brokers: BrokerRow[];
  /** The address of the primary, when exactly one broker claims to be it. */
  primary: string | null;
  /** What an operator must look at now: no ready backup, two primaries, no primary. */
  warnings: string[];
  at: number;
}

export interface ClusterViewOptions {
  endpoints: BrokerEndpoint[];
  /** This broker's own HA-STATUS (no connection needed). */
  own(): HaAnswer;
  instanceId: string;
  /** How to reach a broker: the identity brokers use with each other, TLS as the URL says. */
  addressOf(endpoint: BrokerEndpoint): BrokerAddress;
  /** How long one broker may take to answer. */
  answerMs?: number;
}

const PRIMARY_STATES = new Set(['active', 'recovering']);

interface Peer {
  endpoint: BrokerEndpoint;
  address: string;
  self: boolean | undefined;
  client: ManagementClient | undefined;
  connecting: Promise<ManagementClient> | undefined;
  answer: HaAnswer | undefined;
  answeredAt: number | undefined;
  reachable: boolean;
  error: string | null;
}

export class ClusterWatch {
  private readonly peers: Peer[];
  private closed = false;

  constructor(private readonly options: ClusterViewOptions) {
    this.peers = options.endpoints.map((endpoint) => ({
      endpoint,
      address: hostPort(endpoint.host, endpoint.port),
      self: undefined,
      client: undefined,
      connecting: undefined,
      answer: undefined,
      answeredAt: undefined,
      reachable: false,
      error: null,
    }));
  }

  /** Ask every broker once (in parallel, each within answerMs) and return the view. */
  async refresh(): Promise<ClusterView> {
    await Promise.all(this.peers.map((p) => this.ask(p)));
    return this.view();
  }

  /** The view from the last answers (this broker's own row is always fresh). */
  view(): ClusterView {
    const now = Date.now();
    const own = this.options.own();
    const answers = this.peers.map((p) => (p.self ? own : p.reachable ? p.answer : undefined));
    const primaries = this.peers.filter((_, i) => answers[i] && PRIMARY_STATES.has(answers[i]!.state));
    const primaryIndex = primaries.length === 1 ? this.peers.indexOf(primaries[0]!) : -1;
    const primaryAnswer = primaryIndex >= 0 ? answers[primaryIndex] : undefined;
    const rows = this.peers.map((p, i): BrokerRow => {
      const a = p.self ? own : p.answer;
      const reachable = p.self === true || p.reachable;
      const asBackup = a?.['broker-id'] ? primaryAnswer?.backups?.find((b) => b.id === a['broker-id']) : undefined;
      const heard = a && !PRIMARY_STATES.has(a.state) ? (a['primary-heard-ms-ago'] ?? null) : null;
      return {
        address: p.address,
        self: p.self === true,
        reachable,
        state: a?.state ?? null,
        epoch: a?.epoch ?? null,
        lsn: a?.lsn ?? null,
        'broker-id': a?.['broker-id'] ?? null,
        'lag-changes': asBackup ? asBackup.lag : null,
        'lag-seconds': asBackup ? (asBackup['lag-seconds'] ?? null) : null,
        'lag-bytes': asBackup ? (asBackup['lag-bytes'] ?? null) : null,
        'last-heartbeat-ms-ago': reachable ? (heard ?? asBackup?.['last-ack-ms-ago'] ?? null) : null,
        console: a?.console ? consoleUrl(p.endpoint, a.console) : null,
        'answered-at': p.self ? now : (p.answeredAt ?? null),
        error: reachable ? (a?.['last-error'] ?? null) : (p.error ?? 'does not answer'),
      };
    });
    const warnings: string[] = [];
    if (primaries.length > 1) warnings.push(`${primaries.length} brokers claim to be primary: ${primaries.map((p) => p.address).join(', ')}`);
    if (primaries.length === 0) warnings.push('no broker is primary: clients are not served (promote a ready backup: tandem ha promote)');
    if (primaryAnswer && this.peers.length > 1) {
      const ready = (primaryAnswer.backups ?? []).filter((b) => b.state === 'ready').length;
      if (ready === 0) warnings.push('no backup is ready: a failure of the primary now loses the cluster');
      if (primaryAnswer.settlement?.held) warnings.push(`settlements are held: ${primaryAnswer.settlement.reason ?? ''}`);
    }
    return { ha: true, brokers: rows, primary: primaryIndex >= 0 ? this.peers[primaryIndex]!.address : null, warnings, at: now };
  }

  /** Refresh until close(), one round at a time, `intervalMs` apart: a broker that hangs delays only its own row. */
  refreshEvery(intervalMs: number): void {
    const loop = async () => {
      if (this.closed) return;
      await this.refresh();
      const t = setTimeout(() => void loop(), intervalMs);
      t.unref();
    };
    void loop();
  }

  close(): void {
    this.closed = true;
    for (const p of this.peers) p.client?.close();
  }

  private async ask(p: Peer): Promise<void> {
    if (p.self) return;
    const answerMs = this.options.answerMs ?? 1500;
    try {
      const client = await this.clientOf(p, answerMs);
      const answer = (await client.request('HA-STATUS', 'broker', 'broker')) as HaAnswer;
      if (answer.instance === this.options.instanceId) {
        // ha-brokers-url lists this broker too: from now on it answers for itself.
        p.self = true;
        client.close();
        p.client = undefined;
        return;
      }
      p.self = false;
      p.answer = answer;
      p.answeredAt = Date.now();
      p.reachable = true;
      p.error = null;
    } catch (err) {
      p.reachable = false;
      p.error = (err as Error).message;
      // A request that timed out leaves a connection that may be wedged: start afresh.
      p.client?.close();
      p.client = undefined;
    }
  }

  private clientOf(p: Peer, answerMs: number): Promise<ManagementClient> {
    if (p.client?.isOpen) return Promise.resolve(p.client);
    p.connecting ??= ManagementClient.connect(
      this.options.addressOf(p.endpoint),
      // Marked as a broker's admin connection, as the brokers' own questions are: backups admit it.
      { timeoutMs: answerMs, properties: { [Props.haAdmin]: true, [Props.instance]: this.options.instanceId } },
    )
      .then((c) => {
        if (this.closed) c.close();
        p.client = c;
        return c;
      })
      .finally(() => {
        p.connecting = undefined;
      });
    return p.connecting;
  }
}

/** The view of a broker outside a cluster: itself. */
export function standaloneView(own: HaAnswer, address: string): ClusterView {
  return {
    ha: false,
    brokers: [
      {
        address,
        self: true,
        reachable: true,
        state: own.state,
        epoch: own.epoch,
        lsn: own.lsn,
        'broker-id': own['broker-id'] ?? null,
        'lag-changes': null,
        'lag-seconds': null,
        'lag-bytes': null,
        'last-heartbeat-ms-ago': null,
        console: null,
        'answered-at': Date.now(),
        error: null,
      },
    ],
    primary: address,
    warnings: [],
    at: Date.now(),
  };
}

function consoleUrl(endpoint: BrokerEndpoint, c: { port: number; tls: boolean }): string {
  const host = endpoint.host.includes(':') ? `[${endpoint.host}]` : endpoint.host;
  return `${c.tls ? 'https' : 'http'}://${host}:${c.port}/`;
}
