import { describe, expect, it } from 'vitest';
import { crc32c } from '../../../src/store/crc32c.js';
import { prng } from './helpers.js';

// Bytewise reference, to check the slice-by-8 path on every length and alignment.
function reference(data: Uint8Array): number {
  let crc = 0xffffffff;
  for (const b of data) {
    crc ^= b;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0x82f63b78 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

describe('crc32c', () => {
  it('crc32c - standard check value and RFC 3720 vectors', () => {
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32c(Buffer.alloc(32, 0))).toBe(0x8a9136aa);
    expect(crc32c(Buffer.alloc(32, 0xff))).toBe(0x62a8ab43);
    expect(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => i)))).toBe(0x46dd794e);
    expect(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => 31 - i)))).toBe(0x113fdb5c);
    expect(crc32c(Buffer.alloc(0))).toBe(0);
  });

  it('crc32c - slice-by-8 equals the bytewise form at every length, and continues across chunks', () => {
    const r = prng(7);
    const data = Buffer.from(Array.from({ length: 300 }, () => r.int(256)));
    for (let n = 0; n <= data.length; n += 1) {
      const part = data.subarray(0, n);
      expect(crc32c(part)).toBe(reference(part));
      const cut = r.int(n + 1);
      expect(crc32c(part, crc32c(part.subarray(0, cut)), cut)).toBe(crc32c(part));
    }
  });
});
