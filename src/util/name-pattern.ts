// Patterns an operator writes (ACL rules, a DR queue's exchange filter) run
// against names a client chooses. V8's regular expressions backtrack: `(a+)+`
// tested on 40 a's and a '!' runs for hours, and `.*a.*a.*a.*b` on a 255-character
// name for a second, with the broker's one event loop held all that time. So a
// pattern is accepted only if V8's linear-time engine can run it, and runs on
// the fast backtracking engine until it has backtracked 50,000 times, when V8
// runs it again on the linear one (both V8 flags are set below: the fallback
// applies to every regular expression compiled afterwards that the linear
// engine can run, which these are by construction). What the linear engine
// cannot run is refused when the pattern is read, with the reason: back-references,
// look-arounds, inline flags, counted repetitions above 16, and Unicode-mode
// features (the linear engine has no `u` flag, so a pattern matches UTF-16 code
// units: `\p{...}`, `\u{...}` and characters beyond U+FFFF are refused rather
// than read differently from how the operator meant them).
import v8 from 'node:v8';

v8.setFlagsFromString('--enable-experimental-regexp-engine');
v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

/** Unicode-mode syntax whose meaning would change without the `u` flag. */
const UNICODE_ONLY = /\\[pP]\{|\\u\{|[\u{10000}-\u{10FFFF}]/u;

function linearEngineAvailable(): boolean {
  try {
    new RegExp('', 'l');
    return true;
  } catch {
    return false;
  }
}

/**
 * The pattern `source`, anchored to match a whole name, as a RegExp whose time on
 * any name is bounded. Throws an Error saying why a pattern is refused.
 */
export function wholeNamePattern(source: string): RegExp {
  const anchored = `^(?:${source})$`;
  // The strict grammar first (as ACL patterns were always read): a typo such as a
  // stray `\-` is an error here, not a literal.
  new RegExp(anchored, 'u');
  if (UNICODE_ONLY.test(source)) {
    throw new Error('Unicode property classes (\\p{...}), code-point escapes (\\u{...}) and characters beyond U+FFFF are not supported');
  }
  if (!linearEngineAvailable()) {
    // Fail closed: without the linear engine nothing bounds a pattern's time.
    throw new Error(`this Node (${process.version}) lacks V8's linear-time regular expression engine, which name patterns need`);
  }
  try {
    new RegExp(anchored, 'l');
  } catch {
    throw new Error('cannot be matched in linear time: back-references, look-arounds, inline flags and counted repetitions above 16 are not supported');
  }
  return new RegExp(anchored);
}

/**
 * A glob (`*` matches any run of characters, nothing else is special) as a
 * whole-name pattern: literals and `.*` only, which the linear engine always
 * runs, so the fallback bounds it and nothing here can be refused.
 */
export function globPattern(glob: string): RegExp {
  return new RegExp(`^(?:${glob.split('*').map(escapeRegExp).join('.*')})$`);
}

function escapeRegExp(s: string): string {
  return s.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
}
