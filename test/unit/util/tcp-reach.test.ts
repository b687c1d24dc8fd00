// probeTcp and connectWithin against real sockets on 127.0.0.1. A silent address
// (one that drops SYNs) needs a network namespace: test/integration/ha-unplug.test.ts
// checks that case on a pulled cable.
import { createServer, type AddressInfo, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { connectWithin, probeTcp } from '../../../src/util/tcp-reach.js';

let server: Server | undefined;

afterEach(async () => {
  await new Promise((r) => (server ? server.close(r) : r(undefined)));
  server = undefined;
});

async function listening(): Promise<number> {
  server = createServer((s) => s.destroy());
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

/** A port nothing listens on (the kernel answers with a reset). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

describe('tcp-reach', () => {
  it('probeTcp - a listener answers; a closed port is refused (the host is up), both before the deadline', async () => {
    const port = await listening();
    expect(await probeTcp('127.0.0.1', port, { deadlineMs: 5000, resendMs: 100 })).toBe('answered');
    expect(await probeTcp('127.0.0.1', await closedPort(), { deadlineMs: 5000, resendMs: 100 })).toBe('refused');
  });

  it('connectWithin - connects like net.connect and calls back once connected', async () => {
    const port = await listening();
    let connected = false;
    const socket = connectWithin(1000)(port, '127.0.0.1', {}, () => (connected = true));
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('error', reject);
    });
    expect(connected).toBe(true);
    socket.destroy();
  });

  it('connectWithin - a refused connect reports the kernel error, not a deadline', async () => {
    const socket = connectWithin(5000)(await closedPort(), '127.0.0.1', {}, () => undefined);
    const err = await new Promise<NodeJS.ErrnoException>((resolve) => socket.once('error', resolve));
    expect(err.code).toBe('ECONNREFUSED');
  });
});
