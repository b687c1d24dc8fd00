// The one rule for every password file (tandem user add --password-file, ha-password-file,
// a [dr] line's source-password-file, tandem dr --source-password-file and
// --reverse-source-password-file): the password is the first line, without its line end.
// `tandem user add` once took the whole file instead, so a two-line file gave a user a
// password that the brokers' own files (read by their first line) never sent. A file with
// more than blank lines after its first line is refused: under either reading it would
// mean something else (a key, two passwords, a password with a line break), and a guess
// locks someone out later, far from the cause.
import { MAX_SECRET_FILE_BYTES, readBoundedText } from './bounded-read.js';

/** Why a password file's content is no password: a message naming `what` and `shown`, never the content. */
export class PasswordFileError extends Error {
  override name = 'PasswordFileError';
}

/** The password a password file's text holds, by the rule above. */
export function passwordOfText(text: string, what: string, shown: string): string {
  const end = text.indexOf('\n');
  const first = (end < 0 ? text : text.slice(0, end)).replace(/\r$/, '');
  const rest = end < 0 ? '' : text.slice(end + 1);
  if (first === '') throw new PasswordFileError(`${what} ${shown} is empty: put the password on its first line`);
  if (rest.trim() !== '') {
    throw new PasswordFileError(`${what} ${shown} holds more than one line: a password file holds the password on its first line and nothing after it (is it the right file?)`);
  }
  return first;
}

/** Read a password file (a path, or 0 for standard input), bounded, by the rule above. */
export function readPasswordFile(source: string | number, what: string): string {
  const text = readBoundedText(source, MAX_SECRET_FILE_BYTES, what);
  return passwordOfText(text, what, typeof source === 'number' ? 'standard input' : source);
}
