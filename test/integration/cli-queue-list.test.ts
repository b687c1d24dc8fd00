// `tandem queue list` leaves out the CLI's own reply queue (a temporary queue that
// exists only while the command runs: it showed in every listing, one consumer, a new
// name each time), and only that one: another connection's temporary queue is shown
// to an admin as before.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, type TestReceiver } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';

describe('tandem queue list', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it("queue list - shows the broker's queues and other connections' temporary queues, not the command's own reply queue", async () => {
    const broker = await TestBroker.start();
    const add = await tandem(['queue', 'add', 'orders', '--durable', '-b', broker.url]);
    expect(add.code, add.stderr).toBe(0);
    const client = await TestClient.connect({ port: broker.port });
    const dynamic: TestReceiver = await client.openReceiver({ dynamic: true });
    const replies = (dynamic.receiver as unknown as { source: { address: string } }).source.address;

    const list = await tandem(['queue', 'list', '--json', '-b', broker.url]);
    expect(list.code, list.stderr).toBe(0);
    const names = (JSON.parse(list.stdout) as Array<{ name: string }>).map((q) => q.name).sort();
    expect(names).toEqual(['orders', replies].sort());
    // The table too: one row per queue, the other connection's reply queue among them, no other.
    const table = await tandem(['queue', 'list', '-b', broker.url]);
    const rows = table.stdout.split('\n').slice(2).filter((line) => line.trim() !== '');
    expect(rows.map((line) => line.split(/\s+/)[0]).sort()).toEqual(['orders', replies].sort());
    await client.close();
  });
});
