// What a DR secondary takes from its source's `declares` message, the first of each
// link (source.ts): the declares of the queues the bridge asked for that exist there,
// the exchanges they need (their alternate exchanges, those binding them that pass
// their filter) and those bindings, as topologyOf makes them. The message is checked
// whole before any of it is applied: a source (hostile, or broken) that declares
// anything else (a queue not asked for, which may be one of this site's own; settings
// no tandem queue can have; a binding outside a queue's filter, or of a queue it does
// not declare; an exchange delete, which would take one of this site's own; an exchange
// marked as one a DR bridge made, which only this site's bridge marks) is refused
// with the reason, and nothing of it is taken. Settings and windows that come later,
// in the log, are checked by the same rules (settingsProblem, windowProblem).
import type { LoggedChange, QueueSettings } from '../broker/changes.js';
import { DEDUP_MAX_TTL_MS, DEDUP_MAX_WINDOW, MAX_DURATION_MS, isDedupKey } from '../broker/settings.js';
import { MAX_SELECTOR_LENGTH } from '../selector/selector.js';
import { quotePeerValue } from './protocol.js';
import { exchangeMatcher } from './topology.js';

type Window = Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>;
type ExchangeDeclare = Extract<LoggedChange['change'], { kind: 'exchange-declare' }>;

/** A checked declares message: per queue its settings and bindings (exchange to keys), and the exchange declares. */
export interface Declared {
  queues: Map<string, QueueSettings>;
  binds: Map<string, Map<string, Set<string>>>;
  exchanges: ExchangeDeclare[];
}

export interface DeclaresContext {
  /** The exchange filter of a queue this link asked for (dr add --exchanges), or undefined: not asked for. */
  filterOf: (queue: string) => string | undefined;
  /** Whether an exchange is built in here (amq.*: a source declares none, and binds to them). */
  builtIn: (exchange: string) => boolean;
}

/** The declares' records, checked (see the top of the file); throws saying what no tandem source declares. */
export function checkDeclares(entries: readonly LoggedChange[], context: DeclaresContext): Declared {
  const out: Declared = { queues: new Map(), binds: new Map(), exchanges: [] };
  const binds: Array<{ exchange: string; queue: string; key: string }> = [];
  for (const { change: c } of entries) {
    switch (c.kind) {
      case 'queue-declare': {
        const name = quotePeerValue(c.name);
        if (context.filterOf(c.name) === undefined) refuse(`declares queue ${name}, which this secondary did not ask for`);
        if (out.queues.has(c.name)) refuse(`declares queue ${name} twice`);
        const problem = settingsProblem(c.settings);
        if (problem) refuse(`declares queue ${name} with settings no tandem queue has: ${problem}`);
        out.queues.set(c.name, c.settings);
        break;
      }
      case 'exchange-declare':
        refuseDrMark(c);
        out.exchanges.push(c);
        break;
      case 'bind':
        binds.push(c);
        break;
      default:
        refuse(`declares carries a record of kind ${c.kind}; a source declares only exchanges, queues and their bindings`);
    }
  }
  const declaredExchanges = new Set(out.exchanges.map((x) => x.name));
  // Compiled once per queue: a declares may bind a queue thousands of times (a topic's subscriptions).
  const passes = new Map<string, (exchange: string) => boolean>();
  for (const { exchange, queue, key } of binds) {
    const filter = context.filterOf(queue);
    if (filter === undefined || !out.queues.has(queue)) refuse(`declares binds queue ${quotePeerValue(queue)}, which it does not declare`);
    const matcher = passes.get(queue) ?? exchangeMatcher(filter);
    passes.set(queue, matcher);
    if (!matcher(exchange)) refuse(`declares binds queue ${quotePeerValue(queue)} to exchange ${quotePeerValue(exchange)}, which its filter '${filter}' does not pass`);
    if (!declaredExchanges.has(exchange) && !context.builtIn(exchange)) refuse(`declares binds queue ${quotePeerValue(queue)} to exchange ${quotePeerValue(exchange)}, which it does not declare`);
    const byExchange = out.binds.get(queue) ?? new Map<string, Set<string>>();
    out.binds.set(queue, byExchange.set(exchange, (byExchange.get(exchange) ?? new Set<string>()).add(key)));
  }
  // Each exchange declared is one a declared queue needs: binding it, or its alternate exchange.
  const used = new Set<string>();
  for (const byExchange of out.binds.values()) for (const exchange of byExchange.keys()) used.add(exchange);
  for (const s of out.queues.values()) used.add(s.alternateExchange);
  for (const x of out.exchanges) if (!used.has(x.name)) refuse(`declares exchange ${quotePeerValue(x.name)}, which no queue it declares uses`);
  return out;
}

/**
 * Why a source queue's settings are none a tandem queue can have (the bounds
 * parseQueueSettings holds users to), or undefined. The record codec has made them
 * the right types (whole numbers from 0 to 2^53 - 1, strings); taken as they were, a
 * default ttl of 2^53 - 1 ms put expiries no record can hold on the messages an
 * activated copy took, and a window of 2^53 - 1 keys grew without a bound.
 */
export function settingsProblem(s: QueueSettings): string | undefined {
  if (s.priorities < 1 || s.priorities > 10) return `priorities ${s.priorities} is not from 1 to 10`;
  for (const k of ['defaultTtlMs', 'autoDeleteDelayMs'] as const) if (s[k] > MAX_DURATION_MS) return `${k} ${s[k]} is more than ${MAX_DURATION_MS} (100 years)`;
  if (s.selector !== undefined && s.selector.length > MAX_SELECTOR_LENGTH) return `a selector of ${s.selector.length} characters, more than ${MAX_SELECTOR_LENGTH}`;
  return windowProblem(s);
}

/** Why a duplicate-detection window (a queue's settings, or a queue-dedup change) is none a tandem queue can have, or undefined. */
export function windowProblem(s: Window): string | undefined {
  if (s.dedupWindow > DEDUP_MAX_WINDOW) return `dedupWindow ${s.dedupWindow} is more than ${DEDUP_MAX_WINDOW}`;
  if (s.dedupTtlMs > DEDUP_MAX_TTL_MS) return `dedupTtlMs ${s.dedupTtlMs} is more than ${DEDUP_MAX_TTL_MS} (7 days)`;
  if (!isDedupKey(s.dedupKey)) return `dedupKey is not an application property name of at most 255 characters`;
  if (s.dedupWindow === 0 && (s.dedupTtlMs > 0 || s.dedupKey !== '')) return 'a dedup ttl or key without a window';
  return undefined;
}

/**
 * A source's exchange declare carries no DR mark (exchangeDeclare leaves it out): taken, a
 * mark naming this bridge's source made the source's later delete take an exchange of this
 * site's own. The bridge marks what it makes itself.
 */
export function refuseDrMark(c: ExchangeDeclare): void {
  if (c.settings.madeByDr !== undefined) refuse(`declares exchange ${quotePeerValue(c.name)} with a DR mark (made by a bridge for ${quotePeerValue(c.settings.madeByDr)}); a source sends its exchanges without one`);
}

function refuse(what: string): never {
  throw new Error(`DR stream: ${what}`);
}
