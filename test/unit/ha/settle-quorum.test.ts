// The settlement quorum (ha-min-ready-backups): how many ready backups a primary
// needs, which settings are refused, which are warned about, and how the key is read.
import { describe, expect, it } from 'vitest';
import { minReadyBackupsRefusal, minReadyBackupsRisk, requiredReadyBackups } from '../../../src/ha/settle-quorum.js';
import { ConfigError, loadSettings } from '../../../src/ops/config.js';

const cluster = (n: number, extra: Record<string, unknown> = {}) =>
  loadSettings({ haCluster: 'yes', haBrokersUrl: Array.from({ length: n }, (_, i) => `127.0.0.1:${5672 + i}`).join(','), ...extra });

describe('settle quorum', () => {
  it('a majority of ha-brokers-url: the primary plus floor(n/2) backups', () => {
    expect([1, 2, 3, 4, 5].map((n) => requiredReadyBackups('majority', n))).toEqual([0, 1, 1, 2, 2]);
    expect(requiredReadyBackups(0, 3)).toBe(0);
    expect(requiredReadyBackups(2, 3)).toBe(2);
  });

  it('refuses a count no cluster of that size can meet, warns below a majority', () => {
    expect(minReadyBackupsRefusal(2, 2)).toMatch(/can never be met: ha-brokers-url lists 2 brokers, so a primary has at most 1 backup/);
    expect(minReadyBackupsRefusal(2, 3)).toBeUndefined();
    expect(minReadyBackupsRefusal('majority', 1)).toBeUndefined();
    expect(minReadyBackupsRisk(0, 3)).toMatch(/settles alone when no backup is ready/);
    expect(minReadyBackupsRisk(1, 5)).toMatch(/fewer than a majority of the 5 brokers.*needs 2/);
    expect(minReadyBackupsRisk('majority', 3)).toBeUndefined();
    expect(minReadyBackupsRisk(2, 3)).toBeUndefined();
    // A one-broker "cluster" has nobody to wait for.
    expect(minReadyBackupsRisk(0, 1)).toBeUndefined();
  });

  it('ha-min-ready-backups: majority by default, a whole number, else a clear error', () => {
    expect(cluster(3).haMinReadyBackups).toBe('majority');
    expect(cluster(3, { haMinReadyBackups: '0' }).haMinReadyBackups).toBe(0);
    expect(cluster(3, { haMinReadyBackups: 'majority' }).haMinReadyBackups).toBe('majority');
    expect(() => cluster(3, { haMinReadyBackups: '-1' })).toThrow(ConfigError);
    expect(() => cluster(3, { haMinReadyBackups: 'half' })).toThrow(/expected majority or a whole number of backups/);
    expect(() => cluster(3, { haMinReadyBackups: '3' })).toThrow(/ha-min-ready-backups = 3 can never be met/);
  });
});
