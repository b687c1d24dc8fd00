// The metrics listener (src/ops/metrics.ts) as a client of the port sees it: whoever
// reaches it may not hold the broker's file descriptors with sockets that never
// finish a request.
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Broker } from '../../../src/broker/broker.js';
import { MAX_CONNECTIONS, Metrics } from '../../../src/ops/metrics.js';

const broker = { log: { lsn: 7 }, queues: new Map(), deadLettersLost: 0 } as unknown as Broker;
let metrics: Metrics | undefined;
const sockets: Socket[] = [];

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await metrics?.close();
  metrics = undefined;
});

/** A socket that starts a request and sends a header line now and then, never finishing. */
function dribble(port: number): { socket: Socket; open: () => boolean } {
  let open = true;
  const socket = connect(port, '127.0.0.1', () => socket.write('GET /metrics HTTP/1.1\r\n'));
  const timer = setInterval(() => socket.writable && socket.write('X-Slow: 1\r\n'), 1000);
  socket.on('close', () => {
    open = false;
    clearInterval(timer);
  });
  socket.on('error', () => undefined);
  sockets.push(socket);
  return { socket, open: () => open };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('metrics listener', () => {
  it('metrics listener - sockets past the limit are closed, and one that never finishes its headers goes in seconds', async () => {
    metrics = new Metrics({ broker, connections: () => 0 });
    const port = await metrics.listen('127.0.0.1', 0);
    const held = Array.from({ length: MAX_CONNECTIONS + 24 }, () => dribble(port));
    await sleep(1500);
    expect(held.filter((h) => h.open()).length).toBeLessThanOrEqual(MAX_CONNECTIONS);
    // headersTimeout (10 s), checked every second.
    await sleep(11_000);
    expect(held.filter((h) => h.open()).length).toBe(0);
    // And the port still serves a scrape.
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(text).toContain('tandem_log_lsn 7');
  }, 30_000);
});
