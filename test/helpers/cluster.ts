// An HA cluster of real tandemd processes on 127.0.0.1: free ports picked up
// front (ha-brokers-url must list them all), brokers started as backups, one
// promoted with the same command a cluster manager uses.
import { execFile } from 'node:child_process';
import { TestBroker, killAllBrokers, tandemBin, waitFor } from './broker.js';
import { TestClient, bodyOf } from './rhea-client.js';

import { freePorts } from './ports.mjs';

export { freePorts };

export function tandem(args: string[], timeoutMs = 20_000): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [tandemBin, ...args], { timeout: timeoutMs }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

export interface HaStatusJson {
  state: string;
  epoch: number;
  lsn: number;
  backups: Array<{ id: string; state: string; lsn: number; lag: number }>;
}

/**
 * A TLS-only cluster: every broker listens on its port with TLS only (listen-plain=no),
 * ha-brokers-url is amqps:, and the links verify each other against `ca`.
 */
export interface ClusterTls {
  ca: string;
  cert: string;
  key: string;
  /** Who the CLI is (`user@` in front of each -b address), e.g. the HA admin. */
  cliUser?: string;
  /** A client certificate for the CLI (without cliUser it is the CLI's identity: SASL EXTERNAL). */
  cliCert?: { cert: string; key: string };
}

export class TestCluster {
  readonly brokers: Array<TestBroker | undefined>;

  private constructor(
    readonly ports: number[],
    readonly dataDirs: string[],
    private readonly extraArgs: string[],
    readonly tls: ClusterTls | undefined,
    /** Who the CLI is on a plain cluster with auth=yes (`user@` in front of -b; the password from TANDEM_PASSWORD). */
    readonly cliUser?: string,
    /** Extra environment of broker i's process (e.g. a stepped clock's, test/helpers/faketime.ts). */
    private readonly envOf: (i: number) => NodeJS.ProcessEnv | undefined = () => undefined,
  ) {
    this.brokers = ports.map(() => undefined);
  }

  get url(): string {
    return (this.tls ? 'amqps:' : '') + this.ports.map((p) => `127.0.0.1:${p}`).join(',');
  }

  /** `dataDirs`: where some brokers keep their data (by index; the rest get fresh temporary directories). */
  static async start(n: number, extraArgs: string[] = [], tls?: ClusterTls, options: { cliUser?: string; dataDirs?: string[]; envOf?: (i: number) => NodeJS.ProcessEnv | undefined } = {}): Promise<TestCluster> {
    const ports = await freePorts(n);
    const cluster = new TestCluster(ports, [...(options.dataDirs ?? [])], extraArgs, tls, options.cliUser, options.envOf);
    for (let i = 0; i < n; i++) await cluster.startBroker(i);
    return cluster;
  }

  /** What makes broker i TLS-only on its port (nothing for a plain cluster). */
  private tlsArgs(i: number): string[] {
    const t = this.tls;
    return t ? ['--listen-plain', 'no', '--tls-port', String(this.ports[i]), '--tls-cert', t.cert, '--tls-key', t.key, '--ha-tls-ca', t.ca] : [];
  }

  /** Start (or restart, on its data dir) broker i as a backup. */
  async startBroker(i: number, args: string[] = []): Promise<TestBroker> {
    const b = await TestBroker.start({
      // A TLS-only broker never binds its plain port: 0 keeps it out of the way.
      port: this.tls ? 0 : this.ports[i],
      dataDir: this.dataDirs[i],
      env: this.envOf(i),
      args: ['--ha-cluster', 'yes', '--ha-brokers-url', this.url, '--ha-heartbeat-interval', '1s', '--ha-backup-timeout', '3s', ...this.tlsArgs(i), ...this.extraArgs, ...args],
    });
    this.dataDirs[i] = b.dataDir;
    this.brokers[i] = b;
    return b;
  }

  address(i: number): string {
    return `127.0.0.1:${this.ports[i]}`;
  }

  /** -b and TLS options of the CLI for broker i. */
  cliTarget(i: number): string[] {
    const t = this.tls;
    if (!t) return ['-b', this.cliUser ? `${this.cliUser}@${this.address(i)}` : this.address(i)];
    const cert = t.cliCert ? ['--tls-cert', t.cliCert.cert, '--tls-key', t.cliCert.key] : [];
    return ['-b', `amqps://${t.cliUser ? `${t.cliUser}@` : ''}${this.address(i)}`, '--tls-ca', t.ca, ...cert];
  }

  async status(i: number): Promise<HaStatusJson | undefined> {
    const r = await tandem(['ha', 'status', ...this.cliTarget(i), '--json', '--timeout', '3']);
    if (r.code !== 0 && r.code !== 1) return undefined;
    try {
      return JSON.parse(r.stdout) as HaStatusJson;
    } catch {
      return undefined;
    }
  }

  async promote(i: number): Promise<{ code: number; stdout: string; stderr: string }> {
    return tandem(['ha', 'promote', ...this.cliTarget(i), '--cluster-manager']);
  }

  /** Start n brokers (as start() does), promote broker 0 and wait until the others are ready backups (each for up to `readyTimeout` ms, waitState's default unless given). */
  static async ready(n: number, extraArgs: string[] = [], options: { dataDirs?: string[]; readyTimeout?: number; envOf?: (i: number) => NodeJS.ProcessEnv | undefined } = {}): Promise<TestCluster> {
    const c = await TestCluster.start(n, extraArgs, undefined, options);
    const promoted = await c.promote(0);
    if (promoted.code !== 0) throw new Error(`promoting broker 0 failed (${promoted.code}): ${promoted.stderr}`);
    for (let i = 1; i < n; i++) await c.waitState(i, 'ready', options.readyTimeout);
    return c;
  }

  /** Wait until every ready backup of `primary` has acknowledged everything it has (there is at least one). */
  async backupsCaughtUp(primary: number, timeout = 45_000): Promise<void> {
    await waitFor(
      async () => {
        const s = await this.status(primary);
        return s !== undefined && s.backups.length > 0 && s.backups.every((b) => b.state === 'ready' && b.lag === 0);
      },
      { timeout, interval: 200, name: 'backups caught up' },
    );
  }

  /** Browse a queue on broker i (a backup admits an admin connection that asks): the bodies of the first n and of any that follow within 300 ms. */
  async browse(i: number, queue: string, n: number): Promise<unknown[]> {
    const client = await TestClient.connect({ port: this.ports[i], properties: { 'qpid.ha-admin': true } });
    try {
      const r = await client.openReceiver({ address: queue, distribution_mode: 'copy' });
      r.receiver.add_credit(n + 10);
      const got = await r.next(n);
      const extra = await r.drainFor(300);
      return [...got, ...extra].map((x) => bodyOf(x.message));
    } finally {
      client.connection.close();
    }
  }

  async waitState(i: number, state: string, timeout = 20_000): Promise<void> {
    await waitFor(async () => (await this.status(i))?.state === state, { timeout, interval: 100, name: `broker ${i} ${state}` });
  }

  async kill(i: number): Promise<void> {
    await this.brokers[i]?.kill();
    this.brokers[i] = undefined;
  }

  /** Kill every broker still running, then remove every broker's temp dir. */
  async stopAll(): Promise<void> {
    await killAllBrokers();
  }
}
