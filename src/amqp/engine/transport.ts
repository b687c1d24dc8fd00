// The binding of a Connection to a net or tls socket: what is read is fed in;
// what the connection produced while Node handled this round of I/O is written
// at once, corked, so the socket hands it to the kernel as one writev (headers
// and payloads as separate buffers: a message's bytes are never copied into a
// frame). When the socket's buffer is full the connection is told it is not
// writable (its links stop being sendable) and reading pauses until 'drain',
// so a peer that does not read cannot make us queue without end.
import type { Socket } from 'node:net';
import type { Connection } from './connection.js';

export interface TransportOptions {
  /** After the connection is finished and its last bytes are written, wait this long for the peer to close before destroying the socket. */
  closeGraceMs?: number;
}

export class Transport {
  private flushScheduled = false;
  private timer: NodeJS.Timeout | undefined;
  private destroyTimer: NodeJS.Timeout | undefined;
  private ending = false;

  constructor(
    readonly connection: Connection,
    readonly socket: Socket,
    private readonly options: TransportOptions = {},
  ) {
    connection.onOutput = () => this.schedule();
    // Writes are already gathered per tick: Nagle would only hold the last one back (a reply, a disposition).
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      connection.feed(chunk);
      this.afterWork();
    });
    socket.on('drain', () => {
      socket.resume();
      connection.drained();
      this.afterWork();
    });
    socket.on('end', () => {
      connection.ended();
      this.flush();
      socket.end();
    });
    socket.on('close', () => {
      connection.ended();
      this.stopTimers();
      // The grace for a peer to close is over once it has: a timer left to run would keep
      // this transport, its connection and all it holds for the rest of the grace (at a
      // thousand connections a second, two thousand of them).
      if (this.destroyTimer) clearTimeout(this.destroyTimer);
      this.destroyTimer = undefined;
    });
    // The error is the socket's (reset, TLS); 'close' follows and ends the connection.
    socket.on('error', (err: Error & { code?: string }) => connection.log('debug', 'socket error', { code: err.code, error: err.message }));
    if (connection.hasOutput) this.schedule();
    this.armTimer();
  }

  private afterWork(): void {
    if (this.connection.hasOutput) this.schedule();
    else if (this.connection.finished) this.finish();
    this.armTimer();
  }

  private schedule(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  /** Write everything queued, corked: one writev. */
  flush(): void {
    this.flushScheduled = false;
    const socket = this.socket;
    const buffers = this.connection.takeOutput();
    if (buffers.length > 0 && !socket.destroyed && socket.writable) {
      socket.cork();
      for (const b of buffers) socket.write(b);
      socket.uncork();
      if (socket.writableNeedDrain && this.connection.writable) {
        this.connection.writable = false;
        socket.pause();
      } else {
        this.connection.written();
      }
    }
    if (this.connection.finished) this.finish();
  }

  private finish(): void {
    if (this.ending) return;
    this.ending = true;
    this.stopTimers();
    if (!this.socket.destroyed) this.socket.end();
    const grace = this.options.closeGraceMs ?? 2000;
    this.destroyTimer = setTimeout(() => this.socket.destroy(), grace);
    this.destroyTimer.unref();
  }

  private armTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.ending) return;
    const next = this.connection.tick();
    if (this.connection.hasOutput) this.schedule();
    if (this.connection.finished) {
      this.schedule();
      return;
    }
    if (next === undefined) return;
    // tick() never asks for more than half an hour (the heartbeat cap), well inside setTimeout's range.
    this.timer = setTimeout(() => this.armTimer(), Math.min(next, 0x7fffffff));
    this.timer.unref();
  }

  private stopTimers(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Close the connection (with its close frame) and the socket after it. */
  close(): void {
    this.connection.close();
    this.schedule();
  }
}
