// The grammar of a JMS message selector (JMS 2.0 3.8.1.1), by recursive descent,
// lowest precedence first: OR, AND, NOT, then the predicates (comparison,
// BETWEEN, IN, LIKE, IS NULL), + and -, * and /, unary + and -, and the
// primaries (literals, identifiers, parentheses). Where a literal makes a part's
// type known, a part that can never be right (`'a' > 1`, `colour + 1 = 'x'`,
// a selector that is a number) is refused here, with its place, rather than
// selecting nothing in silence. Nesting is bounded (MAX_SELECTOR_DEPTH), so a
// hostile selector can exhaust neither this parser's stack nor the evaluator's.
import { compileLike, type LikePattern } from './like.js';
import { LONG_LITERAL_TOO_LARGE, LONG_MIN_MAGNITUDE, tokenize, type Keyword, type Operator, type Token } from './lexer.js';
import { SelectorError } from './selector-error.js';

/** Deepest nesting of a selector's expression tree (parentheses, NOT, signs, and chained arithmetic). */
export const MAX_SELECTOR_DEPTH = 64;

/** A value while a selector is evaluated: exact numbers are bigints (Java longs), approximate ones numbers; null is unknown. */
export type SelectorValue = string | bigint | number | boolean | null;

export type Comparison = '=' | '<>' | '<' | '>' | '<=' | '>=';
export type Arithmetic = '+' | '-' | '*' | '/';

export type Node =
  | { kind: 'literal'; value: SelectorValue }
  /** An identifier, by its slot in the selector's identifier list. */
  | { kind: 'field'; slot: number }
  | { kind: 'not'; operand: Node }
  | { kind: 'and' | 'or'; operands: Node[] }
  | { kind: 'compare'; op: Comparison; left: Node; right: Node }
  | { kind: 'arithmetic'; op: Arithmetic; left: Node; right: Node }
  | { kind: 'negate'; operand: Node }
  | { kind: 'between'; negated: boolean; operand: Node; low: Node; high: Node }
  | { kind: 'in'; negated: boolean; operand: Node; values: ReadonlySet<string> }
  | { kind: 'like'; negated: boolean; operand: Node; pattern: LikePattern }
  | { kind: 'is-null'; negated: boolean; operand: Node };

/** What a part is known to yield: a boolean, a number, a string, or (an identifier) any of them. */
type Kind = 'boolean' | 'number' | 'string' | 'any';

interface Typed {
  node: Node;
  kind: Kind;
  /** Where the part starts in the selector. */
  at: number;
  /** Its depth in the tree. */
  depth: number;
}

export interface ParsedSelector {
  root: Node;
  /** The identifiers the selector names, each once, in the order of their slots. */
  identifiers: string[];
}

export function parse(text: string): ParsedSelector {
  return new Parser(tokenize(text)).selector();
}

class Parser {
  private pos = 0;
  /** Nesting of the descent right now (parentheses, NOT, signs). */
  private nesting = 0;
  private readonly slots = new Map<string, number>();

  constructor(private readonly tokens: Token[]) {}

  selector(): ParsedSelector {
    if (this.peek().kind === 'end') throw new SelectorError('the selector is empty', 0);
    const root = this.or();
    const t = this.peek();
    if (t.kind !== 'end') throw new SelectorError(`unexpected ${describe(t)} after a complete expression`, t.at);
    this.condition(root, 'the selector');
    return { root: root.node, identifiers: [...this.slots.keys()] };
  }

  private or(): Typed {
    return this.chain('OR', () => this.and());
  }

  private and(): Typed {
    return this.chain('AND', () => this.not());
  }

  /** `a OP b OP c` as one node of many operands (no deep tree for a long chain). */
  private chain(op: 'AND' | 'OR', next: () => Typed): Typed {
    const first = next();
    if (!this.isKeyword(op)) return first;
    const parts = [first];
    while (this.takeKeyword(op)) parts.push(next());
    for (const p of parts) this.condition(p, `an operand of ${op}`);
    const depth = 1 + Math.max(...parts.map((p) => p.depth));
    return this.typed({ kind: op === 'AND' ? 'and' : 'or', operands: parts.map((p) => p.node) }, 'boolean', first.at, depth);
  }

  private not(): Typed {
    const t = this.peek();
    if (!this.takeKeyword('NOT')) return this.predicate();
    const operand = this.nested(() => this.not());
    this.condition(operand, 'the operand of NOT');
    return this.typed({ kind: 'not', operand: operand.node }, 'boolean', t.at, operand.depth + 1);
  }

