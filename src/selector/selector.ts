// A JMS message selector, compiled once (when a consumer attaches) and evaluated per
// message: the language alone, knowing nothing of AMQP. Whoever evaluates it reads
// the values of the identifiers it names (`identifiers`, in slot order) from the
// message and hands them over; src/amqp/selector-fields.ts does that for AMQP.
import { evaluate } from './evaluate.js';
import { likeBudget, type LikeBudget } from './like.js';
import { parse, type Node, type SelectorValue } from './parser.js';

export { MAX_SELECTOR_LENGTH, MAX_SELECTOR_TOKENS } from './lexer.js';
export { LIKE_SCAN_FACTOR, LIKE_STEP_LIMIT } from './like.js';
export { MAX_SELECTOR_DEPTH, type SelectorValue } from './parser.js';
export { SelectorError } from './selector-error.js';

export class Selector {
  /** The identifiers the selector names, each once: `values[i]` given to matches is the value of `identifiers[i]`. */
  readonly identifiers: readonly string[];
  private readonly root: Node;

  /** Throws SelectorError (what is wrong, and where) for a selector that is not taken. */
  constructor(readonly text: string) {
    const parsed = parse(text);
    this.root = parsed.root;
    this.identifiers = parsed.identifiers;
  }

  /** true, false or null (unknown) for a message whose identifiers have these values (null: absent). */
  evaluate(values: readonly SelectorValue[]): boolean | null {
    const v = evaluate(this.root, values, budgetFor(values));
    return typeof v === 'boolean' ? v : null;
  }

  /** Is the message selected? Only when the selector is true (not false, not unknown). */
  matches(values: readonly SelectorValue[]): boolean {
    return evaluate(this.root, values, budgetFor(values)) === true;
  }
}

/** The LIKE work allowed on one message: in proportion to its string values (LIKE_SCAN_FACTOR). */
function budgetFor(values: readonly SelectorValue[]): LikeBudget {
  let textLength = 0;
  for (const v of values) if (typeof v === 'string') textLength += v.length;
  return likeBudget(textLength);
}
