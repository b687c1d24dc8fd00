// An administrator closes a client connection (`tandem connection close`, management
// DELETE connection) on a real tandemd. A client that asked for an idle-time-out is
// told why: a close carrying amqp:connection:forced, then the socket goes. One that did
// not gets its transport dropped without a frame, which every client notices (python-
// proton ignores a `forced` close and would wait for ever: src/amqp/server.ts
// closeConnection, test/interop/proton.test.ts).
import type { EventContext } from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';

let broker: TestBroker;

beforeAll(async () => {
  broker = await TestBroker.start();
});

afterAll(async () => {
  await killAllBrokers();
});

interface Ending {
  closeFrame: { condition?: string; description?: string } | undefined;
  disconnected: boolean;
}

function watchEnding(client: TestClient): Ending {
  const ending: Ending = { closeFrame: undefined, disconnected: false };
  client.connection.on('connection_close', (ctx: EventContext) => {
    const e = (ctx.connection as unknown as { error?: { condition?: string; description?: string } }).error;
    ending.closeFrame = { condition: e?.condition, description: e?.description };
  });
  client.connection.on('disconnected', () => (ending.disconnected = true));
  return ending;
}

/** Close, as an administrator, the connection of the client whose container id is `container`. */
async function closeByAdmin(container: string): Promise<void> {
  const list = await tandem(['connection', 'list', '--json', '-b', broker.url]);
  expect(list.code, list.stderr).toBe(0);
  const conn = (JSON.parse(list.stdout) as Array<{ id: string; container: string }>).find((c) => c.container === container);
  expect(conn, `connection of ${container} listed`).toBeDefined();
  const closed = await tandem(['connection', 'close', conn!.id, '-b', broker.url]);
  expect(closed.code, closed.stderr).toBe(0);
}

const containerOf = (c: TestClient) => (c.connection as unknown as { options: { container_id: string } }).options.container_id;

describe('admin close', () => {
  it('admin close - a client with an idle-time-out gets a close carrying amqp:connection:forced, then the socket goes', async () => {
    const client = await TestClient.connect({ port: broker.port, idle_time_out: 10_000 });
    const ending = watchEnding(client);
    await client.openReceiver('admin.close.q');
    await closeByAdmin(containerOf(client));
    await waitFor(() => ending.disconnected, { timeout: 10_000, name: 'client disconnected' });
    expect(ending.closeFrame).toEqual({ condition: 'amqp:connection:forced', description: 'the connection was closed by an administrator' });
    await waitFor(() => broker.stderr.includes('"how":"close frame"'), { name: 'close logged' });
  });

  it('admin close - a client without an idle-time-out has its transport dropped, no frame, and notices', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const ending = watchEnding(client);
    await client.openReceiver('admin.close.q');
    await closeByAdmin(containerOf(client));
    await waitFor(() => ending.disconnected, { timeout: 10_000, name: 'client disconnected' });
    expect(ending.closeFrame).toBeUndefined();
    // The other client goes on.
    const other = await TestClient.connect({ port: broker.port });
    expect((await other.send('admin.close.q', ['after']))[0]!.state).toBe('accepted');
    await other.close();
  });
});