  private predicate(): Typed {
    const left = this.additive();
    const t = this.peek();
    if (t.kind === 'op' && isComparison(t.text)) {
      this.pos++;
      const right = this.additive();
      this.comparable(left, right, t.text, t.at);
      return this.typed({ kind: 'compare', op: t.text, left: left.node, right: right.node }, 'boolean', left.at, 1 + Math.max(left.depth, right.depth));
    }
    if (this.takeKeyword('IS')) {
      const negated = this.takeKeyword('NOT');
      this.expectKeyword('NULL', 'after IS');
      return this.typed({ kind: 'is-null', negated, operand: left.node }, 'boolean', left.at, left.depth + 1);
    }
    const negated = this.isKeyword('NOT') && this.isKeywordAt(this.pos + 1, ['BETWEEN', 'IN', 'LIKE']);
    if (negated) this.pos++;
    if (this.takeKeyword('BETWEEN')) {
      const low = this.additive();
      this.expectKeyword('AND', 'between the bounds of BETWEEN');
      const high = this.additive();
      for (const p of [left, low, high]) this.numeric(p, 'BETWEEN');
      return this.typed({ kind: 'between', negated, operand: left.node, low: low.node, high: high.node }, 'boolean', left.at, 1 + Math.max(left.depth, low.depth, high.depth));
    }
    if (this.takeKeyword('IN')) {
      this.stringOperand(left, 'IN');
      return this.typed({ kind: 'in', negated, operand: left.node, values: this.inList() }, 'boolean', left.at, left.depth + 1);
    }
    if (this.takeKeyword('LIKE')) {
      this.stringOperand(left, 'LIKE');
      const pattern = this.expectString('a pattern after LIKE');
      const escape = this.takeKeyword('ESCAPE') ? this.expectString('an escape character after ESCAPE') : undefined;
      const compiled = compileLike(pattern.value, pattern.at, escape?.value, escape?.at);
      return this.typed({ kind: 'like', negated, operand: left.node, pattern: compiled }, 'boolean', left.at, left.depth + 1);
    }
    return left;
  }

  /** `( 'a', 'b', ... )` after IN: string literals only, as JMS says. */
  private inList(): ReadonlySet<string> {
    this.expectOp('(', 'after IN');
    const values = new Set<string>();
    do values.add(this.expectString('a string literal in an IN list').value);
    while (this.takeOp(','));
    this.expectOp(')', 'to close the IN list');
    return values;
  }

  private additive(): Typed {
    return this.arithmetic(['+', '-'], () => this.multiplicative());
  }

  private multiplicative(): Typed {
    return this.arithmetic(['*', '/'], () => this.unary());
  }

  private arithmetic(ops: Operator[], next: () => Typed): Typed {
    let left = next();
    for (let t = this.peek(); t.kind === 'op' && ops.includes(t.text); t = this.peek()) {
      this.pos++;
      const right = next();
      this.numeric(left, `'${t.text}'`);
      this.numeric(right, `'${t.text}'`);
      left = this.typed({ kind: 'arithmetic', op: t.text as Arithmetic, left: left.node, right: right.node }, 'number', left.at, 1 + Math.max(left.depth, right.depth));
    }
    return left;
  }

  private unary(): Typed {
    const t = this.peek();
    if (t.kind === 'op' && (t.text === '+' || t.text === '-')) {
      this.pos++;
      const literal = this.peek();
      // -9223372036854775808 is Long.MIN_VALUE, whose digits alone are past Long.MAX_VALUE.
      if (t.text === '-' && literal.kind === 'exact' && literal.value === LONG_MIN_MAGNITUDE) {
        this.pos++;
        return this.typed({ kind: 'literal', value: -LONG_MIN_MAGNITUDE }, 'number', t.at, 1);
      }
      const operand = this.nested(() => this.unary());
      this.numeric(operand, `unary '${t.text}'`);
      if (t.text === '+') return operand;
      // A negative literal is a literal (so -9223372036854775807 stays exact); -Long.MIN_VALUE wraps, as in Java.
      const n = operand.node;
      if (n.kind === 'literal' && typeof n.value === 'bigint') return this.typed({ kind: 'literal', value: BigInt.asIntN(64, -n.value) }, 'number', t.at, 1);
      if (n.kind === 'literal' && typeof n.value === 'number') return this.typed({ kind: 'literal', value: -n.value }, 'number', t.at, 1);
      return this.typed({ kind: 'negate', operand: n }, 'number', t.at, operand.depth + 1);
    }
    return this.primary();
  }

