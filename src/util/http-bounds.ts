// Bounds for an HTTP listener whoever reaches its port may use (the console, the
// metrics endpoint): a slow or silent client must not hold a connection for ever,
// nor many of them the process's file descriptors, which AMQP clients and the
// journal need; nor may one address take every connection there is, so that a host
// that holds its share (each connection kept up to the request timeout, then made
// again) still leaves room for the operators' browsers and the scrapers.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/** `maxPerAddress`: connections one remote address may hold at once (a reverse proxy is one address). */
export function boundHttpServer(server: Server, maxConnections: number, maxPerAddress = Math.max(1, Math.floor(maxConnections / 2))): void {
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  server.maxHeadersCount = 64;
  server.maxConnections = maxConnections;
  server.on('clientError', (_err, socket) => socket.destroy());
  const open = new Map<string, number>();
  // The raw socket, before any TLS handshake: a held handshake counts too.
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const held = open.get(address) ?? 0;
    if (held >= maxPerAddress) {
      socket.destroy();
      return;
    }
    open.set(address, held + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
    });
  });
}
