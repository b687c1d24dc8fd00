// Just enough DER to read the few fields of X.509 structures that Node does not
// expose: a CRL's issuer and update times, and a CA certificate's subject (as bytes,
// to match the one against the other). Anything unexpected throws: callers turn
// that into "does not parse", never into a guess.

export interface Tlv {
  tag: number;
  /** The whole encoding, tag and length included (what two names are compared by). */
  raw: Buffer;
  /** The contents octets. */
  value: Buffer;
}

/** The TLV that starts at `offset` of `buf`. */
export function readTlv(buf: Buffer, offset = 0): Tlv {
  if (offset + 2 > buf.length) throw new Error('DER: truncated');
  const tag = buf[offset]!;
  if ((tag & 0x1f) === 0x1f) throw new Error('DER: multi-byte tags are not used in X.509');
  let length = buf[offset + 1]!;
  let header = 2;
  if (length & 0x80) {
    const octets = length & 0x7f;
    // Four octets describe 4 GiB: far more than any CRL or certificate.
    if (octets === 0 || octets > 4 || offset + 2 + octets > buf.length) throw new Error('DER: bad length');
    length = 0;
    for (let i = 0; i < octets; i++) length = length * 256 + buf[offset + 2 + i]!;
    header += octets;
  }
  const end = offset + header + length;
  if (end > buf.length) throw new Error('DER: truncated');
  return { tag, raw: buf.subarray(offset, end), value: buf.subarray(offset + header, end) };
}

/** The TLVs inside a constructed value (a SEQUENCE's or SET's elements). */
export function children(tlv: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = 0; at < tlv.value.length; ) {
    const child = readTlv(tlv.value, at);
    out.push(child);
    at += child.raw.length;
  }
  return out;
}

export const TAG = { INTEGER: 0x02, OID: 0x06, SEQUENCE: 0x30, SET: 0x31, UTC_TIME: 0x17, GENERALIZED_TIME: 0x18 } as const;

/** A UTCTime (years 1950-2049, RFC 5280 4.1.2.5.1) or GeneralizedTime, in UTC. */
export function readTime(tlv: Tlv): Date {
  const text = tlv.value.toString('latin1');
  const m = tlv.tag === TAG.UTC_TIME ? /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(text) : tlv.tag === TAG.GENERALIZED_TIME ? /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(text) : null;
  if (!m) throw new Error('DER: not a time');
  let year = Number(m[1]);
  if (tlv.tag === TAG.UTC_TIME) year += year < 50 ? 2000 : 1900;
  return new Date(Date.UTC(year, Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6])));
}

/** id-at-commonName (2.5.4.3), DER-encoded. */
const COMMON_NAME = Buffer.from([0x55, 0x04, 0x03]);

/** A Name for messages: its common names ("CN=..."), or its length when it has none. */
export function describeName(name: Tlv): string {
  const cns: string[] = [];
  for (const rdn of children(name)) {
    for (const attribute of children(rdn)) {
      const [type, value] = children(attribute);
      if (type?.tag === TAG.OID && type.value.equals(COMMON_NAME) && value) cns.push(`CN=${value.value.toString('utf8')}`);
    }
  }
  return cns.length > 0 ? cns.join(', ') : `a name without a common name (${name.raw.length} bytes)`;
}
