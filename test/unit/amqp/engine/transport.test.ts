// The transport over a real socket on 127.0.0.1: what it keeps once the socket is
// gone. A connection that outlives its socket keeps all it holds (sessions, links,
// deliveries, unread bytes): the million-frame fuzz found two thousand of them held by
// the close grace's timer and by login checks nobody waited for any more.
import { once } from 'node:events';
import { type AddressInfo, type Server, type Socket, createConnection, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { collected } from '../../../helpers/collected.js';
import { Connection } from '../../../../src/amqp/engine/connection.js';
import { Transport } from '../../../../src/amqp/engine/transport.js';
import { AMQP_HEADER, SASL_HEADER, perf, plainResponse } from '../../../helpers/amqp-frames.js';

let server: Server | undefined;
afterEach(async () => {
  server?.close();
  server = undefined;
});

/** A listener whose every socket gets a fresh server-role connection and transport. */
async function listen(make: (socket: Socket) => Connection): Promise<{ port: number; accepted: Promise<{ ref: WeakRef<Connection>; closed: Promise<unknown> }> }> {
  server = createServer();
  const accepted = new Promise<{ ref: WeakRef<Connection>; closed: Promise<unknown> }>((resolve) => {
    server!.once('connection', (socket: Socket) => {
      const closed = once(socket, 'close');
      const conn = make(socket);
      new Transport(conn, socket, { closeGraceMs: 60_000 });
      resolve({ ref: new WeakRef(conn), closed });
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { port: (server.address() as AddressInfo).port, accepted };
}

describe('engine transport - nothing outlives the socket', () => {
  it('engine transport - a connection closed in the protocol is let go once its peer closes the socket, not after the close grace', async () => {
    const { port, accepted } = await listen(() => new Connection({ role: 'server', containerId: 'transport-test' }));
    const client = createConnection({ host: '127.0.0.1', port });
    client.on('data', () => undefined);
    await once(client, 'connect');
    client.write(Buffer.concat([AMQP_HEADER, perf.open(), perf.close()]));
    // Our close answered, the server ends its side and would wait the grace (60 s here) for ours.
    await once(client, 'end');
    const { ref, closed } = await accepted;
    client.destroy();
    await closed;
    expect(await collected(ref), 'the connection is collected once the socket closed').toBe(true);
  });

  it('engine transport - a client that leaves during its PLAIN check: its connection is let go though the check would never end by itself', async () => {
    // Like a hash queued behind many others: it ends only when told to stop.
    const checks: Array<(identity: string | undefined) => void> = [];
    const plain = (_u: string, _p: string, _a: string, signal: AbortSignal) =>
      new Promise<string | undefined>((resolve, reject) => {
        const at = checks.push(resolve) - 1;
        signal.addEventListener('abort', () => {
          checks.splice(at, 1);
          reject(signal.reason);
        });
      });
    const { port, accepted } = await listen(() => new Connection({ role: 'server', containerId: 'transport-test', requireSasl: true, sasl: { plain } }));
    const client = createConnection({ host: '127.0.0.1', port });
    client.on('data', () => undefined);
    await once(client, 'connect');
    client.write(Buffer.concat([SASL_HEADER, perf.saslInit('PLAIN', plainResponse('alice', 'secret')), AMQP_HEADER, perf.open(), Buffer.alloc(20_000, 0x41)]));
    const { ref, closed } = await accepted;
    await new Promise((r) => setTimeout(r, 50));
    expect(checks).toHaveLength(1);
    client.destroy();
    await closed;
    expect(checks, 'the check was told to stop').toHaveLength(0);
    expect(await collected(ref), 'the connection is collected once the socket closed').toBe(true);
  });
});
