// Exchanges route a message to queues by its subject (the AMQP 0-9-1 routing key).
import type { ExchangeSettings, ExchangeType } from './changes.js';

export interface Binding {
  queue: string;
  key: string;
}

/** AMQP 0-9-1 topic match: words split on '.', '*' = exactly one word, '#' = zero or more. */
export function topicMatches(pattern: string, key: string): boolean {
  const p = pattern.split('.');
  const k = key.split('.');
  // reach[i]: the pattern words consumed so far can match the first i key words.
  // One pass per pattern word keeps this O(pattern x key); trying every suffix for
  // each '#' instead is exponential in the number of '#'s (a binding could hang routing).
  let reach = new Uint8Array(k.length + 1);
  reach[0] = 1;
  for (const word of p) {
    const next = new Uint8Array(k.length + 1);
    if (word === '#') {
      for (let i = 0; i <= k.length; i++) next[i] = reach[i] || (i > 0 ? next[i - 1] : 0);
    } else {
      for (let i = 0; i < k.length; i++) if (reach[i] && (word === '*' || word === k[i])) next[i + 1] = 1;
    }
    reach = next;
  }
  return reach[k.length] === 1;
}

export class Exchange {
  readonly bindings: Binding[] = [];
  private readonly directIndex = new Map<string, Set<string>>();

  constructor(
    readonly name: string,
    readonly type: ExchangeType,
    readonly settings: ExchangeSettings,
    /** Built-in exchanges (amq.*) are neither journaled nor deletable. */
    readonly builtIn = false,
  ) {}

  hasBinding(queue: string, key: string): boolean {
    return this.bindings.some((b) => b.queue === queue && b.key === key);
  }

  bind(queue: string, key: string): boolean {
    if (this.hasBinding(queue, key)) return false;
    this.bindings.push({ queue, key });
    if (this.type === 'direct') {
      let set = this.directIndex.get(key);
      if (!set) this.directIndex.set(key, (set = new Set()));
      set.add(queue);
    }
    return true;
  }

  unbind(queue: string, key: string): boolean {
    const i = this.bindings.findIndex((b) => b.queue === queue && b.key === key);
    if (i < 0) return false;
    this.bindings.splice(i, 1);
    if (this.type === 'direct') {
      const set = this.directIndex.get(key);
      set?.delete(queue);
      if (set && set.size === 0) this.directIndex.delete(key);
    }
    return true;
  }

  /** Drop every binding to a queue (the queue was deleted); returns the keys removed. */
  unbindQueue(queue: string): string[] {
    const keys = this.bindings.filter((b) => b.queue === queue).map((b) => b.key);
    for (const key of keys) this.unbind(queue, key);
    return keys;
  }

  /** Names of the queues a message with this subject goes to (each once). */
  route(subject: string | undefined): string[] {
    const key = subject ?? '';
    switch (this.type) {
      case 'fanout':
        return [...new Set(this.bindings.map((b) => b.queue))];
      case 'direct': {
        const set = this.directIndex.get(key);
        return set ? [...set] : [];
      }
      case 'topic': {
        const out = new Set<string>();
        for (const b of this.bindings) if (topicMatches(b.key, key)) out.add(b.queue);
        return [...out];
      }
    }
  }
}
