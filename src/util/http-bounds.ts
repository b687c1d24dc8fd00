// Bounds for an HTTP listener whoever reaches its port may use (the console, the
// metrics endpoint): a slow or silent client must not hold a connection for ever,
// nor many of them the process's file descriptors, which AMQP clients and the
// journal need; nor may one address take every connection there is, so that a host
// that holds its share (each connection kept up to the request timeout, then made
// again) still leaves room for the operators' browsers and the scrapers.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { AddressTally } from './address-tally.js';
import { monotonicNow } from './monotonic-clock.js';

/**
 * Requests one connection may have unanswered at once (HTTP/1.1 pipelining); one more
 * closes the connection. Browsers, curl and Prometheus send one and wait for its answer.
 */
export const MAX_UNANSWERED_PER_CONNECTION = 4;

/**
 * How long an answer the handler has ended may wait for its client to take it: a
 * client that never reads held the answer's bytes (up to megabytes: a console page,
 * a metrics page) and its connection for as long as it stayed connected. At 20 KiB/s a
 * 1.25 MB answer, the console's largest, is taken in time.
 */
export const ANSWER_DEADLINE_MS = 60_000;

/**
 * `maxPerAddress`: connections one remote address may hold at once (a reverse proxy is
 * one address); `answerDeadlineMs`: ANSWER_DEADLINE_MS, shorter in tests.
 */
export function boundHttpServer(server: Server, maxConnections: number, maxPerAddress = Math.max(1, Math.floor(maxConnections / 2)), answerDeadlineMs = ANSWER_DEADLINE_MS): void {
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  server.maxHeadersCount = 64;
  server.maxConnections = maxConnections;
  server.on('clientError', (_err, socket) => socket.destroy());
  const open = new AddressTally();
  // The raw socket, before any TLS handshake: a held handshake counts too.
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    if (open.count(address) >= maxPerAddress) {
      socket.destroy();
      return;
    }
    socket.once('close', open.take(address));
  });
  boundPipelining(server);
  boundUntakenAnswers(server, answerDeadlineMs);
}

/**
 * Whether the request's connection is gone (closed for pipelining too much, or by its
 * client): its handler starts no work for it, as nobody can be answered.
 */
export function connectionGone(req: IncomingMessage): boolean {
  return req.socket.destroyed;
}

/**
 * Node parses every request a client pipelines and hands each to the handler at once,
 * holding it until it is answered; it stops reading only when answers pile up unsent.
 * A handler that waits before answering (a login behind the throttle, a scrape) let
 * one connection's 50,000 pipelined logins hold 600 MB and queue 50,000 password
 * hashes, which every AMQP login then waited behind. Before the handler (prepended),
 * a request beyond MAX_UNANSWERED_PER_CONNECTION closes its connection; Node still
 * hands the handler the rest of what it read, which connectionGone() tells it to skip.
 */
function boundPipelining(server: Server): void {
  const unanswered = new WeakMap<Socket, number>();
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    if (socket.destroyed) return;
    const held = unanswered.get(socket) ?? 0;
    if (held >= MAX_UNANSWERED_PER_CONNECTION) {
      socket.destroy();
      return;
    }
    unanswered.set(socket, held + 1);
    let counted = true;
    const answered = () => {
      if (!counted) return;
      counted = false;
      unanswered.set(socket, (unanswered.get(socket) ?? 1) - 1);
    };
    res.once('finish', answered);
    res.once('close', answered);
  });
}

/**
 * Close the connection of an answer its client has not taken `deadlineMs` after the
 * handler ended it (bytes still waiting to be written: `writableEnded` without
 * `writableFinished`). Node's own timeouts stop at the request (requestTimeout) and
 * start again only once the answer is written (keepAliveTimeout), so nothing else
 * bounds this wait. A stream (the console's events) never ends and is not looked
 * at: it bounds itself by skipping what its client has not taken (live.ts). A
 * handler's own time before it answers (a purge answered when done) does not count.
 */
function boundUntakenAnswers(server: Server, deadlineMs: number): void {
  const waiting = new Map<ServerResponse, number>();
  server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    waiting.set(res, 0);
    const done = () => waiting.delete(res);
    res.once('finish', done);
    res.once('close', done);
  });
  // A sweep, not a timer per answer: answers are mostly taken at once, and a
  // handler's end() has no event of its own to start a timer on.
  const sweep = setInterval(() => {
    const now = monotonicNow();
    for (const [res, endedAt] of waiting) {
      if (!res.writableEnded) continue;
      if (endedAt === 0) waiting.set(res, now);
      else if (now - endedAt >= deadlineMs) {
        waiting.delete(res);
        res.socket?.destroy();
      }
    }
  }, Math.max(10, Math.floor(deadlineMs / 6)));
  sweep.unref();
  server.once('close', () => clearInterval(sweep));
}
