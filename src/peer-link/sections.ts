// The two AMQP message sections a peer-link stream message is made of: an
// application-properties map saying what it carries, then one data section
// holding its records (and how a decoder hands that body back). Both streams
// (HA, DR) write their messages straight into one buffer of the exact size from
// these (no copy of a batch through a message encoder). The map is written by
// the engine's encoder in the encodings the streams have always used
// (peer-values.ts), so a receiver of another version reads the same bytes.
import { Encoder } from '../amqp/engine/encoder.js';
import { peerMap } from './peer-values.js';

/** An application-properties section (descriptor 0x74, a map with string keys) alone. */
export function applicationPropertiesSection(props: Record<string, unknown>): Buffer {
  return new Encoder(64)
    .write({ type: 'described', descriptor: { type: 'ulong', value: 0x74n, code: 0x53 }, value: peerMap(props, 'string') })
    .bytes();
}

/** Bytes of a data section's descriptor and vbin32 header. */
export const DATA_SECTION_HEADER = 8;

/** Write the header of a data section whose binary is `length` bytes at `at`; returns the offset after it. */
export function writeDataSectionHeader(out: Buffer, at: number, length: number): number {
  // Described type 0x75 (small ulong descriptor), then vbin32.
  at = out.writeUInt8(0x00, at);
  at = out.writeUInt8(0x53, at);
  at = out.writeUInt8(0x75, at);
  at = out.writeUInt8(0xb0, at);
  return out.writeUInt32BE(length, at);
}

/** The binary body of a stream message as a decoder hands it over: a data section's binary, or a buffer. */
export function bodyBytes(message: { body?: unknown }): Buffer | undefined {
  const body = message.body as { content?: unknown } | Buffer | undefined;
  if (Buffer.isBuffer(body)) return body;
  return Buffer.isBuffer((body as { content?: unknown } | undefined)?.content) ? (body as { content: Buffer }).content : undefined;
}
