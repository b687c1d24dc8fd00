// Exchanges route a message to queues by its subject (the AMQP 0-9-1 routing key).
import type { ExchangeSettings, ExchangeType } from './changes.js';
import { invalidArgument } from './errors.js';

export interface Binding {
  queue: string;
  key: string;
}

// ---- topic patterns -----------------------------------------------------------
//
// Binding keys and subjects both come from clients, so matching must cost a bounded
// amount per message and binding whatever they send (a 16k-word '#.#.#...' key against a
// 512 KB subject once held the event loop 11 s). Three limits together give the bound:
//  - a topic binding key has at most MAX_TOPIC_KEY_WORDS words and MAX_TOPIC_KEY_BYTES
//    bytes (refused at bind, so at attach and by management too);
//  - runs of '#' collapse to one '#' (they match the same), so a pattern costs only its
//    other words plus one per run;
//  - a subject over MAX_TOPIC_SUBJECT_WORDS words or MAX_TOPIC_SUBJECT_BYTES bytes is
//    matched only by patterns decided from its ends: those with no '#' (they need exactly
//    their own word count) or one run of '#' (a fixed head and tail, e.g. '#', 'a.#',
//    '#.z', 'a.*.#.z'). A pattern with two or more separate runs of '#' ('#.error.#')
//    needs a search along the whole subject, so it does not match such a subject: the
//    message still goes to the other bindings, or to the alternate exchange.
// Cost per message per binding: at most 255 word comparisons (head and tail), plus for
// two or more runs of '#' at most 256 x 16,385 cells of the two-row table below, all on
// a subject split once per message (not once per binding).

export const MAX_TOPIC_KEY_WORDS = 255;
export const MAX_TOPIC_KEY_BYTES = 1024;
export const MAX_TOPIC_SUBJECT_WORDS = 16_384;
export const MAX_TOPIC_SUBJECT_BYTES = 64 * 1024;

/** A topic binding key, parsed once at bind. */
export interface TopicPattern {
  /** The words, each run of '#' as one '#'. */
  words: string[];
  /** Words before the first '#' (all of them if there is none). */
  head: number;
  /** Words after the last '#' (0 if there is none). */
  tail: number;
  /** Runs of '#'. */
  runs: number;
}

/** A subject split into words once, for every binding it is matched against. */
export interface TopicSubject {
  words: string[];
  /** Over the subject limits: only patterns decided from the ends may match it. */
  long: boolean;
}

/** Counts the work a match does (tests check it stays within the bound). */
export interface MatchMeter {
  steps: number;
}

/** Refuse a binding key that could make topic matching expensive; other exchange types only look keys up. */
export function checkBindingKey(type: ExchangeType, key: string): void {
  if (type !== 'topic') return;
  const bytes = Buffer.byteLength(key, 'utf8');
  const words = key.split('.').length;
  if (words > MAX_TOPIC_KEY_WORDS || bytes > MAX_TOPIC_KEY_BYTES) {
    throw invalidArgument(
      `a topic binding key may have at most ${MAX_TOPIC_KEY_WORDS} words and ${MAX_TOPIC_KEY_BYTES} bytes; this one has ${words} words and ${bytes} bytes`,
    );
  }
}

export function compileTopicPattern(pattern: string): TopicPattern {
  const words: string[] = [];
  for (const w of pattern.split('.')) if (!(w === '#' && words[words.length - 1] === '#')) words.push(w);
  const first = words.indexOf('#');
  if (first < 0) return { words, head: words.length, tail: 0, runs: 0 };
  const runs = words.filter((w) => w === '#').length;
  return { words, head: first, tail: words.length - 1 - words.lastIndexOf('#'), runs };
}

export function topicSubject(subject: string): TopicSubject {
  // Bytes are at least UTF-16 units, so a string this short is within the byte limit without counting.
  const long = subject.length > MAX_TOPIC_SUBJECT_BYTES || (subject.length * 3 > MAX_TOPIC_SUBJECT_BYTES && Buffer.byteLength(subject, 'utf8') > MAX_TOPIC_SUBJECT_BYTES);
  const words = subject.split('.');
  return { words, long: long || words.length > MAX_TOPIC_SUBJECT_WORDS };
}

const wordMatches = (p: string, k: string): boolean => p === '*' || p === k;

// The two rows of the table below, kept between calls: no allocation per pattern word.
let reach = new Uint8Array(64);
let next = new Uint8Array(64);

