// Text for a terminal: what a table, an error or a log line shows may come from a client
// (a connection's container id, a SASL user name) or an argument. Raw, a newline forged
// a table row or a log line, and an ESC sequence drove the operator's terminal.

/**
 * C0 controls, DEL, C1 controls, the line and paragraph separators (U+2028, U+2029: a new
 * line to some terminals and editors), and the bidirectional marks and overrides that
 * reorder what is shown (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069).
 */
const BEYOND_C0 = '\\u007f-\\u009f\\u061c\\u200e\\u200f\\u2028-\\u202e\\u2066-\\u2069';
const UNPRINTABLE = new RegExp(`[\\u0000-\\u001f${BEYOND_C0}]`, 'g');
/** What JSON.stringify leaves as it is (it escapes C0 in strings; its own line breaks are C0 too). */
const UNPRINTABLE_IN_JSON = new RegExp(`[${BEYOND_C0}]`, 'g');

/** The text with each of those escaped as \xHH or \uHHHH. */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

/**
 * JSON text (JSON.stringify's, which escapes only C0 controls) with the rest of those
 * escaped as \uHHHH too: the same JSON to a parser, nothing that drives a terminal.
 */
export function printableJson(json: string): string {
  return json.replace(UNPRINTABLE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
