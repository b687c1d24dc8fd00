// A DR source given by an IPv6 address (amqp://[::1]:PORT): the copy follows it, and the
// source is shown and kept as [::1]:PORT. Written without brackets (::1:PORT), as it was,
// the journal's spelling could not be read back and the copy never connected.
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drStatus } from './helpers.js';

const hasIpv6Loopback = Object.values(networkInterfaces()).some((addrs) => addrs?.some((a) => a.family === 'IPv6' && a.address === '::1'));
if (!hasIpv6Loopback) process.stderr.write('DR IPv6 source test skipped: this machine has no ::1 on its loopback interface\n');

describe.skipIf(!hasIpv6Loopback)('DR source on IPv6 (skipped without ::1 on lo)', () => {
  let source: TestBroker;
  let copy: TestBroker;

  beforeAll(async () => {
    source = await TestBroker.start({ args: ['--host', '::1'] });
    copy = await TestBroker.start();
  });
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR - a secondary follows a source given as amqp://[::1]:PORT, and shows it with brackets', async () => {
    expect(source.stdout).toContain(`listening on [::1]:${source.port}`);
    const sourceUrl = `amqp://[::1]:${source.port}`;
    const add = await tandem(['queue', 'add', 'v6', '--durable', '-b', sourceUrl]);
    expect(add.code, add.stderr).toBe(0);
    const sender = await TestClient.connect({ host: '::1', port: source.port });
    try {
      const outcomes = await sender.send('v6', ['a', 'b', 'c']);
      expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted', 'accepted']);
    } finally {
      await sender.close();
    }
    const dr = await tandem(['dr', 'add', 'v6', '--source', sourceUrl, '-b', copy.url]);
    expect(dr.code, dr.stderr).toBe(0);
    await waitFor(async () => (await drStatus(copy.port)).find((r) => r.queue === 'v6')?.link === 'connected', { timeout: 30_000, name: 'DR link to [::1] up' });
    await waitFor(async () => (await contents(copy.port, 'v6')).length === 3, { timeout: 30_000, name: 'three messages copied from [::1]' });
    expect(await contents(copy.port, 'v6')).toEqual(['a', 'b', 'c']);
    const list = await tandem(['dr', 'list', '--json', '-b', copy.url]);
    expect(list.code, list.stderr).toBe(0);
    expect(JSON.parse(list.stdout)).toContainEqual(expect.objectContaining({ queue: 'v6', source: `[::1]:${source.port}`, state: 'passive' }));
    const row = (await drStatus(copy.port)).find((r) => r.queue === 'v6')!;
    expect(row['last-error']).toBeNull();
  });

  it('DR - the copy reconnects to [::1] after its own restart (the journal kept a source it can read back)', async () => {
    const dataDir = copy.dataDir;
    await copy.kill();
    const sender = await TestClient.connect({ host: '::1', port: source.port });
    try {
      await sender.send('v6', ['d']);
    } finally {
      await sender.close();
    }
    copy = await TestBroker.start({ dataDir });
    await waitFor(async () => (await contents(copy.port, 'v6')).length === 4, { timeout: 30_000, name: 'the fourth message copied after the restart' });
    expect(await contents(copy.port, 'v6')).toEqual(['a', 'b', 'c', 'd']);
    expect(copy.stdout + copy.stderr).not.toMatch(/cannot read/);
  });
});
