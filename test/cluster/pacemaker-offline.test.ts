// Pacemaker's own tools, offline (a CIB file, no running cluster), against the
// installed agent and real tandemd processes: pcs accepts the promotable resource,
// crm_resource --force-* gets the right OCF codes, and crm_simulate promotes the
// instance the agent's scores rank first.
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backupScores, BEST_SCORE, PRIMARY_SCORE, promotionScore, type BrokerView } from '../../src/agent/election.js';
import { promotedPinIn } from '../../src/agent/pacemaker.js';
import { elements } from '../../src/agent/xml.js';
import { brokerDir, freePort, haAvailable, hasCommand, isRoot, killFromPidfile, run, tandemBin, tandemdBin, useInstalledAgent } from './helpers.js';

const usable = isRoot && hasCommand('pcs') && hasCommand('crm_resource') && hasCommand('crm_simulate') && hasCommand('cibadmin');
let uninstall: (() => Promise<void>) | undefined;
const work = mkdtempSync(join(tmpdir(), 'tandem-pcmk-'));
let broker: ReturnType<typeof brokerDir> | undefined;

beforeAll(async () => {
  if (usable) uninstall = await useInstalledAgent();
});

afterAll(async () => {
  if (broker) {
    await killFromPidfile(broker.pidfile);
    rmSync(broker.dir, { recursive: true, force: true });
  }
  rmSync(work, { recursive: true, force: true });
  await uninstall?.();
});

async function newCib(name: string): Promise<string> {
  const cib = join(work, name);
  const empty = await run('cibadmin', ['--empty']);
  writeFileSync(cib, empty.stdout);
  expect((await run('pcs', ['-f', cib, 'property', 'set', 'stonith-enabled=false'])).code).toBe(0);
  return cib;
}

