// The shipped Prometheus alert rules are valid for Prometheus itself: promtool
// (Debian's prometheus package, installed by test/setup.sh) checks them.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const RULES = 'packaging/prometheus/tandem-alerts.yml';
const promtool = spawnSync('promtool', ['--version']).status === 0;

describe('prometheus alert rules', () => {
  it.skipIf(!promtool)('alert rules - promtool check rules accepts packaging/prometheus/tandem-alerts.yml (skipped: promtool absent, apt-get install prometheus)', () => {
    const out = execFileSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS: 6 rules found/);
  });

  it.skipIf(!promtool)('alert rules - promtool test rules: each alert fires on its situation after its `for`, and not on look-alikes', () => {
    // Cases in test/packaging/tandem-alerts.test.yml; promtool exits non-zero on any mismatch.
    const out = execFileSync('promtool', ['test', 'rules', 'test/packaging/tandem-alerts.test.yml'], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS/);
  });

  it('alert rules - each alert docs/metrics.md promises is there', () => {
    const text = readFileSync(RULES, 'utf8');
    for (const name of ['TandemNoReadyBackup', 'TandemTwoPrimaries', 'TandemDrLagHigh', 'TandemMemoryAlarm', 'TandemJournalSyncSlow']) expect(text).toMatch(new RegExp(`alert: ${name}\\b`));
  });
});
