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

/** A value a peer sent, described for a refusal: at most 100 characters, whatever its size or depth. */
export function shownValue(v: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(v);
  } catch {
    // Nested too deep to write out (RangeError), or not JSON at all.
  }
  text ??= Array.isArray(v) ? 'a list' : typeof v;
  return text.length > 100 ? `${text.slice(0, 100)}...` : text;
}
