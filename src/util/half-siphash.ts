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

/** The length word: 16 bytes of input, in the top byte. */
const LENGTH_WORD = (16 << 24) >>> 0;

/** The state v0..v3 between rounds (module-level: a call is synchronous and makes no object). */
const v = new Uint32Array(4);

/** `n` SipRounds of the state. */
function rounds(n: number): void {
  let v0 = v[0]!;
  let v1 = v[1]!;
  let v2 = v[2]!;
  let v3 = v[3]!;
  for (let r = 0; r < n; r++) {
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
  v[0] = v0;
  v[1] = v1;
  v[2] = v2;
  v[3] = v3;
}

/** Take in one word: v3 ^= m, two rounds, v0 ^= m. */
function compress(m: number): void {
  v[3] ^= m;
  rounds(2);
  v[0] ^= m;
}

/** HalfSipHash-2-4 (32-bit output) of the 16 bytes whose little-endian words are w0..w3. */
export function halfSipHash16(key: HalfSipKey, w0: number, w1: number, w2: number, w3: number): number {
  v[0] = key.k0;
  v[1] = key.k1;
  v[2] = 0x6c796765 ^ key.k0;
  v[3] = 0x74656462 ^ key.k1;
  compress(w0);
  compress(w1);
  compress(w2);
  compress(w3);
  compress(LENGTH_WORD);
  v[2] ^= 0xff;
  rounds(4);
  return (v[1]! ^ v[3]!) >>> 0;
}