/** AMQP 0-9-1 topic match: words split on '.', '*' = exactly one word, '#' = zero or more. */
export function matchTopic(p: TopicPattern, s: TopicSubject, meter?: MatchMeter): boolean {
  const { words } = p;
  const k = s.words;
  if (p.runs === 0 && k.length !== words.length) return false;
  // Every word but '#' takes one subject word.
  if (k.length < words.length - p.runs) return false;
  for (let i = 0; i < p.head; i++) if (!wordMatches(words[i], k[i])) return false;
  for (let i = 1; i <= p.tail; i++) if (!wordMatches(words[words.length - i], k[k.length - i])) return false;
  if (meter) meter.steps += p.head + p.tail;
  if (p.runs <= 1) return true;
  if (s.long) return false;
  // Two or more runs: the middle, '#' ... '#', against the subject between head and tail.
  // reach[i]: the pattern words so far can match the first i middle subject words.
  // One pass per pattern word keeps this O(pattern x subject); trying every suffix for
  // each '#' instead is exponential in the number of '#'s.
  const from = p.head;
  const n = k.length - p.tail - from;
  if (reach.length < n + 1) {
    reach = new Uint8Array(2 * (n + 1));
    next = new Uint8Array(2 * (n + 1));
  }
  reach.fill(0, 0, n + 1);
  reach[0] = 1;
  for (let w = p.head; w < words.length - p.tail; w++) {
    const word = words[w];
    if (word === '#') {
      next[0] = reach[0];
      for (let i = 1; i <= n; i++) next[i] = reach[i] | next[i - 1];
    } else {
      next[0] = 0;
      for (let i = 0; i < n; i++) next[i + 1] = reach[i] && wordMatches(word, k[from + i]) ? 1 : 0;
    }
    if (meter) meter.steps += n + 1;
    [reach, next] = [next, reach];
  }
  return reach[n] === 1;
}

/** Does a topic binding key match a subject? (One-off: an exchange parses each only once.) */
export function topicMatches(pattern: string, key: string, meter?: MatchMeter): boolean {
  return matchTopic(compileTopicPattern(pattern), topicSubject(key), meter);
}

// ---- exchanges ----------------------------------------------------------------

/** The queues bound with one key; for a topic exchange, the key parsed once for all of them. */
interface KeyGroup {
  queues: Set<string>;
  pattern?: TopicPattern;
}

export class Exchange {
  // Every lookup is by queue or by key, never a scan: a connection may hold tens of
  // thousands of subscriptions, each a binding made and dropped one by one. Maps keep
  // insertion order, so bindings (and so snapshots and DR topology) list in bind order.
  private readonly all = new Set<Binding>();
  private readonly byQueue = new Map<string, Map<string, Binding>>();
  private readonly byKey = new Map<string, KeyGroup>();

  constructor(
    readonly name: string,
    readonly type: ExchangeType,
    readonly settings: ExchangeSettings,
    /** Built-in exchanges (amq.*) are neither journaled nor deletable. */
    readonly builtIn = false,
  ) {}

  /** The connection a temporary topic belongs to (only it consumes from it); undefined for any other exchange. */
  owner: string | undefined;

  /** Every binding, in the order made. */
  get bindings(): Binding[] {
    return [...this.all];
  }

  get bindingCount(): number {
    return this.all.size;
  }

  /** The keys a queue is bound with, in the order made. */
  keysOf(queue: string): string[] {
    return [...(this.byQueue.get(queue)?.keys() ?? [])];
  }

  hasBinding(queue: string, key: string): boolean {
    return this.byQueue.get(queue)?.has(key) ?? false;
  }

  bind(queue: string, key: string): boolean {
    let keys = this.byQueue.get(queue);
    if (keys?.has(key)) return false;
    const binding = { queue, key };
    if (!keys) this.byQueue.set(queue, (keys = new Map()));
    keys.set(key, binding);
    this.all.add(binding);
    let group = this.byKey.get(key);
    if (!group) {
      group = { queues: new Set(), pattern: this.type === 'topic' ? compileTopicPattern(key) : undefined };
      this.byKey.set(key, group);
    }
    group.queues.add(queue);
    return true;
  }

  unbind(queue: string, key: string): boolean {
    const keys = this.byQueue.get(queue);
    const binding = keys?.get(key);
    if (!keys || !binding) return false;
    keys.delete(key);
    if (keys.size === 0) this.byQueue.delete(queue);
    this.all.delete(binding);
    const group = this.byKey.get(key);
    group?.queues.delete(queue);
    if (group && group.queues.size === 0) this.byKey.delete(key);
    return true;
  }

  /** Drop every binding to a queue (the queue was deleted); returns the keys removed. */
  unbindQueue(queue: string): string[] {
    const keys = this.keysOf(queue);
    for (const key of keys) this.unbind(queue, key);
    return keys;
  }

  /** Names of the queues a message with this subject goes to (each once). */
  route(subject: string | undefined): string[] {
    const key = subject ?? '';
    switch (this.type) {
      case 'fanout':
        return [...this.byQueue.keys()];
      case 'direct': {
        const group = this.byKey.get(key);
        return group ? [...group.queues] : [];
      }
      case 'topic': {
        // Each distinct pattern is matched once, however many queues share it.
        const out = new Set<string>();
        if (this.byKey.size === 0) return [];
        const s = topicSubject(key);
        for (const group of this.byKey.values()) {
          if (matchTopic(group.pattern!, s)) for (const q of group.queues) out.add(q);
        }
        return [...out];
      }
    }
  }
}
