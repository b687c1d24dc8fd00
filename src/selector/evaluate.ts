// Evaluating a parsed selector against one message's values, with SQL's three-valued
// logic (JMS 2.0 3.8.1.2): a missing property is null, and a comparison, arithmetic,
// BETWEEN, IN or LIKE on a null is unknown (null here); NOT unknown is unknown; AND
// is false if either side is false, OR true if either is true, else unknown. A
// message is selected only when the whole selector is true. Values of unlike types
// compare false, as JMS says. Recursion is bounded by the parser's depth limit.
import { matchLike } from './like.js';
import type { Node, SelectorValue } from './parser.js';

const LONG_BITS = 64;

export function evaluate(node: Node, values: readonly SelectorValue[]): SelectorValue {
  switch (node.kind) {
    case 'literal':
      return node.value;
    case 'field':
      return values[node.slot] ?? null;
    case 'not': {
      const v = truth(evaluate(node.operand, values));
      return v === null ? null : !v;
    }
    case 'and': {
      let unknown = false;
      for (const operand of node.operands) {
        const v = truth(evaluate(operand, values));
        if (v === false) return false;
        if (v === null) unknown = true;
      }
      return unknown ? null : true;
    }
    case 'or': {
      let unknown = false;
      for (const operand of node.operands) {
        const v = truth(evaluate(operand, values));
        if (v === true) return true;
        if (v === null) unknown = true;
      }
      return unknown ? null : false;
    }
    case 'compare':
      return compare(node.op, evaluate(node.left, values), evaluate(node.right, values));
    case 'arithmetic':
      return arithmetic(node.op, evaluate(node.left, values), evaluate(node.right, values));
    case 'negate': {
      const v = evaluate(node.operand, values);
      if (typeof v === 'bigint') return BigInt.asIntN(LONG_BITS, -v);
      return typeof v === 'number' ? -v : null;
    }
    case 'between': {
      const v = evaluate(node.operand, values);
      const inRange = and(compare('>=', v, evaluate(node.low, values)), compare('<=', v, evaluate(node.high, values)));
      return node.negated && inRange !== null ? !inRange : inRange;
    }
    case 'in': {
      const v = evaluate(node.operand, values);
      if (v === null) return null;
      return typeof v === 'string' && node.values.has(v) ? !node.negated : node.negated && typeof v === 'string';
    }
    case 'like': {
      const v = evaluate(node.operand, values);
      if (v === null) return null;
      if (typeof v !== 'string') return false;
      const matched = matchLike(node.pattern, v);
      if (matched === undefined) return null;
      return matched !== node.negated;
    }
    case 'is-null':
      return (evaluate(node.operand, values) === null) !== node.negated;
  }
}

/** A value as a condition: only a boolean is true or false; anything else is unknown. */
function truth(v: SelectorValue): boolean | null {
  return typeof v === 'boolean' ? v : null;
}

function and(a: SelectorValue, b: SelectorValue): boolean | null {
  if (a === false || b === false) return false;
  return a === true && b === true ? true : null;
}

function isNumber(v: SelectorValue): v is bigint | number {
  return typeof v === 'bigint' || typeof v === 'number';
}

function compare(op: string, a: SelectorValue, b: SelectorValue): boolean | null {
  if (a === null || b === null) return null;
  if (isNumber(a) && isNumber(b)) {
    // A long and a double compare by value (JavaScript compares a bigint and a number exactly).
    switch (op) {
      case '=':
        return a == b;
      case '<>':
        return a != b;
      case '<':
        return a < b;
      case '>':
        return a > b;
      case '<=':
        return a <= b;
      default:
        return a >= b;
    }
  }
  // Strings and booleans: = and <> only; unlike types are never equal (JMS: false, not unknown).
  if (typeof a !== typeof b || (op !== '=' && op !== '<>')) return false;
  return (a === b) === (op === '=');
}

function arithmetic(op: string, a: SelectorValue, b: SelectorValue): SelectorValue {
  if (!isNumber(a) || !isNumber(b)) return null;
  if (typeof a === 'bigint' && typeof b === 'bigint') {
    // Two longs: Java long arithmetic (wrapping at 64 bits, division truncating); x / 0 is unknown.
    switch (op) {
      case '+':
        return BigInt.asIntN(LONG_BITS, a + b);
      case '-':
        return BigInt.asIntN(LONG_BITS, a - b);
      case '*':
        return BigInt.asIntN(LONG_BITS, a * b);
      default:
        return b === 0n ? null : BigInt.asIntN(LONG_BITS, a / b);
    }
  }
  // Either approximate: both as doubles.
  const x = Number(a);
  const y = Number(b);
  switch (op) {
    case '+':
      return x + y;
    case '-':
      return x - y;
    case '*':
      return x * y;
    default:
      return x / y;
  }
}
