// Socket reads into consecutive slices of one large buffer (a slab), for the
// connections that receive big frames: the HA and DR replication streams.
//
// Node reads a socket into a fresh 64 KiB buffer each time. A replication frame
// (a batch of changes, often larger than one read) that a read ends inside was
// then copied, with the read that completes it, into one more new buffer (rhea's
// Buffer.concat): a backup allocated every byte it received twice, and memory
// outside the V8 heap counts towards V8's old-generation limit, so a durable
// backup ran a full GC several times a second on a 12 MiB heap (--trace-gc,
// --trace-incremental-marking). Here each read lands right after the previous
// one, so a frame that straddles reads is already contiguous in memory, and
// rhea-patches (patch 6) hands rhea the joined view instead of a copy. Only a
// frame that straddles two slabs is still copied.
//
// No byte of a slab is written twice, so views into it (the message bodies a
// backup keeps) stay valid; a slab is freed once nothing refers into it. The
// price: a kept body holds its whole slab, as it held its whole read before.
import { connect as netConnect, type OnReadOpts, type Socket } from 'node:net';

/** Big enough that few frames straddle two slabs, small enough that a kept body does not hold much. */
export const SLAB_BYTES = 512 * 1024;
/** A slab with less room than this left is done: a smaller read would only mean more reads. */
const MIN_READ_BYTES = 16 * 1024;

/**
 * `onread` options for net.connect that read into slabs and hand each read, as a
 * view, to `deliver`. (With `onread`, Node emits no 'data' events by itself.)
 */
export function slabReads(deliver: (chunk: Buffer) => void, slabBytes = SLAB_BYTES): OnReadOpts {
  let slab = Buffer.allocUnsafe(slabBytes);
  let used = 0;
  return {
    // Called once before the first read, then after each callback for the next read.
    buffer: () => {
      if (slab.length - used < MIN_READ_BYTES) {
        slab = Buffer.allocUnsafe(slabBytes);
        used = 0;
      }
      return slab.subarray(used);
    },
    callback: (nread, buf) => {
      used += nread;
      deliver((buf as Buffer).subarray(0, nread));
      return true; // rhea has no backpressure on input; neither do we
    },
  };
}

/** net.connect whose reads go into slabs and come out as 'data' events, as usual. */
export function connectReadingIntoSlabs(port: number, host: string, onConnected?: () => void): Socket {
  // eslint-disable-next-line prefer-const -- assigned once, read by the callback after connect
  let socket: Socket;
  socket = netConnect({ port, host, onread: slabReads((chunk) => socket.emit('data', chunk)) }, onConnected);
  return socket;
}

/** Two views that lie end to end in one ArrayBuffer: read one after the other into a slab. */
export function adjacent(first: Buffer, second: Buffer): boolean {
  return first.buffer === second.buffer && first.byteOffset + first.length === second.byteOffset;
}

/** `first` and `second`, which are adjacent(), as one view (no copy). */
export function joined(first: Buffer, second: Buffer): Buffer {
  return Buffer.from(first.buffer, first.byteOffset, first.length + second.length);
}
