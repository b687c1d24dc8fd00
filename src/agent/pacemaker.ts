// What the agent asks of Pacemaker, through its command-line tools and their XML
// output: promotion scores (crm_attribute --promotion), private node attributes
// (attrd_updater -p: the positions of pre-promote and each broker's identity),
// and the local node name.
import { runCommand, RunError } from './run.js';
import type { TotemTiming } from './timing.js';
import { elements, sections } from './xml.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** How often a read-back polls attrd or the CIB: each poll is one short C tool run. */
const POLL_MS = 25;

export class PacemakerError extends Error {
  constructor(command: string, detail: string) {
    super(`${command}: ${detail.trim().split('\n').pop() ?? 'failed'}`);
    this.name = 'PacemakerError';
  }
}

async function run(command: string, args: string[], timeoutMs = 10_000): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  try {
    return await runCommand(command, args, timeoutMs);
  } catch (err) {
    if (err instanceof RunError) throw new PacemakerError(command, err.message);
    throw err;
  }
}

/** The cluster as the agent sees it; an interface so unit tests can fake it. */
export interface Cluster {
  localNode(): Promise<string>;
  getScore(node?: string): Promise<number | undefined>;
  setScore(score: number, node?: string): Promise<void>;
  deleteScore(node?: string): Promise<void>;
  /** Every node's promotion score, in one attrd query (nodes without one are left out). */
  allScores(): Promise<Map<string, number>>;
  /** Wait until the CIB holds this promotion score for node (undefined: no score). */
  awaitScore(node: string, score: number | undefined, timeoutMs: number): Promise<boolean>;
  /**
   * Set a private attribute on this node and wait until attrd answers with it.
   * Resolves with every node's value as read back then.
   */
  publish(name: string, value: string, timeoutMs: number): Promise<Map<string, string>>;
  /** Set a private attribute on this node without waiting for it to read back. */
  setPrivate(name: string, value: string): Promise<void>;
  /** Every node's value of a private attribute (nodes without one are left out). */
  published(name: string): Promise<Map<string, string>>;
  unpublish(name: string): Promise<void>;
  /**
   * The node a location constraint requires the Promoted role on (score INFINITY, as
   * `pcs resource move --promoted` and `crm_resource --move --promoted` leave), if any.
   */
  promotedPin(): Promise<string | undefined>;
  /** Corosync's token and consensus timeouts in use (undefined: corosync does not answer). */
  totemTiming(): Promise<TotemTiming | undefined>;
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

  /** The node attribute crm_attribute --promotion keeps the score in (Pacemaker's own naming). */
  private get scoreAttribute(): string {
    return `master-${this.resource}`;
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

  async allScores(): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (const [node, value] of await this.attrdValues(this.scoreAttribute, true)) {
      const n = Number(value);
      if (value !== '' && Number.isFinite(n)) out.set(node, n);
    }
    return out;
  }

  async awaitScore(node: string, score: number | undefined, timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if ((await this.getScore(node)) === score) return true;
      if (performance.now() > deadline) return false;
      await sleep(POLL_MS);
    }
  }

  async publish(name: string, value: string, timeoutMs: number): Promise<Map<string, string>> {
    await this.setPrivate(name, value);
    // attrd applies updates asynchronously: read back until it shows (PAF's _set_priv_attr).
    const node = await this.localNode();
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const values = await this.published(name);
      if (values.get(node) === value) return values;
      if (performance.now() > deadline) throw new PacemakerError('attrd_updater', `${name} did not read back as ${value} within ${timeoutMs} ms`);
      await sleep(POLL_MS);
    }
  }

  async setPrivate(name: string, value: string): Promise<void> {
    const r = await run('attrd_updater', ['--private', '--name', name, '--update', value]);
    if (r.exitCode !== 0) throw new PacemakerError('attrd_updater --update', r.stderr);
  }

  published(name: string): Promise<Map<string, string>> {
    return this.attrdValues(name, false);
  }

  /** attrd's value of an attribute on every node; strict: a failed query is an error, not "none". */
  private async attrdValues(name: string, strict: boolean): Promise<Map<string, string>> {
    const r = await run('attrd_updater', ['--query', '--all', '--name', name, '--output-as=xml']);
    const out = new Map<string, string>();
    if (r.exitCode !== 0) {
      // attrd answers "no such attribute" when no node has it: that is an empty map.
      if (strict && !/not found|No such|does not exist/i.test(r.stdout + r.stderr)) throw new PacemakerError('attrd_updater --query', r.stderr || r.stdout);
      return out;
    }
    for (const a of elements(r.stdout, 'attribute')) {
      const node = a.node ?? a.host;
      if (node && a.value) out.set(node, a.value);
    }
    return out;
  }

  /**
   * attrd cannot remove an attribute: --delete sets it to the empty string. That is an
   * update like any other, so it must say --private too: without it the attribute
   * turned public after the first post-promote, and every later pre-promote write went
   * to the CIB and aborted the transition (0.3-0.4 s per failover, issue #21).
   */
  async unpublish(name: string): Promise<void> {
    await run('attrd_updater', ['--private', '--delete', '--name', name]);
  }

  async promotedPin(): Promise<string | undefined> {
    const r = await run('cibadmin', ['--query', '--scope', 'configuration']);
    if (r.exitCode !== 0) throw new PacemakerError('cibadmin --query', r.stderr);
    return promotedPinIn(r.stdout, this.resource);
  }
  async totemTiming(): Promise<TotemTiming | undefined> {
    const value = async (key: string) => {
      const r = await run('corosync-cmapctl', ['-g', `runtime.config.totem.${key}`]).catch(() => undefined);
      const m = r?.exitCode === 0 ? /=\s*(\d+)\s*$/.exec(r.stdout.trim()) : null;
      return m ? Number(m[1]) : undefined;
    };
    const [tokenMs, consensusMs] = await Promise.all([value('token'), value('consensus')]);
    return tokenMs !== undefined && consensusMs !== undefined ? { tokenMs, consensusMs } : undefined;
  }

}

/** promotedPin over a CIB configuration section; exported for tests. */
export function promotedPinIn(configuration: string, resource: string): string | undefined {
  // The promotable clone that holds our primitive ("master" is the pre-2.0 spelling).
  const clones = new Set<string>();
  for (const tag of ['clone', 'master']) {
    const ids = elements(configuration, tag).map((a) => a.id);
    sections(configuration, tag).forEach((body, i) => {
      if (ids[i] && elements(body, 'primitive').some((p) => p.id === resource)) clones.add(ids[i]);
    });
  }
  const pins = elements(configuration, 'rsc_location').filter(
    (c) =>
      c.rsc !== undefined &&
      clones.has(c.rsc) &&
      (c.role === 'Promoted' || c.role === 'Master') &&
      c.node !== undefined &&
      /^\+?INFINITY$/i.test(c.score ?? ''),
  );
  return pins.length === 1 ? pins[0].node : undefined;
}
