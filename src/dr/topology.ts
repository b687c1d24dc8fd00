// Which exchanges and bindings travel with a DR queue (its topology), so an
// activated site routes as the old one did. A queue's filter (`dr add
// --exchanges`, kept in its dr-role) is a comma-separated list of exchange names,
// `*` matching any run of characters; `*` (the default) takes every exchange
// binding the queue, '' none. The queue's own alternate exchange always travels:
// it is one of the queue's settings. Exchanges that bind nothing DR copies are not
// copied, and neither are an exchange's own alternate exchange or bindings to
// other queues.
import type { Broker } from '../broker/broker.js';
import type { LoggedChange } from '../broker/changes.js';
import { invalidArgument } from '../broker/errors.js';
import { globPattern } from '../util/name-pattern.js';

/** Check a filter and return it in canonical spelling. */
export function normaliseExchangeFilter(value: unknown): string {
  if (value === undefined) return '*';
  if (typeof value !== 'string') throw invalidArgument('--exchanges: a comma-separated list of exchange names (* matches anything)');
  const parts = value.split(',').map((p) => p.trim()).filter((p) => p !== '');
  for (const p of parts) if (p.length > 255) throw invalidArgument(`--exchanges: '${p.slice(0, 40)}...' is longer than an exchange name may be`);
  return parts.join(',');
}

/** A compiled filter: does an exchange name pass? */
export function exchangeMatcher(filter: string): (name: string) => boolean {
  if (filter === '*') return () => true;
  if (filter === '') return () => false;
  const res = filter.split(',').map(globPattern);
  return (name) => res.some((re) => re.test(name));
}

/**
 * The topology records a bridge gets with the queues' declares: the declares of the
 * exchanges it needs (the queues' alternate exchanges, and the exchanges that bind
 * them and pass their filter), to go before the queues, and those bindings, after.
 */
export function topologyOf(broker: Broker, queues: Map<string, (name: string) => boolean>): { exchanges: LoggedChange[]; bindings: LoggedChange[] } {
  const exchanges = new Set<string>();
  const binds: LoggedChange[] = [];
  for (const [queue] of queues) {
    const ae = broker.queues.get(queue)?.settings.alternateExchange;
    if (ae) exchanges.add(ae);
  }
  for (const ex of broker.exchanges.values()) {
    for (const b of ex.bindings) {
      const passes = queues.get(b.queue);
      if (!passes?.(ex.name)) continue;
      exchanges.add(ex.name);
      binds.push({ lsn: 0, durable: true, change: { kind: 'bind', exchange: ex.name, queue: b.queue, key: b.key } });
    }
  }
  const declares: LoggedChange[] = [];
  for (const name of exchanges) {
    const d = exchangeDeclare(broker, name);
    if (d) declares.push(d);
  }
  return { exchanges: declares, bindings: binds };
}

/**
 * The declare of a (non built-in) exchange as it is now, or undefined. Without this
 * site's DR mark (who made the exchange here is nothing the other site goes by: its
 * bridge marks what it makes; checkDeclares refuses a marked declare), so the record is
 * one a secondary of the version before reads (code 3).
 */
export function exchangeDeclare(broker: Broker, name: string): LoggedChange | undefined {
  const ex = broker.exchanges.get(name);
  if (!ex || ex.builtIn) return undefined;
  const { madeByDr: _mark, ...settings } = ex.settings;
  return { lsn: 0, durable: true, change: { kind: 'exchange-declare', name, type: ex.type, settings } };
}

/**
 * Unbind `queue` from every exchange, each binding a logged change, but those `keep`
 * keeps; how many went.
 */
export function unbindQueue(broker: Broker, queue: string, keep: (exchange: string, key: string) => boolean): number {
  let n = 0;
  for (const ex of [...broker.exchanges.values()]) {
    for (const key of ex.keysOf(queue)) {
      if (keep(ex.name, key)) continue;
      broker.unbind(ex.name, queue, key);
      n++;
    }
  }
  return n;
}
