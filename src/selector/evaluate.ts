// Evaluating a parsed selector against one message's values, with SQL's three-valued
// logic (JMS 2.0 3.8.1.2): a missing property is null, and a comparison, arithmetic,
// BETWEEN, IN or LIKE on a null is unknown (null here); NOT unknown is unknown; AND
// is false if either side is false, OR true if either is true, else unknown. A
// message is selected only when the whole selector is true. Values of unlike types
// compare false, as JMS says; an exact and an approximate number compare as Java's
// numeric promotion has it (the long made a double). Where JMS leaves an operator on a
// value of another type open, the answer is the ActiveMQ-family brokers' (Artemis,
// Qpid): IN on a non-string is unknown, LIKE on one false (so NOT LIKE true).
// Recursion is bounded by the parser's depth limit; the LIKEs' work by the budget.
import { matchLike, type LikeBudget } from './like.js';
import type { Node, SelectorValue } from './parser.js';

const LONG_BITS = 64;

export function evaluate(node: Node, values: readonly SelectorValue[], budget: LikeBudget): SelectorValue {
  switch (node.kind) {
    case 'literal':
      return node.value;
    case 'field':
      return values[node.slot] ?? null;
    case 'not': {
      const v = truth(evaluate(node.operand, values, budget));
      return v === null ? null : !v;
    }
    case 'and': {
      let unknown = false;
      for (const operand of node.operands) {
        const v = truth(evaluate(operand, values, budget));
        if (v === false) return false;
        if (v === null) unknown = true;
      }
      return unknown ? null : true;
    }
    case 'or': {
      let unknown = false;
      for (const operand of node.operands) {
        const v = truth(evaluate(operand, values, budget));
        if (v === true) return true;
        if (v === null) unknown = true;
      }
      return unknown ? null : false;
    }
    case 'compare':
      return compare(node.op, evaluate(node.left, values, budget), evaluate(node.right, values, budget));
    case 'arithmetic':
      return arithmetic(node.op, evaluate(node.left, values, budget), evaluate(node.right, values, budget));
    case 'negate': {
      const v = evaluate(node.operand, values, budget);
      if (typeof v === 'bigint') return BigInt.asIntN(LONG_BITS, -v);
      return typeof v === 'number' ? -v : null;
    }
    case 'between': {
      // As JMS defines them: v >= low AND v <= high; NOT BETWEEN is v < low OR v > high (false, not true, for a string).
      const v = evaluate(node.operand, values, budget);
      const low = evaluate(node.low, values, budget);
      const high = evaluate(node.high, values, budget);
      return node.negated ? or(compare('<', v, low), compare('>', v, high)) : and(compare('>=', v, low), compare('<=', v, high));
    }
    case 'in': {
      const v = evaluate(node.operand, values, budget);
      if (typeof v !== 'string') return null;
      return node.values.has(v) !== node.negated;
    }
    case 'like': {
      const v = evaluate(node.operand, values, budget);
      if (v === null) return null;
      if (typeof v !== 'string') return node.negated;
      const matched = matchLike(node.pattern, v, budget);
      if (matched === undefined) return null;
      return matched !== node.negated;
    }
    case 'is-null':
      return (evaluate(node.operand, values, budget) === null) !== node.negated;
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

function or(a: SelectorValue, b: SelectorValue): boolean | null {
  if (a === true || b === true) return true;
  return a === false && b === false ? false : null;
}

function isNumber(v: SelectorValue): v is bigint | number {
  return typeof v === 'bigint' || typeof v === 'number';
}

function compare(op: string, a: SelectorValue, b: SelectorValue): boolean | null {
  if (a === null || b === null) return null;
  if (isNumber(a) && isNumber(b)) {
    // A long with a double: the long made a double first (Java's numeric promotion), not compared exactly as JavaScript would.
    if (typeof a !== typeof b) {
      a = Number(a);
      b = Number(b);
    }
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
