// LIKE patterns (JMS 2.0 3.8.1.2): `_` is any one character, `%` any run of them
// (none included), and an ESCAPE character makes the next one literal. Matched by
// hand, never through a RegExp built from the client's text (a backtracking
// pattern could take exponential time on one property value).
//
// A pattern is its runs of characters between the `%`s. The first run must be at
// the start of the value and the last at its end; each run between them is
// taken at its leftmost place after the previous one, which is right: any later
// place only leaves less room for the runs after it. Runs without `_` are found
// by String.indexOf; those with `_` are compared character by character, and
// that work is bounded per evaluation (LIKE_STEP_LIMIT).
import { SelectorError } from './selector-error.js';

/**
 * Character comparisons the `_` runs of one LIKE may take on one value: past it the
 * answer is unknown (so the message is not selected), rather than a long stall of the
 * broker on a pattern such as '%a_a_a_a_..._b%' against a long property.
 */
export const LIKE_STEP_LIMIT = 100_000;

/** One run between `%`s: its characters (code points), -1 for `_`. */
interface Run {
  /** The run as a string, when it has no `_` (found by indexOf). */
  literal: string | undefined;
  codes: number[];
}

export interface LikePattern {
  /** Runs in order: the first is at the value's start, the last at its end (empty when a `%` opens or closes the pattern). */
  runs: Run[];
  /** No `%` at all: the value is the one run, whole. */
  whole: boolean;
}

const ANY = -1;

/** Compile `pattern` (with an optional one-character `escape`); `at` and `escapeAt` are their places, for a SelectorError. */
export function compileLike(pattern: string, at: number, escape?: string, escapeAt?: number): LikePattern {
  const escapeCode = escape === undefined ? undefined : [...escape];
  if (escapeCode !== undefined && escapeCode.length !== 1) throw new SelectorError(`an ESCAPE string must be one character, not ${escapeCode.length}`, escapeAt);
  const esc = escapeCode?.[0];
  const runs: Run[] = [];
  let codes: number[] = [];
  let literal = true;
  let percents = 0;
  const chars = [...pattern];
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i]!;
    if (ch === esc) {
      const next = chars[++i];
      if (next === undefined) throw new SelectorError('a LIKE pattern ends with its escape character', at);
      codes.push(next.codePointAt(0)!);
    } else if (ch === '%') {
      runs.push(run(codes, literal));
      codes = [];
      literal = true;
      percents++;
    } else if (ch === '_') {
      codes.push(ANY);
      literal = false;
    } else {
      codes.push(ch.codePointAt(0)!);
    }
  }
  runs.push(run(codes, literal));
  return { runs, whole: percents === 0 };
}

function run(codes: number[], literal: boolean): Run {
  return { codes, literal: literal ? String.fromCodePoint(...codes) : undefined };
}

/** Does `value` match? undefined: unknown (the step limit ran out). */
export function matchLike(p: LikePattern, value: string): boolean | undefined {
  const steps = { left: LIKE_STEP_LIMIT };
  // Code points only when some run has a `_` and the value has surrogate pairs: a `_` is one character, not one UTF-16 unit.
  const text: Text = p.runs.some((r) => r.literal === undefined) && /[\uD800-\uDFFF]/.test(value) ? codePointText(value) : unitText(value);
  const runs = p.runs;
  const first = runs[0]!;
  if (p.whole) return runLength(first, text) === text.length && runAt(first, text, 0, steps) ? true : unknownOr(steps);
  const last = runs[runs.length - 1]!;
  const lastAt = text.length - runLength(last, text);
  if (runLength(first, text) > lastAt) return false;
  if (!runAt(first, text, 0, steps) || !runAt(last, text, lastAt, steps)) return unknownOr(steps);
  let from = runLength(first, text);
  for (let r = 1; r < runs.length - 1; r++) {
    const found = findRun(runs[r]!, text, from, lastAt, steps);
    if (found < 0) return unknownOr(steps);
    from = found + runLength(runs[r]!, text);
  }
  return true;
}

/** A run that did not match: false, or unknown when the step limit ran out on the way. */
function unknownOr(steps: { left: number }): false | undefined {
  return steps.left < 0 ? undefined : false;
}

/** A run's length in the text's units (UTF-16 units for a literal run read by indexOf, else code points). */
function runLength(r: Run, text: Text): number {
  return r.literal !== undefined && text.string !== undefined ? r.literal.length : r.codes.length;
}

/** A value to match, by UTF-16 unit or by code point. */
interface Text {
  length: number;
  code(i: number): number;
  /** The value as a string (indexOf), when it is read by UTF-16 unit. */
  string: string | undefined;
}

function unitText(s: string): Text {
  return { length: s.length, code: (i) => s.charCodeAt(i), string: s };
}

function codePointText(s: string): Text {
  const codes = Array.from(s, (c) => c.codePointAt(0)!);
  return { length: codes.length, code: (i) => codes[i]!, string: undefined };
}

/** Does the run match the text at `at`? */
function runAt(r: Run, text: Text, at: number, steps: { left: number }): boolean {
  if (r.literal !== undefined && text.string !== undefined) return text.string.startsWith(r.literal, at);
  const codes = r.codes;
  if ((steps.left -= codes.length) < 0) return false;
  for (let k = 0; k < codes.length; k++) {
    const c = codes[k]!;
    if (c !== ANY && c !== text.code(at + k)) return false;
  }
  return true;
}

/** The leftmost place at or after `from` where the run matches and ends by `limit`; -1 if none. */
function findRun(r: Run, text: Text, from: number, limit: number, steps: { left: number }): number {
  const n = runLength(r, text);
  if (r.literal !== undefined && text.string !== undefined) {
    const at = text.string.indexOf(r.literal, from);
    return at >= 0 && at + n <= limit ? at : -1;
  }
  // Bounded by the text's length, and by the step limit (runAt spends it).
  for (let at = from; at + n <= limit; at++) {
    if (runAt(r, text, at, steps)) return at;
    if (steps.left < 0) return -1;
  }
  return -1;
}
