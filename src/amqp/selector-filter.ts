// The JMS message selector filter of a consumer's source (apache.org:selector-filter:string,
// what Apache Qpid JMS sends for createConsumer(dest, selector)): compiled at attach
// into the predicate the queue asks of each message (Consumer.selects). A selector that
// does not parse, or passes the bounds (src/selector/), refuses the attach with
// amqp:invalid-field naming the problem and its place.
import { TandemError } from '../broker/errors.js';
import { Selector, SelectorError } from '../selector/selector.js';
import type { AmqpValue } from './engine/types.js';
import type { SelectorPredicate } from '../broker/routing-selectors.js';
import { selectorFieldReader } from './selector-fields.js';

const SELECTOR_SYMBOL = 'apache.org:selector-filter:string';
const SELECTOR_CODE = 0x0000468c00000004n;

export interface SourceSelector {
  /** The filter entry as the client sent it: our attach names it as in force. */
  entry: [AmqpValue, AmqpValue];
  selector: Selector;
  selects: SelectorPredicate;
}

/** The source's selector, compiled; undefined when it has none, or an empty one (no selector, as JMS says). */
export function sourceSelector(filter: [AmqpValue, AmqpValue][]): SourceSelector | undefined {
  const entry = filter.find(([, v]) => v.type === 'described' && isSelectorDescriptor(v.descriptor));
  if (entry === undefined) return undefined;
  const value = (entry[1] as Extract<AmqpValue, { type: 'described' }>).value;
  if (value.type !== 'string') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `the ${SELECTOR_SYMBOL} filter holds a ${value.type}; a selector is a string`);
  if (value.value.trim() === '') return undefined;
  const { selector, selects } = compileSelector(value.value);
  return { entry, selector, selects };
}

/**
 * A selector's text made into the predicate over messages: for a consumer's source, and
 * for a topic subscription's queue (QueueSettings.selector, asked at routing). Throws
 * TandemError (amqp:invalid-field) naming the problem and its place.
 */
export function compileSelector(text: string): { selector: Selector; selects: SelectorPredicate } {
  let selector: Selector;
  try {
    selector = new Selector(text);
  } catch (err) {
    if (err instanceof SelectorError) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `invalid message selector: ${err.message}`);
    throw err;
  }
  const read = selectorFieldReader(selector.identifiers);
  return { selector, selects: (msg, deliveryCount = msg.deliveryCount) => selector.matches(read(msg, deliveryCount)) };
}

function isSelectorDescriptor(d: AmqpValue): boolean {
  return (d.type === 'symbol' && d.value === SELECTOR_SYMBOL) || (d.type === 'ulong' && d.value === SELECTOR_CODE);
}
