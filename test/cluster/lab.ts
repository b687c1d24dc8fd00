// TypeScript side of test/cluster/lab.sh: a real N-node Corosync + Pacemaker
// cluster in namespaces, with helpers to read roles from crm_mon's XML and to
// run processes (clients) in the switch namespace that reaches every node.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { elements } from '../../src/agent/xml.js';
import { hasCommand, isRoot, run, waitFor, type RunResult } from './helpers.js';

export const labScript = join(import.meta.dirname, 'lab.sh');

export interface RoleLine {
  resource: string;
  role: string;
  node: string;
}

export class Lab {
  readonly env: NodeJS.ProcessEnv;

  /**
   * Names, subnet and directory are per process, so two test runs (say `npm test` and
   * someone's `vitest run test/cluster`) can each have a lab at the same time.
   */
  constructor(
    readonly dir = `/var/tmp/tandem-lab-${process.pid}`,
    readonly net = `10.204.${process.pid % 250}`,
    readonly ns = `td${process.pid}-`,
    readonly token = 1000,
  ) {
    this.env = { TANDEM_LAB_DIR: dir, TANDEM_LAB_NET: net, TANDEM_LAB_NS: ns, TANDEM_LAB_TOKEN: String(token) };
  }

  static usable(): boolean {
    return isRoot && ['corosync', 'pacemakerd', 'pcs', 'unshare', 'nsenter', 'ip', 'cibadmin'].every(hasCommand) && existsSync('/proc/self/ns/pid');
  }

  address(node: string): string {
    return `${this.net}.${node.replace('node', '')}`;
  }

  private async lab(args: string[], timeoutMs = 240_000): Promise<RunResult> {
    return run(labScript, args, { env: this.env, timeoutMs });
  }

  async up(n = 3): Promise<void> {
    await this.lab(['down']); // a previous run that died leaves namespaces behind
    const r = await this.lab(['up', String(n)]);
    if (r.code !== 0) throw new Error(`lab up failed: ${r.stderr}`);
  }

  async down(): Promise<void> {
    await this.lab(['down']);
  }

  exec(node: string, args: string[], timeoutMs = 120_000): Promise<RunResult> {
    return this.lab(['exec', node, ...args], timeoutMs);
  }

  /** One lab.sh command on one node; a failure throws with its output. */
  private async onNode(command: string, node: string): Promise<void> {
    const r = await this.lab([command, node]);
    if (r.code !== 0) throw new Error(`lab ${command} ${node}: ${r.stderr}`);
  }

  kill(node: string): Promise<void> {
    return this.onNode('kill', node);
  }

  start(node: string): Promise<void> {
    return this.onNode('start', node);
  }

  /** Cut `node` off from the other nodes; clients in the switch namespace still reach it (lab.sh). */
  partition(node: string): Promise<void> {
    return this.onNode('partition', node);
  }

  heal(node: string): Promise<void> {
    return this.onNode('heal', node);
  }

  /** Boot every node that is down (a test that failed midway may leave one killed). */
  async startAll(nodes: string[]): Promise<void> {
    for (const n of nodes) await this.start(n);
    await this.waitCluster();
  }

  async waitCluster(seconds = 120): Promise<void> {
    const r = await this.lab(['wait', String(seconds)], (seconds + 30) * 1000);
    if (r.code !== 0) throw new Error(`cluster did not form: ${r.stderr}`);
  }

  /** A long-running process in the switch namespace (reaches every node). */
  spawnInSwitch(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
    return spawn('ip', ['netns', 'exec', `${this.ns}sw`, cmd, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  }

  runInSwitch(cmd: string, args: string[], timeoutMs = 30_000): Promise<RunResult> {
    return run('ip', ['netns', 'exec', `${this.ns}sw`, cmd, ...args], { timeoutMs });
  }

  /** Active resource instances as `viewer` sees them, from crm_mon's XML. */
  async roles(viewer: string): Promise<RoleLine[]> {
    const r = await this.exec(viewer, ['crm_mon', '--one-shot', '--output-as=xml'], 20_000);
    if (r.code !== 0) throw new Error(`crm_mon on ${viewer}: ${r.stderr}`);
    const out: RoleLine[] = [];
    for (const m of r.stdout.matchAll(/<resource\b((?:[^>"]|"[^"]*")*)>([\s\S]*?)<\/resource>/g)) {
      const rsc = elements(`<resource${m[1]}>`, 'resource')[0];
      // A failed promote leaves the instance shown as Promoted (failed): that is no primary.
      if (rsc.failed === 'true' || rsc.active !== 'true') continue;
      for (const n of elements(m[2], 'node')) out.push({ resource: rsc.id, role: rsc.role, node: n.name });
    }
    return out;
  }

  async promoted(viewer: string, resource: string): Promise<string[]> {
    return (await this.roles(viewer)).filter((l) => l.resource === resource && l.role === 'Promoted').map((l) => l.node);
  }

  /** Wait until `viewer` sees one Promoted instance of `resource`, on a node other than `gone`. */
  async promotedInsteadOf(viewer: string, resource: string, gone: string, timeoutMs: number): Promise<string> {
    return waitFor(
      async () => {
        const p = await this.promoted(viewer, resource);
        return p.length === 1 && p[0] !== gone ? p[0] : undefined;
      },
      { timeoutMs, name: `${resource}: a Promoted other than ${gone} (seen by ${viewer})`, everyMs: 100 },
    );
  }

  /** Wait for one Promoted and n-1 Unpromoted instances of `resource` on distinct nodes. */
  async healthy(viewer: string, resource: string, n: number, timeoutMs: number): Promise<{ promoted: string; unpromoted: string[] }> {
    return waitFor(
      async () => {
        const lines = (await this.roles(viewer)).filter((l) => l.resource === resource);
        const p = lines.filter((l) => l.role === 'Promoted');
        const u = lines.filter((l) => l.role === 'Unpromoted');
        if (p.length !== 1 || u.length !== n - 1 || new Set(lines.map((l) => l.node)).size !== n) return undefined;
        return { promoted: p[0].node, unpromoted: u.map((l) => l.node) };
      },
      { timeoutMs, name: `${resource}: 1 Promoted + ${n - 1} Unpromoted (seen by ${viewer})`, everyMs: 250 },
    );
  }
}