describe.skipIf(!usable)('pacemaker tools (offline CIB)', () => {
  it('pcs -f accepts a minimal promotable resource and takes the agent’s operations', async () => {
    const cib = await newCib('minimal.xml');
    const r = await run('pcs', ['-f', cib, 'resource', 'create', 'broker', 'ocf:tandem:tandemd', 'promotable', 'promoted-max=1', 'notify=true']);
    expect(r.code, r.stderr).toBe(0);
    const xml = readFileSync(cib, 'utf8');
    const ops = elements(xml, 'op');
    expect(ops.filter((o) => o.name === 'monitor').map((o) => o.role).sort()).toEqual(['Promoted', 'Unpromoted']);
    expect(elements(xml, 'nvpair').find((n) => n.name === 'promotable')?.value).toBe('true');
    const meta = await run('crm_resource', ['--show-metadata', 'ocf:tandem:tandemd']);
    expect(meta.code).toBe(0);
    expect(meta.stdout).toContain('<version>1.1</version>');
  });

  it('crm_resource --force-* runs each action against a real tandemd with the right codes', async ({ skip }) => {
    if (!(await haAvailable())) skip('tandemd on this tree has no HA yet');
    broker = brokerDir(await freePort());
    const cib = await newCib('force.xml');
    const create = await run('pcs', [
      '-f', cib, 'resource', 'create', 'broker', 'ocf:tandem:tandemd',
      `config=${broker.conf}`, `binary=${tandemdBin}`, `tandem=${tandemBin}`, 'user=root', `pidfile=${broker.pidfile}`, `log_file=${broker.log}`,
      'promotable', 'promoted-max=1', 'notify=true',
    ]);
    expect(create.code, create.stderr).toBe(0);
    const force = async (what: string) => (await run('crm_resource', [`--force-${what}`, '-r', 'broker'], { env: { CIB_file: cib }, timeoutMs: 120_000 })).code;
    expect(await force('check'), 'not running').toBe(7);
    expect(await force('start')).toBe(0);
    expect(await force('check'), 'a backup').toBe(0);
    expect(await force('start'), 'starting a started broker').toBe(0);
    expect(await force('promote')).toBe(0);
    expect(await force('check'), 'the primary').toBe(8);
    expect(await force('promote'), 'promoting the primary again').toBe(0);
    expect(await force('demote')).toBe(0);
    expect(await force('check'), 'a backup again').toBe(0);
    expect(await force('stop')).toBe(0);
    expect(await force('check')).toBe(7);
    expect(await force('stop'), 'stopping a stopped broker').toBe(0);
  }, 180_000);

  it('crm_simulate: after the primary’s node fails, the backup the primary scored best is promoted', async () => {
    const cib = await newCib('primary-scores.xml');
    expect((await run('pcs', ['-f', cib, 'resource', 'create', 'broker', 'ocf:tandem:tandemd', 'promotable', 'promoted-max=1', 'notify=true'])).code).toBe(0);
    const up = join(work, 'ps-up.xml');
    const started = join(work, 'ps-started.xml');
    let r = await run('crm_simulate', ['-x', cib, '-O', up, '--quorum=true', '--node-up', 'node1', '--node-up', 'node2', '--node-up', 'node3', '-S']);
    expect(r.code, r.stderr).toBe(0);
    r = await run('crm_simulate', ['-x', up, '-O', started, '--quorum=true', '-S']);
    expect(r.code, r.stderr).toBe(0);
    // node1 runs the primary; its monitor scores the backups from the lags it counts
    // (node2 far behind, node3 caught up), mapped to nodes by their published broker ids.
    const scores = backupScores(
      [
        { id: 'b2', state: 'ready', lag: 50_000 },
        { id: 'b3', state: 'ready', lag: 3 },
      ],
      new Map([
        ['node2', 'b2'],
        ['node3', 'b3'],
      ]),
    );
    for (const [node, score] of [['node1', PRIMARY_SCORE], ...scores] as Array<[string, number | null]>) {
      const set = await run('crm_attribute', ['--promotion=broker', '--node', node, '--update', String(score)], { env: { CIB_file: started } });
      expect(set.code, set.stderr).toBe(0);
    }
    const promoted = join(work, 'ps-promoted.xml');
    r = await run('crm_simulate', ['-x', started, '-O', promoted, '--quorum=true', '-S', '--output-as=xml']);
    expect(elements(r.stdout, 'rsc_action').filter((a) => a.action === 'promote').map((a) => a.source)).toEqual(['node1']);
    r = await run('crm_simulate', ['-x', promoted, '--quorum=true', '--node-fail', 'node1', '-S', '--output-as=xml']);
    expect(r.code, r.stderr).toBe(0);
    expect(elements(r.stdout, 'rsc_action').filter((a) => a.action === 'promote').map((a) => a.source)).toEqual(['node3']);
  });

  it('a location constraint that pins the Promoted role (what a planned move leaves) is read from the CIB', async () => {
    const cib = await newCib('pin.xml');
    expect((await run('pcs', ['-f', cib, 'resource', 'create', 'broker', 'ocf:tandem:tandemd', 'promotable', 'promoted-max=1', 'notify=true'])).code).toBe(0);
    const configuration = async () => (await run('cibadmin', ['--query', '--scope', 'configuration'], { env: { CIB_file: cib } })).stdout;
    expect(promotedPinIn(await configuration(), 'broker')).toBeUndefined();
    // The constraint `pcs resource move broker-clone node2 --promoted` creates (pcs cannot move in a file).
    const add = await run('pcs', ['-f', cib, 'constraint', 'location', 'add', 'cli-prefer-broker-clone', 'broker-clone', 'node2', 'INFINITY', 'role=Promoted', '--force']);
    expect(add.code, add.stderr).toBe(0);
    expect(promotedPinIn(await configuration(), 'broker')).toBe('node2');
    expect(promotedPinIn(await configuration(), 'other'), 'another resource is not pinned').toBeUndefined();
    // A mere preference (not INFINITY), or one for the Unpromoted role, pins nothing.
    const cib2 = await newCib('pin2.xml');
    expect((await run('pcs', ['-f', cib2, 'resource', 'create', 'broker', 'ocf:tandem:tandemd', 'promotable', 'promoted-max=1', 'notify=true'])).code).toBe(0);
    expect((await run('pcs', ['-f', cib2, 'constraint', 'location', 'add', 'p1', 'broker-clone', 'node2', '100', 'role=Promoted', '--force'])).code).toBe(0);
    expect((await run('pcs', ['-f', cib2, 'constraint', 'location', 'add', 'p2', 'broker-clone', 'node3', 'INFINITY', 'role=Unpromoted', '--force'])).code).toBe(0);
    expect(promotedPinIn((await run('cibadmin', ['--query', '--scope', 'configuration'], { env: { CIB_file: cib2 } })).stdout, 'broker')).toBeUndefined();
  });

  it('crm_simulate promotes the most advanced ready backup by the agent’s scores', async () => {
    const cib = await newCib('simulate.xml');
    expect((await run('pcs', ['-f', cib, 'resource', 'create', 'broker', 'ocf:tandem:tandemd', 'promotable', 'promoted-max=1', 'notify=true'])).code).toBe(0);
    // Three nodes come up and each runs an Unpromoted instance.
    const started = join(work, 'started.xml');
    let r = await run('crm_simulate', ['-x', cib, '-O', join(work, 'up.xml'), '--quorum=true', '--node-up', 'node1', '--node-up', 'node2', '--node-up', 'node3', '-S']);
    expect(r.code, r.stderr).toBe(0);
    r = await run('crm_simulate', ['-x', join(work, 'up.xml'), '-O', started, '--quorum=true', '-S']);
    expect(r.code, r.stderr).toBe(0);
    // The primary died; what each backup's monitor then scores itself.
    const brokers: Record<string, BrokerView> = {
      node1: { address: '10.0.0.1:5672', state: 'ready', epoch: 4, lsn: 1200 },
      node2: { address: '10.0.0.2:5672', state: 'ready', epoch: 4, lsn: 1350 },
      node3: { address: '10.0.0.3:5672', state: 'catchup', epoch: 4, lsn: 1400 },
    };
    const peers = [...Object.values(brokers), { address: '10.0.0.4:5672', state: 'unreachable', epoch: 0, lsn: 0 }];
    for (const [node, b] of Object.entries(brokers)) {
      const score = promotionScore(b, peers);
      if (score === null) continue;
      const set = await run('crm_attribute', ['--promotion=broker', '--node', node, '--update', String(score)], { env: { CIB_file: started } });
      expect(set.code, set.stderr).toBe(0);
    }
    expect(promotionScore(brokers.node2, peers)).toBe(BEST_SCORE);
    expect(promotionScore(brokers.node3, peers), 'catchup gets no score').toBeNull();
    r = await run('crm_simulate', ['-x', started, '--quorum=true', '-S', '--output-as=xml']);
    expect(r.code, r.stderr).toBe(0);
    const promotes = elements(r.stdout, 'rsc_action').filter((a) => a.action === 'promote');
    expect(promotes.map((a) => a.source)).toEqual(['node2']);
  });
});
