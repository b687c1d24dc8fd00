// The tokens of a JMS message selector (JMS 2.0 section 3.8.1.1): literals,
// identifiers, keywords and operators, each with the place it starts, so a
// refusal can say where the selector went wrong. A selector is text from a
// client: its length and token count are bounded here, before any parsing.
import { SelectorError } from './selector-error.js';

/** Longest selector taken, in characters (UTF-16 units, as JavaScript counts them). */
export const MAX_SELECTOR_LENGTH = 4096;
/** Most tokens one selector may have. */
export const MAX_SELECTOR_TOKENS = 2048;

export type Token =
  | { kind: 'ident'; at: number; text: string }
  | { kind: 'keyword'; at: number; text: Keyword }
  | { kind: 'string'; at: number; value: string }
  /** An exact numeric literal: a Java long. */
  | { kind: 'exact'; at: number; value: bigint }
  /** An approximate numeric literal: a Java double. */
  | { kind: 'approx'; at: number; value: number }
  | { kind: 'op'; at: number; text: Operator }
  | { kind: 'end'; at: number };

export type Keyword = 'AND' | 'OR' | 'NOT' | 'BETWEEN' | 'LIKE' | 'ESCAPE' | 'IN' | 'IS' | 'NULL' | 'TRUE' | 'FALSE';
export type Operator = '=' | '<>' | '<' | '>' | '<=' | '>=' | '+' | '-' | '*' | '/' | '(' | ')' | ',';

/** Reserved words, matched whatever their case (identifiers are case-sensitive). */
const KEYWORDS: ReadonlySet<string> = new Set<Keyword>(['AND', 'OR', 'NOT', 'BETWEEN', 'LIKE', 'ESCAPE', 'IN', 'IS', 'NULL', 'TRUE', 'FALSE']);

/**
 * The largest exact literal read: 2^63, one past Long.MAX_VALUE, because Long.MIN_VALUE is
 * written as a minus sign and 9223372036854775808 (as in Java). The parser takes that one
 * only after a minus sign.
 */
export const LONG_MIN_MAGNITUDE = 1n << 63n;
export const LONG_LITERAL_TOO_LARGE = 'an exact numeric literal is larger than a long (2^63 - 1)';

/**
 * A Java identifier's first character and the rest (Character.isJavaIdentifierStart and
 * isJavaIdentifierPart): letters of any script, letter numbers, currency symbols (`$`,
 * `€`), connector punctuation (`_`); then also digits and combining marks. Java's
 * "ignorable" control and format characters are not taken: invisible in a selector, they
 * would only make two names that look alike differ.
 */
const IDENT_START = /[\p{L}\p{Nl}\p{Sc}\p{Pc}]/u;
const IDENT_PART = /[\p{L}\p{Nl}\p{Sc}\p{Pc}\p{Nd}\p{Mn}\p{Mc}]/u;

/** The selector's tokens, ending with an `end` token. Throws SelectorError. */
export function tokenize(text: string): Token[] {
  if (text.length > MAX_SELECTOR_LENGTH) throw new SelectorError(`the selector is ${text.length} characters long; at most ${MAX_SELECTOR_LENGTH} are taken`);
  const tokens: Token[] = [];
  let i = 0;
  // Bounded: every pass consumes at least one character or throws.
  while (i < text.length) {
    const c = text[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f') {
      i++;
      continue;
    }
    if (tokens.length >= MAX_SELECTOR_TOKENS) throw new SelectorError(`the selector has more than ${MAX_SELECTOR_TOKENS} tokens`, i);
    const at = i;
    if (c === "'") {
      const { value, end } = readString(text, i);
      tokens.push({ kind: 'string', at, value });
      i = end;
    } else if (isDigit(c) || (c === '.' && isDigit(text[i + 1]))) {
      const { token, end } = readNumber(text, i);
      tokens.push(token);
      i = end;
    } else if (IDENT_START.test(charAt(text, i))) {
      let end = i + charAt(text, i).length;
      while (end < text.length && IDENT_PART.test(charAt(text, end))) end += charAt(text, end).length;
      const word = text.slice(i, end);
      const upper = word.toUpperCase();
      tokens.push(KEYWORDS.has(upper) ? { kind: 'keyword', at, text: upper as Keyword } : { kind: 'ident', at, text: word });
      i = end;
    } else {
      const two = text.slice(i, i + 2);
      if (two === '<>' || two === '<=' || two === '>=') {
        tokens.push({ kind: 'op', at, text: two });
        i += 2;
      } else if ('=<>+-*/(),'.includes(c)) {
        tokens.push({ kind: 'op', at, text: c as Operator });
        i++;
      } else {
        throw new SelectorError(`unexpected character ${showCharacter(charAt(text, i))}`, i);
      }
    }
  }
  tokens.push({ kind: 'end', at: text.length });
  return tokens;
}