  private primary(): Typed {
    const t = this.next();
    switch (t.kind) {
      case 'string':
        return this.typed({ kind: 'literal', value: t.value }, 'string', t.at, 1);
      case 'exact':
        if (t.value >= LONG_MIN_MAGNITUDE) throw new SelectorError(LONG_LITERAL_TOO_LARGE, t.at);
        return this.typed({ kind: 'literal', value: t.value }, 'number', t.at, 1);
      case 'approx':
        return this.typed({ kind: 'literal', value: t.value }, 'number', t.at, 1);
      case 'ident':
        return this.typed({ kind: 'field', slot: this.slotOf(t.text) }, 'any', t.at, 1);
      case 'keyword':
        if (t.text === 'TRUE' || t.text === 'FALSE') return this.typed({ kind: 'literal', value: t.text === 'TRUE' }, 'boolean', t.at, 1);
        if (t.text === 'NULL') throw new SelectorError('NULL is only written in IS NULL or IS NOT NULL', t.at);
        break;
      case 'op':
        if (t.text === '(') {
          const inner = this.nested(() => this.or());
          this.expectOp(')', 'to close the parenthesis');
          return inner;
        }
        break;
    }
    throw new SelectorError(`expected a value, an identifier or '(' but found ${describe(t)}`, t.at);
  }

  // ---- checks ------------------------------------------------------------------

  private condition(p: Typed, what: string): void {
    if (p.kind !== 'boolean' && p.kind !== 'any') throw new SelectorError(`${what} must be a condition (true or false), not a ${p.kind}`, p.at);
  }

  private numeric(p: Typed, what: string): void {
    if (p.kind !== 'number' && p.kind !== 'any') throw new SelectorError(`${what} takes numbers, not a ${p.kind}`, p.at);
  }

  private stringOperand(p: Typed, what: string): void {
    if (p.kind !== 'string' && p.kind !== 'any') throw new SelectorError(`${what} applies to a string identifier, not a ${p.kind}`, p.at);
  }

  /** Strings and booleans are compared with = and <> only; two known kinds must be the same. */
  private comparable(left: Typed, right: Typed, op: Comparison, at: number): void {
    if (op !== '=' && op !== '<>') {
      this.numeric(left, `'${op}'`);
      this.numeric(right, `'${op}'`);
      return;
    }
    if (left.kind !== 'any' && right.kind !== 'any' && left.kind !== right.kind) throw new SelectorError(`'${op}' compares a ${left.kind} with a ${right.kind}, which is never true`, at);
  }

  // ---- tokens ------------------------------------------------------------------

  private typed(node: Node, kind: Kind, at: number, depth: number): Typed {
    if (depth > MAX_SELECTOR_DEPTH) throw new SelectorError(`the selector nests deeper than ${MAX_SELECTOR_DEPTH} levels`, at);
    return { node, kind, at, depth };
  }

  /** A descent that nests (parentheses, NOT, signs): bounded before it recurses. */
  private nested(parse: () => Typed): Typed {
    if (++this.nesting > MAX_SELECTOR_DEPTH) throw new SelectorError(`the selector nests deeper than ${MAX_SELECTOR_DEPTH} levels`, this.peek().at);
    const out = parse();
    this.nesting--;
    return out;
  }

  private slotOf(name: string): number {
    let slot = this.slots.get(name);
    if (slot === undefined) this.slots.set(name, (slot = this.slots.size));
    return slot;
  }

  private peek(): Token {
    return this.tokens[this.pos]!;
  }

  private next(): Token {
    const t = this.tokens[this.pos]!;
    if (t.kind !== 'end') this.pos++;
    return t;
  }

  private isKeyword(word: Keyword): boolean {
    const t = this.peek();
    return t.kind === 'keyword' && t.text === word;
  }

  private isKeywordAt(pos: number, words: Keyword[]): boolean {
    const t = this.tokens[pos];
    return t !== undefined && t.kind === 'keyword' && words.includes(t.text);
  }

  private takeKeyword(word: Keyword): boolean {
    if (!this.isKeyword(word)) return false;
    this.pos++;
    return true;
  }

  private expectKeyword(word: Keyword, where: string): void {
    const t = this.peek();
    if (!this.takeKeyword(word)) throw new SelectorError(`expected ${word} ${where} but found ${describe(t)}`, t.at);
  }

  private takeOp(op: Operator): boolean {
    const t = this.peek();
    if (t.kind !== 'op' || t.text !== op) return false;
    this.pos++;
    return true;
  }

  private expectOp(op: Operator, where: string): void {
    const t = this.peek();
    if (!this.takeOp(op)) throw new SelectorError(`expected '${op}' ${where} but found ${describe(t)}`, t.at);
  }

  private expectString(what: string): { value: string; at: number } {
    const t = this.next();
    if (t.kind !== 'string') throw new SelectorError(`expected ${what} but found ${describe(t)}`, t.at);
    return { value: t.value, at: t.at };
  }
}

function isComparison(op: Operator): op is Comparison {
  return op === '=' || op === '<>' || op === '<' || op === '>' || op === '<=' || op === '>=';
}

function describe(t: Token): string {
  switch (t.kind) {
    case 'end':
      return 'the end of the selector';
    case 'ident':
      return `identifier '${t.text}'`;
    case 'keyword':
      return t.text;
    case 'string':
      return 'a string literal';
    case 'exact':
    case 'approx':
      return 'a number';
    case 'op':
      return `'${t.text}'`;
  }
}
