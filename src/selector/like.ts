// LIKE patterns (JMS 2.0 3.8.1.2): `_` is any one character, `%` any run of them
// (none included), and an ESCAPE character makes the next one literal. Matched by
// hand, never through a RegExp built from the client's text (a backtracking
// pattern could take exponential time on one property value).
//
// A pattern is its runs of characters between the `%`s. The first run must be at
// the start of the value and the last at its end; each run between them is
// taken at its leftmost place after the previous one, which is right: any later
// place only leaves less room for the runs after it. Runs without `_` are found
// by String.indexOf; those with `_` are compared character by character, a `_`
// taking one character (a surrogate pair outside the BMP is one), read in place
// (no copy of the value). The work is bounded per message (LikeBudget), over all
// the LIKEs of its selector.
import { SelectorError } from './selector-error.js';

/**
 * Character comparisons the `_` runs of a selector's LIKEs may take on one message: past
 * it those LIKEs are unknown (so the message is not selected), rather than a long stall
 * of the broker on a pattern such as '%a_a_a_a_..._b%' against a long property.
 */
export const LIKE_STEP_LIMIT = 100_000;

/**
 * Characters a selector's LIKEs may pass over by String.indexOf on one message, as a
 * multiple of the length of the message's string values the selector reads. A search
 * passes over its value once at most (a few ns a character for the worst patterns), but
 * a selector may hold hundreds of LIKEs on one large property: past this multiple of
 * reading the values, the rest are unknown.
 */
export const LIKE_SCAN_FACTOR = 16;

/** What the LIKEs of one evaluation may still spend: created per message (likeBudget). */
export interface LikeBudget {
  steps: number;
  scan: number;
}

/** Plain searching allowed whatever the values: a LIKE may be on a string literal of the selector (at most 4096 characters). */
const LIKE_SCAN_FLOOR = 64 * 1024;

/** The budget of one message whose string values are `textLength` characters in all. */
export function likeBudget(textLength: number): LikeBudget {
  return { steps: LIKE_STEP_LIMIT, scan: LIKE_SCAN_FLOOR + LIKE_SCAN_FACTOR * textLength };
}

/** One run between `%`s: its characters (code points), ANY for `_`. */
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

/** A run that does not match at a place. */
const NO = -1;
/** The budget ran out: the answer is unknown. */
const SPENT = -2;

/** Does `value` match? undefined: unknown (the budget ran out, on this LIKE or an earlier one of the message). */
export function matchLike(p: LikePattern, value: string, budget: LikeBudget): boolean | undefined {
  if (budget.steps < 0 || budget.scan < 0) return undefined;
  const runs = p.runs;
  const first = runs[0]!;
  const firstEnd = forward(first, value, 0, budget);
  if (p.whole || firstEnd < 0) return firstEnd === SPENT ? undefined : firstEnd === value.length;
  const lastStart = backward(runs[runs.length - 1]!, value, budget);
  if (lastStart === SPENT) return undefined;
  if (lastStart < firstEnd) return false;
  let from = firstEnd;
  for (let r = 1; r < runs.length - 1; r++) {
    from = findRun(runs[r]!, value, from, lastStart, budget);
    if (from < 0) return from === SPENT ? undefined : false;
  }
  return true;
}

/** Where the run ends when it matches the value at `at`; NO, or SPENT. */
function forward(r: Run, value: string, at: number, budget: LikeBudget): number {
  if (r.literal !== undefined) return value.startsWith(r.literal, at) ? at + r.literal.length : NO;
  const codes = r.codes;
  if ((budget.steps -= codes.length) < 0) return SPENT;
  for (let k = 0; k < codes.length; k++) {
    if (at >= value.length) return NO;
    const c = value.codePointAt(at)!;
    if (codes[k] !== ANY && codes[k] !== c) return NO;
    at += c > 0xffff ? 2 : 1;
  }
  return at;
}

/** Where the run starts when it matches the end of the value; NO, or SPENT. */
function backward(r: Run, value: string, budget: LikeBudget): number {
  if (r.literal !== undefined) return value.endsWith(r.literal) ? value.length - r.literal.length : NO;
  const codes = r.codes;
  if ((budget.steps -= codes.length) < 0) return SPENT;
  let end = value.length;
  for (let k = codes.length - 1; k >= 0; k--) {
    if (end <= 0) return NO;
    const start = end >= 2 && isLowSurrogate(value.charCodeAt(end - 1)) && isHighSurrogate(value.charCodeAt(end - 2)) ? end - 2 : end - 1;
    if (codes[k] !== ANY && codes[k] !== value.codePointAt(start)) return NO;
    end = start;
  }
  return end;
}

/** The end of the run at its leftmost place at or after `from` where it ends by `limit`; NO, or SPENT. */
function findRun(r: Run, value: string, from: number, limit: number, budget: LikeBudget): number {
  if (r.literal !== undefined) {
    const at = value.indexOf(r.literal, from);
    const end = at < 0 ? NO : at + r.literal.length;
    budget.scan -= (end < 0 ? value.length : end) - from;
    if (budget.scan < 0) return SPENT;
    return end >= 0 && end <= limit ? end : NO;
  }
  // Bounded by the value's length, and by the budget (forward spends it). A place further
  // on ends further on, so past `limit` once is past it for good.
  for (let at = from; at < limit; at += value.codePointAt(at)! > 0xffff ? 2 : 1) {
    const end = forward(r, value, at, budget);
    if (end === SPENT || end > limit) return end === SPENT ? SPENT : NO;
    if (end >= 0) return end;
  }
  return NO;
}

function isHighSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}

function isLowSurrogate(unit: number): boolean {
  return unit >= 0xdc00 && unit <= 0xdfff;
}
