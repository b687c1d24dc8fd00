// HalfSipHash-2-4 with a 32-bit answer (Aumasson and Bernstein's SipHash on
// 32-bit words), for exactly four 32-bit words of input: what an in-memory hash
// table keyed by a secret uses to place 16-byte keys. A peer that can choose keys
// (a publisher choosing message-ids) but not read the secret cannot steer them
// into one probe run, which an unkeyed mix (a public function the peer can
// invert) would let it do, turning each lookup into a scan.
//
// Written for the one shape the project needs (16 bytes, little-endian words,
// a 64-bit key as two words), on JS numbers kept to uint32 with `>>> 0`; a test
// holds it to the reference implementation's published vector for 16 bytes.

/** A HalfSipHash key: two little-endian 32-bit words. */
export interface HalfSipKey {
  k0: number;
  k1: number;
}

/** HalfSipHash-2-4 (32-bit output) of the 16 bytes whose little-endian words are w0..w3. */
export function halfSipHash16(key: HalfSipKey, w0: number, w1: number, w2: number, w3: number): number {
  let v0 = key.k0 >>> 0;
  let v1 = key.k1 >>> 0;
  let v2 = (0x6c796765 ^ key.k0) >>> 0;
  let v3 = (0x74656462 ^ key.k1) >>> 0;
  // The four words, then the length word (16 << 24), each compressed in turn:
  // v3 ^= m, two rounds, v0 ^= m.
  let m = w0;
  for (let word = 0; word < 5; word++) {
    v3 ^= m;
    for (let r = 0; r < 2; r++) {
      v0 = (v0 + v1) >>> 0;
      v1 = ((v1 << 5) | (v1 >>> 27)) ^ v0;
      v0 = (v0 << 16) | (v0 >>> 16);
      v2 = (v2 + v3) >>> 0;
      v3 = ((v3 << 8) | (v3 >>> 24)) ^ v2;
      v0 = (v0 + v3) >>> 0;
      v3 = ((v3 << 7) | (v3 >>> 25)) ^ v0;
      v2 = (v2 + v1) >>> 0;
      v1 = ((v1 << 13) | (v1 >>> 19)) ^ v2;
      v2 = (v2 << 16) | (v2 >>> 16);
    }
    v0 ^= m;
    m = word === 0 ? w1 : word === 1 ? w2 : word === 2 ? w3 : (16 << 24) >>> 0;
  }
  v2 ^= 0xff;
  for (let r = 0; r < 4; r++) {
    v0 = (v0 + v1) >>> 0;
    v1 = ((v1 << 5) | (v1 >>> 27)) ^ v0;
    v0 = (v0 << 16) | (v0 >>> 16);
    v2 = (v2 + v3) >>> 0;
    v3 = ((v3 << 8) | (v3 >>> 24)) ^ v2;
    v0 = (v0 + v3) >>> 0;
    v3 = ((v3 << 7) | (v3 >>> 25)) ^ v0;
    v2 = (v2 + v1) >>> 0;
    v1 = ((v1 << 13) | (v1 >>> 19)) ^ v2;
    v2 = (v2 << 16) | (v2 >>> 16);
  }
  return (v1 ^ v3) >>> 0;
}
