// Text for a terminal: what a table, an error or a log line shows may come from a client
// (a connection's container id, a SASL user name) or an argument. Raw, a newline forged
// a table row or a log line, and an ESC sequence drove the operator's terminal.

/** C0 controls, DEL, C1 controls, and the bidirectional overrides that reorder what is shown. */
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** The text with each of those escaped as \xHH or \uHHHH. */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
