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
