// boundHttpServer (src/util/http-bounds.ts), as clients of a port see it: one address
// may hold only its share of the connections, so a host that holds its share open
// leaves the others room; its connections, once closed, free the share again. A
// connection may not pile up pipelined requests its handler would each start work for.
import { createServer, get, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_UNANSWERED_PER_CONNECTION, boundHttpServer, connectionGone } from '../../../src/util/http-bounds.js';

let server: Server | undefined;
const sockets: Socket[] = [];

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function listening(maxConnections: number, maxPerAddress: number): Promise<number> {
  server = createServer((_req, res) => res.end('served'));
  boundHttpServer(server, maxConnections, maxPerAddress);
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return (server.address() as { port: number }).port;
}

/** A socket from `from` that starts a request and never finishes it; whether it is still open. */
function hold(port: number, from: string): () => boolean {
  let open = true;
  const socket = connect({ port, host: '127.0.0.1', localAddress: from }, () => socket.write('GET / HTTP/1.1\r\n'));
  socket.on('close', () => (open = false));
  socket.on('error', () => undefined);
  sockets.push(socket);
  return () => open;
}

/** A whole request from `from`: its body, or the error's code. */
function request(port: number, from: string): Promise<string> {
  return new Promise((resolve) => {
    const req = get({ host: '127.0.0.1', port, localAddress: from, agent: false }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('http bounds', () => {
  it('http bounds - one address holds at most its share; another is served meanwhile; a share closed is free again', async () => {
    const port = await listening(16, 4);
    const held = Array.from({ length: 10 }, () => hold(port, '127.0.0.1'));
    await sleep(500);
    expect(held.filter((open) => open()).length).toBe(4);
    // The holder's next request is refused; another address is served.
    expect(await request(port, '127.0.0.1')).not.toBe('served');
    expect(await request(port, '127.0.0.2')).toBe('served');
    for (const s of sockets.splice(0)) s.destroy();
    await sleep(200);
    expect(await request(port, '127.0.0.1')).toBe('served');
  });

  it('http bounds - a connection that pipelines past its unanswered requests is closed, and the handler starts nothing for the rest; one request at a time is served for ever', async () => {
    let started = 0;
    // /late answers nothing (a login behind the throttle, say); anything else is answered at once.
    server = createServer((req, res) => {
      if (connectionGone(req)) return;
      if (req.url === '/late') started++;
      else res.end('served');
    });
    boundHttpServer(server, 16);
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const flood = connect(port, '127.0.0.1');
    sockets.push(flood);
    let closed = false;
    flood.on('close', () => (closed = true));
    flood.on('error', () => undefined);
    flood.write('GET /late HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(1000));
    for (let i = 0; i < 100 && !closed; i++) await sleep(50);
    expect(closed).toBe(true);
    expect(started).toBe(MAX_UNANSWERED_PER_CONNECTION);
    // Requests one after the other on one connection are each answered.
    const polite = connect(port, '127.0.0.1');
    sockets.push(polite);
    let answers = 0;
    polite.on('data', (d: Buffer) => (answers += d.toString().split('served').length - 1));
    for (let i = 0; i < 3 * MAX_UNANSWERED_PER_CONNECTION; i++) {
      polite.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      for (let j = 0; j < 100 && answers <= i; j++) await sleep(10);
    }
    expect(answers).toBe(3 * MAX_UNANSWERED_PER_CONNECTION);
    expect(polite.destroyed).toBe(false);
  });

  it('http bounds - an answer its client does not take is dropped with its connection after the deadline; a slow handler, a stream and a client that reads are not', async () => {
    const deadlineMs = 300;
    const big = Buffer.alloc(16 << 20, 0x61);
    server = createServer((req, res) => {
      if (req.url === '/big') res.end(big);
      else if (req.url === '/slow') setTimeout(() => res.end('served late'), 4 * deadlineMs);
      else {
        // A stream: headers and a first event, never ended.
        res.writeHead(200, { 'Content-Type': 'text/event-stream' });
        res.write('data: 1\n\n');
      }
    });
    boundHttpServer(server, 16, 16, deadlineMs);
    // Closed as the server sees it: a client that reads nothing never reads to the end either.
    const serverSide = new Map<number, Socket>();
    server.on('connection', (socket: Socket) => serverSide.set(socket.remotePort!, socket));
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const client = (path: string, read: boolean) => {
      const socket = connect(port, '127.0.0.1', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`));
      sockets.push(socket);
      const seen = {
        bytes: 0,
        get closed() {
          return serverSide.get(socket.localPort!)?.destroyed === true;
        },
      };
      socket.on('error', () => undefined);
      if (read) socket.on('data', (d: Buffer) => (seen.bytes += d.length));
      else socket.pause();
      return seen;
    };
    const untaken = client('/big', false);
    const taken = client('/big', true);
    const slow = client('/slow', true);
    const stream = client('/stream', true);
    for (let i = 0; i < 100 && !untaken.closed; i++) await sleep(50);
    expect(untaken.closed).toBe(true);
    for (let i = 0; i < 100 && slow.bytes === 0; i++) await sleep(50);
    await sleep(4 * deadlineMs);
    expect(taken.closed).toBe(false);
    expect(taken.bytes).toBeGreaterThan(big.length);
    expect(slow.closed).toBe(false);
    expect(slow.bytes).toBeGreaterThan(0);
    expect(stream.closed).toBe(false);
    expect(stream.bytes).toBeGreaterThan(0);
  });
});
