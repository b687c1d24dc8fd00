// Bounds for an HTTP listener whoever reaches its port may use (the console, the
// metrics endpoint): a slow or silent client must not hold a connection for ever,
// nor many of them the process's file descriptors, which AMQP clients and the
// journal need.
import type { Server } from 'node:http';

export function boundHttpServer(server: Server, maxConnections: number): void {
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  server.maxHeadersCount = 64;
  server.maxConnections = maxConnections;
  server.on('clientError', (_err, socket) => socket.destroy());
}
