// Back-pressure from a client's socket to its consumers. rhea writes whatever it is
// given and never asks whether the socket keeps up, so a consumer that does not read
// (presettled: every message it is sent has already left its queue) drew the whole
// backlog into the broker's memory as unwritten socket buffers. A connection whose
// socket holds more than OUTPUT_LIMIT_BYTES unwritten gets no more deliveries, on any
// of its links, until the socket drains.
import type { Socket } from 'node:net';

/**
 * Unwritten bytes a connection may hold. The kernel's own socket buffers come on top,
 * so a reader that keeps up never meets it; one that stops costs the broker this much
 * (plus what one turn of the event loop handed out) rather than its queues' backlog.
 */
export const OUTPUT_LIMIT_BYTES = 1024 * 1024;

export class OutputBudget {
  /** Bytes handed to rhea this turn; rhea writes them to the socket on its next tick. */
  private handed = 0;
  private resetScheduled = false;
  private waiting = false;

  constructor(
    private readonly socketOf: () => Socket | undefined,
    /** Called once the socket has room again: the connection's consumers may be fed. */
    private readonly onRoom: () => void,
    private readonly limit = OUTPUT_LIMIT_BYTES,
  ) {}

  /** True while the connection may not be given more to send. */
  get full(): boolean {
    const socket = this.socketOf();
    if (!socket) return false;
    if (socket.writableLength + this.handed <= this.limit) return false;
    this.waitForRoom(socket);
    return true;
  }

  /** A delivery of `bytes` was handed to rhea for this connection. */
  spent(bytes: number): void {
    this.handed += bytes;
    if (this.resetScheduled) return;
    this.resetScheduled = true;
    // After rhea's own tick (registered by the send that came first), the bytes are in
    // the socket's buffer and counted there.
    process.nextTick(() => {
      this.resetScheduled = false;
      this.handed = 0;
    });
  }

  private waitForRoom(socket: Socket): void {
    if (this.waiting) return;
    this.waiting = true;
    const room = (): void => {
      socket.off('drain', room);
      socket.off('close', gone);
      clearImmediate(check);
      this.waiting = false;
      this.onRoom();
    };
    const gone = (): void => {
      socket.off('drain', room);
      clearImmediate(check);
      this.waiting = false;
    };
    // 'drain' comes once a write found the buffer over its high-water mark and it has
    // emptied. If only this turn's handed bytes made it full, the buffer may never get
    // that high: look again once they are written.
    const check = setImmediate(() => {
      if (socket.writableLength <= this.limit) room();
    });
    socket.on('drain', room);
    socket.once('close', gone);
  }
}
