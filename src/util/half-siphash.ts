// HalfSipHash-2-4 with a 32-bit answer (Aumasson and Bernstein's SipHash on
// 32-bit words), for exactly four 32-bit words of input: what an in-memory hash
// table keyed by a secret uses to place 16-byte keys. A peer that can choose keys
// (a publisher choosing message-ids) but not read the secret cannot steer them
// into one probe run, which an unkeyed mix (a public function the peer can
// invert) would let it do, turning each lookup into a scan.
//
// Written for the one shape the project needs (16 bytes, little-endian words,
// a 64-bit key as two words), on JS numbers kept to int32; a test holds it to
// the reference implementation's published vector for 16 bytes.

/** A HalfSipHash key: two little-endian 32-bit words. */
export interface HalfSipKey {
  k0: number;
  k1: number;
}

/** The length word: 16 bytes of input, in the top byte. */
const LENGTH_WORD = 16 << 24;

/**
 * HalfSipHash-2-4 (32-bit output) of the 16 bytes whose little-endian words are w0..w3.
 *
 * Seven steps of two SipRounds: one per input word (w0..w3, then the length word,
 * each xored into v3 before its rounds and into v0 after), then two with no word
 * (xoring 0 is nothing) for the finalization's four rounds, which the constant in v2
 * starts. The rounds sit in a loop of fixed length with the step's word chosen
 * outside it: one loop of fourteen rounds that chose, inside, whether to take a word
 * took ~70-100 ns a call here, this ~55-80 in the same runs (a window hashes every
 * key it looks up). The state is kept in int32 locals (`| 0`, not `>>> 0`): V8
 * holds an int32 in a register, while a uint32 above 2^31 becomes a double, and
 * that made the hash half again as slow.
 */
export function halfSipHash16(key: HalfSipKey, w0: number, w1: number, w2: number, w3: number): number {
  let v0 = key.k0 | 0;
  let v1 = key.k1 | 0;
  let v2 = 0x6c796765 ^ key.k0;
  let v3 = 0x74656462 ^ key.k1;
  for (let step = 0; step < 7; step++) {
    const m = (step === 0 ? w0 : step === 1 ? w1 : step === 2 ? w2 : step === 3 ? w3 : step === 4 ? LENGTH_WORD : 0) | 0;
    if (step === 5) v2 ^= 0xff; // the finalization's constant, before its four rounds
    v3 ^= m;
    for (let r = 0; r < 2; r++) {
      v0 = (v0 + v1) | 0;
      v1 = ((v1 << 5) | (v1 >>> 27)) ^ v0;
      v0 = (v0 << 16) | (v0 >>> 16);
      v2 = (v2 + v3) | 0;
      v3 = ((v3 << 8) | (v3 >>> 24)) ^ v2;
      v0 = (v0 + v3) | 0;
      v3 = ((v3 << 7) | (v3 >>> 25)) ^ v0;
      v2 = (v2 + v1) | 0;
      v1 = ((v1 << 13) | (v1 >>> 19)) ^ v2;
      v2 = (v2 << 16) | (v2 >>> 16);
    }
    v0 ^= m;
  }
  return (v1 ^ v3) >>> 0;
}
