// Text of a value a peer chose, for a property name or an error message. String()
// throws a TypeError for a map decoded with a "toString" key of its own (not a
// function): a decoder then failed from inside instead of saying what was wrong.

export function safeString(value: unknown): string {
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** Characters of a value a refusal shows (a request may send megabytes; the log and the peer need a glimpse). */
export const SHOWN_VALUE_CHARS = 100;

/**
 * A value a peer or user sent, described for a refusal or a log line: a string quoted as
 * JSON (control characters escaped, so a value cannot forge a line or a quote), a number,
 * boolean or bigint as itself, lists and maps as JSON, binary as its size. Written with a
 * budget of SHOWN_VALUE_CHARS characters, then '...': whatever its size or depth, only
 * what is shown is ever looked at (no JSON.stringify of megabytes, no deep recursion).
 */
export function shownValue(v: unknown): string {
  const out = { text: '', room: SHOWN_VALUE_CHARS };
  describe(v, out);
  return out.room < 0 ? `${out.text}...` : out.text;
}

/** Appends `text`, or as much as the room takes (room < 0 then: something was left out). */
function put(out: { text: string; room: number }, text: string): boolean {
  if (out.room <= 0) {
    out.room = -1;
    return false;
  }
  out.text += text.length > out.room ? text.slice(0, out.room) : text;
  out.room -= text.length;
  return out.room >= 0;
}

function describe(v: unknown, out: { text: string; room: number }): boolean {
  if (typeof v === 'string') {
    if (out.room <= 0) return put(out, '');
    // Cut before quoting, so an escape is never cut in half (the escapes may pass the
    // room a little); the quotes count, the budget being the whole text.
    const cut = v.length + 2 > out.room;
    out.text += JSON.stringify(cut ? v.slice(0, Math.max(out.room - 2, 0)) : v);
    out.room = cut ? -1 : out.room - v.length - 2;
    return out.room >= 0;
  }
  if (typeof v === 'bigint' || typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined) return put(out, String(v));
  if (typeof v !== 'object') return put(out, typeof v);
  if (v instanceof Uint8Array) return put(out, `<${v.length} bytes>`);
  if (Array.isArray(v)) {
    if (!put(out, '[')) return false;
    for (let i = 0; i < v.length; i++) if ((i > 0 && !put(out, ',')) || !describe(v[i], out)) return false;
    return put(out, ']');
  }
  if (!put(out, '{')) return false;
  let first = true;
  const entries: Iterable<[unknown, unknown]> = v instanceof Map ? v : ownEntries(v);
  for (const [k, value] of entries) {
    if ((!first && !put(out, ',')) || !describe(k, out) || !put(out, ':') || !describe(value, out)) return false;
    first = false;
  }
  return put(out, '}');
}

/** An object's own enumerable entries, one at a time (a map of a million keys is not copied to show ten). */
function* ownEntries(o: object): Generator<[string, unknown]> {
  for (const k in o) if (Object.hasOwn(o, k)) yield [k, (o as Record<string, unknown>)[k]];
}
