// What the agent asks of Pacemaker, through its command-line tools (execa) and
// their XML output: promotion scores (crm_attribute --promotion), private node
// attributes (attrd_updater -p), the local node name and the online nodes.
import { execa } from 'execa';
import { elements, sections } from './xml.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class PacemakerError extends Error {
  constructor(command: string, detail: string) {
    super(`${command}: ${detail.trim().split('\n').pop() ?? 'failed'}`);
    this.name = 'PacemakerError';
  }
}

async function run(command: string, args: string[], timeoutMs = 10_000): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const r = await execa(command, args, { reject: false, timeout: timeoutMs, env: { LC_ALL: 'C' } });
  if (r.failed && r.exitCode === undefined) throw new PacemakerError(command, r.shortMessage ?? `cannot run ${command}`);
  return { exitCode: r.exitCode ?? 1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

/** The cluster as the agent sees it; an interface so unit tests can fake it. */
export interface Cluster {
  localNode(): Promise<string>;
  getScore(node?: string): Promise<number | undefined>;
  setScore(score: number, node?: string): Promise<void>;
  deleteScore(node?: string): Promise<void>;
  /** Set a private attribute on this node and wait until attrd answers with it. */
  publish(name: string, value: string, timeoutMs: number): Promise<void>;
  /** Every node's value of a private attribute (nodes without one are left out). */
  published(name: string): Promise<Map<string, string>>;
  unpublish(name: string): Promise<void>;
  onlineNodes(): Promise<string[]>;
}

export class PacemakerCluster implements Cluster {
  private node: string | undefined;

  /** onNode: OCF_RESKEY_CRM_meta_on_node when Pacemaker gives it (saves a crm_node run). */
  constructor(
    private readonly resource: string,
    onNode?: string,
  ) {
    this.node = onNode || undefined;
  }

  async localNode(): Promise<string> {
    if (this.node) return this.node;
    const r = await run('crm_node', ['-n']);
    if (r.exitCode !== 0 || !r.stdout.trim()) throw new PacemakerError('crm_node -n', r.stderr || 'no node name');
    this.node = r.stdout.trim();
    return this.node;
  }

  private promotion(node: string | undefined, ...rest: string[]): string[] {
    return [`--promotion=${this.resource}`, ...(node ? ['--node', node] : []), ...rest];
  }

  async getScore(node?: string): Promise<number | undefined> {
    const r = await run('crm_attribute', this.promotion(node, '--query', '--output-as=xml'));
    const attr = elements(r.stdout, 'attribute')[0];
    if (r.exitCode !== 0 || !attr || attr.value === undefined || attr.value === '') return undefined;
    const n = Number(attr.value);
    return Number.isFinite(n) ? n : undefined;
  }

  async setScore(score: number, node?: string): Promise<void> {
    const r = await run('crm_attribute', this.promotion(node, '--update', String(score)));
    if (r.exitCode !== 0) throw new PacemakerError('crm_attribute --promotion --update', r.stderr);
  }

  async deleteScore(node?: string): Promise<void> {
    const r = await run('crm_attribute', this.promotion(node, '--delete'));
    // 105 (ENXIO-like "no such attribute") is fine: nothing to delete.
    if (r.exitCode !== 0 && r.exitCode !== 105) throw new PacemakerError('crm_attribute --promotion --delete', r.stderr);
  }

  async publish(name: string, value: string, timeoutMs: number): Promise<void> {
    const r = await run('attrd_updater', ['--private', '--name', name, '--update', value]);
    if (r.exitCode !== 0) throw new PacemakerError('attrd_updater --update', r.stderr);
    // attrd applies updates asynchronously: read back until it shows (PAF's _set_priv_attr).
    const node = await this.localNode();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if ((await this.published(name)).get(node) === value) return;
      if (Date.now() > deadline) throw new PacemakerError('attrd_updater', `${name} did not read back as ${value} within ${timeoutMs} ms`);
      await sleep(100);
    }
  }

  async published(name: string): Promise<Map<string, string>> {
    const r = await run('attrd_updater', ['--query', '--all', '--name', name, '--output-as=xml']);
    const out = new Map<string, string>();
    if (r.exitCode !== 0) return out;
    for (const a of elements(r.stdout, 'attribute')) {
      const node = a.node ?? a.host;
      if (node && a.value) out.set(node, a.value);
    }
    return out;
  }

  async unpublish(name: string): Promise<void> {
    await run('attrd_updater', ['--delete', '--name', name]);
  }

  async onlineNodes(): Promise<string[]> {
    const r = await run('crm_mon', ['--one-shot', '--output-as=xml', '--include=nodes']);
    if (r.exitCode !== 0) throw new PacemakerError('crm_mon', r.stderr);
    const nodes = sections(r.stdout, 'nodes')[0] ?? '';
    return elements(nodes, 'node')
      .filter((n) => n.online === 'true')
      .map((n) => n.name);
  }
}
