// Transactions across DR: committed multi-queue transactions (python
// qpid-proton) appear whole on the secondary, never half, and rolled-back ones
// never. The secondary's depths are sampled in one DR-STATUS reply while the
// transactions run: queue A and B must always hold the same number.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { debianPython } from '../helpers/python.js';
import { contents, drFlush, drStatus, mgmt } from './helpers.js';

function txMulti(url: string, a: string, b: string, count: number): Promise<Record<string, string[]>> {
  return new Promise((resolve, reject) => {
    execFile(debianPython, [join(import.meta.dirname, 'py', 'tx_multi.py'), url, a, b, String(count)], { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`tx_multi.py: ${err.message}\n${stderr}`));
      resolve(JSON.parse(stdout.trim().split('\n').at(-1) as string) as Record<string, string[]>);
    });
  });
}

describe('DR transactions', () => {
  let primary: TestBroker;
  let secondary: TestBroker;

  beforeAll(async () => {
    primary = await TestBroker.start();
    secondary = await TestBroker.start();
  });
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR - committed multi-queue transactions appear whole, rolled-back ones never', async () => {
    // The queues do not exist yet on either side: the source's declares create them on the secondary.
    await mgmt(secondary.port, 'DR-ADD', { queue: 'tx-a', source: primary.url, mode: 'enqueue-and-dequeue' });
    await mgmt(secondary.port, 'DR-ADD', { queue: 'tx-b', source: primary.url, mode: 'enqueue-only' });
    let sampling = true;
    const samples: Array<[number, number]> = [];
    const sampler = (async () => {
      while (sampling) {
        const rows = await drStatus(secondary.port);
        const a = rows.find((r) => r.queue === 'tx-a')?.depth ?? 0;
        const b = rows.find((r) => r.queue === 'tx-b')?.depth ?? 0;
        samples.push([a, b]);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const committed = await txMulti(`amqp://${primary.url}`, 'tx-a', 'tx-b', 30);
    await drFlush(primary.port, secondary.port);
    sampling = false;
    await sampler;
    expect(committed['tx-a'].length).toBe(20 * 3);
    expect(await contents(secondary.port, 'tx-a')).toEqual(committed['tx-a']);
    expect(await contents(secondary.port, 'tx-b')).toEqual(committed['tx-b']);
    expect(samples.length).toBeGreaterThan(5);
    for (const [a, b] of samples) {
      expect(a).toBe(b);
      expect(a % 3).toBe(0);
    }
  });
});
