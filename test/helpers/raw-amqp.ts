// A raw TCP peer for tests that speak AMQP the way no real client does: it writes
// the bytes it is given, keeps (or, paused, refuses to read) what comes back, and
// tells whether and when the broker closed the connection.
import { createConnection, type Socket } from 'node:net';
import type { Composite } from '../../src/amqp/engine/composite.js';
import { readFrame, startsProtocolHeader } from '../../src/amqp/engine/frames.js';

/** A frame the broker sent: its size from its header, its channel and its performative (read with the engine's frame reader). */
export interface ReceivedFrame {
  size: number;
  channel: number;
  body: Composite | undefined;
  /** What follows the performative (a transfer's message bytes). */
  payload: Buffer;
}

export class RawPeer {
  private readonly received: Buffer[] = [];
  receivedBytes = 0;
  closed = false;
  private readonly closedPromise: Promise<void>;

  private constructor(readonly socket: Socket) {
    socket.on('data', (d: Buffer) => {
      this.received.push(d);
      this.receivedBytes += d.length;
    });
    this.closedPromise = new Promise((resolve) => {
      const done = () => {
        this.closed = true;
        resolve();
      };
      socket.once('close', done);
      socket.on('error', () => {});
    });
  }

  /** Connect; with `paused` the socket is never read (the kernel buffers fill, then TCP stops the broker's writes). */
  static connect(port: number, options: { paused?: boolean; receiveBuffer?: number } = {}): Promise<RawPeer> {
    return new Promise((resolve, reject) => {
      const socket = createConnection({ host: '127.0.0.1', port });
      socket.setNoDelay(true);
      if (options.paused) socket.pause();
      socket.once('connect', () => {
        socket.off('error', reject);
        const peer = new RawPeer(socket);
        if (options.paused) socket.pause();
        resolve(peer);
      });
      socket.once('error', reject);
    });
  }

  write(...chunks: Buffer[]): void {
    if (!this.socket.destroyed) this.socket.write(Buffer.concat(chunks));
  }

  /** Everything received so far. */
  get data(): Buffer {
    return Buffer.concat(this.received);
  }

  /** Every whole frame received so far (protocol headers skipped). */
  frames(): ReceivedFrame[] {
    const data = this.data;
    const out: ReceivedFrame[] = [];
    for (let at = 0; data.length - at >= 8; ) {
      if (startsProtocolHeader(data, at)) {
        at += 8;
        continue;
      }
      const size = data.readUInt32BE(at);
      if (data.length - at < size) break;
      const header = { size, doff: data[at + 4]!, type: data[at + 5]!, channel: data.readUInt16BE(at + 6) };
      const f = readFrame(data, at, header);
      out.push({ size, channel: header.channel, body: f.body, payload: data.subarray(f.payloadStart, f.end) });
      at += size;
    }
    return out;
  }

  /** Resolves true once the broker has closed the connection, false after `ms`. */
  async waitClosed(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)));
    const result = await Promise.race([this.closedPromise.then(() => true), timeout]);
    clearTimeout(timer);
    return result;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** The first AMQP error condition in bytes the broker sent (a close, end or detach), if any. */
export function conditionIn(data: Buffer): string | undefined {
  return /amqp:[a-z-]+(?::[a-z-]+)*/.exec(data.toString('latin1'))?.[0];
}
