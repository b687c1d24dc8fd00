// resource-agents/tandemd against the OCF contract without a cluster: shellcheck,
// meta-data against ra-api-1.dtd, validate-all's codes, probes, and ocf-tester
// driving a real tandemd through start/monitor/promote/demote/stop.
import { existsSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { agentScript, brokerDir, freePort, haAvailable, hasCommand, killFromPidfile, ocfEnv, primaryScript, run, runAgent, tandemBin, tandemdBin } from './helpers.js';

const DTD = '/usr/share/resource-agents/ra-api-1.dtd';
const dirs: Array<{ dir: string; pidfile: string }> = [];

afterAll(async () => {
  for (const d of dirs) {
    await killFromPidfile(d.pidfile);
    rmSync(d.dir, { recursive: true, force: true });
  }
});

async function metaData(): Promise<string> {
  const r = await runAgent('meta-data', { OCF_ROOT: '/usr/lib/ocf' });
  expect(r.code).toBe(0);
  return r.stdout;
}

describe('resource agent - static checks', () => {
  it.skipIf(!hasCommand('shellcheck'))('shellcheck finds nothing in the agent and the rgmanager script', async () => {
    const r = await run('shellcheck', ['-x', agentScript, primaryScript]);
    expect(r.stdout + r.stderr).toBe('');
    expect(r.code).toBe(0);
  });

  it.skipIf(!hasCommand('xmllint') || !existsSync(DTD))('meta-data validates against ra-api-1.dtd', async () => {
    const xml = await metaData();
    const r = await run('sh', ['-c', `"$0" meta-data | xmllint --noout --dtdvalid ${DTD} -`, agentScript], { env: { OCF_ROOT: '/usr/lib/ocf' } });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/validity error|parser error/);
    expect(xml).toContain('<!DOCTYPE resource-agent SYSTEM "ra-api-1.dtd">');
  });

  it('meta-data: OCF 1.1, per-role monitors with different intervals, timeouts in seconds', async () => {
    const xml = await metaData();
    expect(xml).toContain('<version>1.1</version>');
    const monitors = [...xml.matchAll(/<action name="monitor"[^>]*>/g)].map((m) => m[0]);
    expect(monitors).toHaveLength(2);
    const roles = monitors.map((m) => /role="(\w+)"/.exec(m)?.[1]).sort();
    expect(roles).toEqual(['Promoted', 'Unpromoted']);
    const intervals = monitors.map((m) => /interval="(\w+)"/.exec(m)?.[1]);
    expect(new Set(intervals).size).toBe(2);
    for (const t of xml.matchAll(/timeout="([^"]*)"/g)) expect(t[1]).toMatch(/^\d+s$/);
    for (const a of ['start', 'stop', 'promote', 'demote', 'notify', 'validate-all', 'meta-data']) expect(xml).toContain(`<action name="${a}"`);
    for (const p of ['config', 'binary', 'tandem', 'data_dir', 'user', 'port', 'brokers_url', 'pidfile', 'start_wait', 'stop_wait']) {
      expect(xml).toMatch(new RegExp(`<parameter name="${p}"[^>]*required="0"`));
    }
  });
});

describe('resource agent - validate-all and probes', () => {
  const setup = async (extra = '') => {
    const b = brokerDir(await freePort(), undefined, extra);
    dirs.push(b);
    return b;
  };

  it('a complete configuration validates', async () => {
    const b = await setup();
    const r = await runAgent('validate-all', ocfEnv(b));
    expect(r.code, r.stderr).toBe(0);
  });

  it('a missing binary or config file is OCF_ERR_INSTALLED, with the reason', async () => {
    const b = await setup();
    let r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_binary: '/nonexistent/tandemd' }));
    expect(r.code).toBe(5);
    expect(r.stderr).toMatch(/ocf-exit-reason:.*\/nonexistent\/tandemd/);
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_config: '/nonexistent/tandemd.conf' }));
    expect(r.code).toBe(5);
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_user: 'no-such-user-here' }));
    expect(r.code).toBe(5);
  });

  it('a configuration that cannot work is OCF_ERR_CONFIGURED', async () => {
    const notClustered = await setup('ha-cluster=no');
    let r = await runAgent('validate-all', ocfEnv(notClustered));
    expect(r.code).toBe(6);
    expect(r.stderr).toMatch(/ha-cluster=yes/);
    const b = await setup();
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_CRM_meta_clone_max: '3', OCF_RESKEY_CRM_meta_promoted_max: '1' }));
    expect(r.code, 'promotable without notify').toBe(6);
    expect(r.stderr).toMatch(/notify=true/);
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_CRM_meta_clone_max: '3' }));
    expect(r.code, 'a plain clone').toBe(6);
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_CRM_meta_clone_max: '3', OCF_RESKEY_CRM_meta_promoted_max: '2', OCF_RESKEY_CRM_meta_notify: 'true' }));
    expect(r.code, 'two primaries').toBe(6);
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_start_wait: 'active' }));
    expect(r.code).toBe(6);
    r = await runAgent('validate-all', ocfEnv(b, { OCF_RESKEY_CRM_meta_clone_max: '3', OCF_RESKEY_CRM_meta_promoted_max: '1', OCF_RESKEY_CRM_meta_notify: 'true' }));
    expect(r.code, r.stderr).toBe(0);
  });

  it('probes and monitors of a stopped broker say not running (7), also without the software', async () => {
    const b = await setup();
    expect((await runAgent('monitor', ocfEnv(b))).code).toBe(7);
    expect((await runAgent('monitor', ocfEnv(b, { OCF_RESKEY_CRM_meta_interval: '10000' }))).code).toBe(7);
    expect((await runAgent('monitor', ocfEnv(b, { OCF_RESKEY_tandem: '/nonexistent/tandem' }))).code).toBe(7);
    expect((await runAgent('monitor', ocfEnv(b, { OCF_RESKEY_binary: '/nonexistent/tandemd' }))).code).toBe(7);
    expect((await runAgent('stop', ocfEnv(b))).code).toBe(0);
    expect((await runAgent('stop', ocfEnv(b, { OCF_RESKEY_tandem: '/nonexistent/tandem' }))).code).toBe(0);
  });

  it('an unknown action is OCF_ERR_UNIMPLEMENTED; notify outside promotion succeeds', async () => {
    const b = await setup();
    expect((await runAgent('migrate_to', ocfEnv(b))).code).toBe(3);
    expect((await runAgent('notify', ocfEnv(b))).code).toBe(0);
  });
});

describe('resource agent - ocf-tester against a real tandemd', () => {
  it.skipIf(!hasCommand('ocf-tester'))('passes every ocf-tester check', async ({ skip }) => {
    if (!(await haAvailable())) skip('tandemd on this tree has no HA yet');
    const b = brokerDir(await freePort());
    dirs.push(b);
    const r = await run(
      'ocf-tester',
      ['-n', 'broker', '-o', `config=${b.conf}`, '-o', `binary=${tandemdBin}`, '-o', `tandem=${tandemBin}`, '-o', 'user=root', '-o', `pidfile=${b.pidfile}`, '-o', `log_file=${b.log}`, agentScript],
      { timeoutMs: 180_000 },
    );
    expect(r.stdout + r.stderr, r.stdout + r.stderr).toMatch(/passed all tests/);
    expect(r.code).toBe(0);
    expect(existsSync(b.pidfile), 'stop removed the pidfile').toBe(false);
  }, 200_000);
});