/** The whole code point at `i` (one or two UTF-16 units). */
function charAt(text: string, i: number): string {
  return String.fromCodePoint(text.codePointAt(i)!);
}

/** A character for a message: quoted when it prints, else by its code (a NUL, a lone surrogate, a no-break space). */
function showCharacter(c: string): string {
  return /[\p{C}\p{Z}]/u.test(c) ? `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}` : `'${c}'`;
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

/** A string literal from its opening quote: `''` inside it is one quote. */
function readString(text: string, start: number): { value: string; end: number } {
  let value = '';
  let i = start + 1;
  for (;;) {
    const close = text.indexOf("'", i);
    if (close < 0) throw new SelectorError('a string literal is not closed (a quote inside one is written twice)', start);
    value += text.slice(i, close);
    if (text[close + 1] !== "'") return { value, end: close + 1 };
    value += "'";
    i = close + 2;
  }
}

/**
 * A numeric literal: decimal, hexadecimal (0x...) or octal (a leading 0) integers, with
 * an optional L, are exact; a decimal point, an exponent or an F/D suffix make it
 * approximate.
 */
function readNumber(text: string, start: number): { token: Token; end: number } {
  let i = start;
  if (text[i] === '0' && (text[i + 1] === 'x' || text[i + 1] === 'X')) {
    i += 2;
    while (i < text.length && /[0-9a-fA-F]/.test(text[i]!)) i++;
    if (i === start + 2) throw new SelectorError('a hexadecimal literal has no digits', start);
    const value = BigInt(text.slice(start, i));
    if (text[i] === 'l' || text[i] === 'L') i++;
    return { token: exact(value, start), end: endOfNumber(text, i, start) };
  }
  while (isDigit(text[i])) i++;
  let approximate = false;
  if (text[i] === '.') {
    approximate = true;
    i++;
    while (isDigit(text[i])) i++;
  }
  if (text[i] === 'e' || text[i] === 'E') {
    const mark = i;
    i++;
    if (text[i] === '+' || text[i] === '-') i++;
    if (!isDigit(text[i])) throw new SelectorError('an exponent has no digits', mark);
    while (isDigit(text[i])) i++;
    approximate = true;
  }
  const digits = text.slice(start, i);
  const suffix = text[i];
  if (suffix === 'f' || suffix === 'F' || suffix === 'd' || suffix === 'D') {
    return { token: { kind: 'approx', at: start, value: Number(digits) }, end: endOfNumber(text, i + 1, start) };
  }
  if (approximate) return { token: { kind: 'approx', at: start, value: Number(digits) }, end: endOfNumber(text, i, start) };
  if (suffix === 'l' || suffix === 'L') i++;
  if (digits.length > 1 && digits[0] === '0') {
    if (!/^[0-7]+$/.test(digits)) throw new SelectorError(`'${digits}' is not an octal literal (a leading 0 makes one, of the digits 0-7)`, start);
    return { token: exact(BigInt(`0o${digits.slice(1)}`), start), end: endOfNumber(text, i, start) };
  }
  return { token: exact(BigInt(digits), start), end: endOfNumber(text, i, start) };
}

function exact(value: bigint, at: number): Token {
  if (value > LONG_MIN_MAGNITUDE) throw new SelectorError(LONG_LITERAL_TOO_LARGE, at);
  return { kind: 'exact', at, value };
}

/** A number must not run into a letter or digit (`12abc`, `0x1g`): that is a typo, not two tokens. */
function endOfNumber(text: string, end: number, start: number): number {
  if (end < text.length && IDENT_PART.test(charAt(text, end))) throw new SelectorError(`malformed number '${text.slice(start, end + 1)}'`, start);
  return end;
}
