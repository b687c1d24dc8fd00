// The settings a DR copy of a queue is made with, from its source's: the source's own,
// made durable, HA-replicated (`all`), neither exclusive nor auto-delete, so its contents
// and its position always agree after a restart or failover here; an alternate exchange
// this site lacks is left out; a source without a duplicate-detection window leaves the
// copy this broker's default one. And whether a copy is still of the queue its source
// declares: the settings it takes as they are cannot change in place at a source (only
// the window can, `tandem queue set`), so a difference there says the source queue was
// deleted and made again (a JMS subscription replaced for another selector or noLocal)
// while the copy could not see it. The settings a copy makes its own (durability, HA
// level, alternate exchange, window) are not compared: they differ on the way back too,
// where a copied queue's old site follows its copy.
import type { QueueSettings } from '../broker/changes.js';
import { sameNoLocal } from '../broker/no-local.js';

type Window = Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>;

/** The copy's settings for a source queue's `settings`; `defaults`: this broker's window, `hasExchange`: which exchanges exist here. */
export function copySettings(settings: QueueSettings, defaults: Window, hasExchange: (name: string) => boolean): QueueSettings {
  const alternate = settings.alternateExchange && hasExchange(settings.alternateExchange) ? settings.alternateExchange : '';
  return { ...settings, ...copyWindow(settings, defaults), durable: true, autoDelete: false, exclusive: false, alternateExchange: alternate, replicate: 'all' };
}

/** The window a copy keeps for the source's: the same, or this broker's default (tandemd.conf dedup-window) for a source queue without one. */
export function copyWindow(s: Window, defaults: Window): Window {
  const d = s.dedupWindow > 0 ? s : defaults;
  return { dedupWindow: d.dedupWindow, dedupTtlMs: d.dedupTtlMs, dedupKey: d.dedupKey };
}

/** Settings a copy takes from its source as they are (see copySettings), but for noLocal, compared by sameNoLocal. */
const TAKEN_AS_IS = ['maxCount', 'maxSize', 'limitPolicy', 'defaultTtlMs', 'priorities', 'autoDeleteDelayMs', 'subscription', 'messageGroups', 'selector'] as const;

/** Whether a queue with settings `a` and one with `b` are copies of one source queue, as far as settings tell. */
export function sameSourceQueue(a: QueueSettings, b: QueueSettings): boolean {
  return TAKEN_AS_IS.every((k) => asIs(a, k) === asIs(b, k)) && sameNoLocal(a.noLocal, b.noLocal);
}

/** A setting as compared: message groups off whether `false` or absent (a queue made before the setting). */
function asIs(s: QueueSettings, k: (typeof TAKEN_AS_IS)[number]): unknown {
  return k === 'messageGroups' ? s.messageGroups === true : s[k];
}
