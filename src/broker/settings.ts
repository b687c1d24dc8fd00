// Queue and exchange settings from user input (management requests, CLI, link
// properties). Names follow qpid-config where users know them; every bad value
// is refused with a message naming the key and what it accepts.
import { isReplicationLevel, type ExchangeSettings, type ExchangeType, type QueueSettings, type ReplicationLevel } from './changes.js';
import { invalidArgument } from './errors.js';
import { shownValue } from '../util/safe-string.js';

export const defaultQueueSettings: QueueSettings = {
  durable: false,
  autoDelete: false,
  autoDeleteDelayMs: 0,
  exclusive: false,
  maxCount: 0,
  maxSize: 0,
  limitPolicy: 'reject',
  defaultTtlMs: 0,
  alternateExchange: '',
  priorities: 1,
  replicate: undefined,
  dedupWindow: 0,
  dedupTtlMs: 0,
  dedupKey: '',
};

/** Bounds of a duplicate-detection window (see dedup-window.ts for the memory per key). */
export const DEDUP_MAX_WINDOW = 50_000_000;
export const DEDUP_MAX_TTL_MS = 7 * 24 * 3_600_000;

export const defaultExchangeSettings: ExchangeSettings = {
  durable: false,
  alternateExchange: '',
  replicate: undefined,
};

// Accepted spellings of each queue argument -> canonical field.
const queueKeys: Record<string, keyof QueueSettings> = {
  durable: 'durable',
  'auto-delete': 'autoDelete',
  auto_delete: 'autoDelete',
  'auto-delete-delay': 'autoDeleteDelayMs',
  'qpid.auto_delete_timeout': 'autoDeleteDelayMs',
  exclusive: 'exclusive',
  'max-count': 'maxCount',
  'qpid.max_count': 'maxCount',
  'max-size': 'maxSize',
  'qpid.max_size': 'maxSize',
  policy: 'limitPolicy',
  'limit-policy': 'limitPolicy',
  'qpid.policy_type': 'limitPolicy',
  'default-ttl': 'defaultTtlMs',
  'qpid.default_ttl': 'defaultTtlMs',
  'alternate-exchange': 'alternateExchange',
  'alternate_exchange': 'alternateExchange',
  priorities: 'priorities',
  'qpid.priorities': 'priorities',
  replicate: 'replicate',
  'qpid.replicate': 'replicate',
  'dedup-window': 'dedupWindow',
  'qpid.dedup-window': 'dedupWindow',
  'dedup-ttl': 'dedupTtlMs',
  'qpid.dedup-ttl': 'dedupTtlMs',
  'dedup-key': 'dedupKey',
  'qpid.dedup-key': 'dedupKey',
  'message-groups': 'messageGroups',
  'qpid.message-groups': 'messageGroups',
};

export function parseBoolean(key: string, value: unknown): boolean {
  if (typeof value === 'boolean') return value;
  if (value === 'true' || value === 'yes' || value === '1' || value === 1) return true;
  if (value === 'false' || value === 'no' || value === '0' || value === 0) return false;
  throw invalidArgument(`${key} must be true or false, not ${shownValue(value)}`);
}

/**
 * A number a user typed is digits only: Number() also reads '0x10' as 16, '1e3' as 1000,
 * ' 5' as 5 and '' as 0, none of which a user means as a count.
 */
const DIGITS = /^\d+$/;

/** The number a user typed as digits only; NaN for anything else (see DIGITS). */
export function wholeNumber(text: string): number {
  return DIGITS.test(text) ? Number(text) : Number.NaN;
}

/** Counts are exact integers: a larger one (1e20) is no count the journal can hold. */
export function parseCount(key: string, value: unknown): number {
  const n = typeof value === 'string' ? wholeNumber(value) : typeof value === 'bigint' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
    throw invalidArgument(`${key} must be a whole number from 0 to ${Number.MAX_SAFE_INTEGER} (digits only), not ${shownValue(value)}`);
  }
  // A double -0 from a client is the count 0.
  return n + 0;
}

/**
 * A size a user typed: digits, and a binary unit if any (64KiB, 16M, 1g: powers of
 * 1024; the B and i optional), as tandemd.conf takes sizes; NaN for anything else.
 */
export function byteSize(value: string): number {
  const m = /^(\d+)(?:\s*([kKmMgG]i?[bB]?))?$/.exec(value);
  if (!m) return Number.NaN;
  const unit = m[2]?.[0]?.toLowerCase();
  return Number(m[1]) * (unit === 'k' ? 1024 : unit === 'm' ? 1024 ** 2 : unit === 'g' ? 1024 ** 3 : 1);
}

/** A queue's size argument: a count of bytes (parseCount), or a string with a unit (byteSize). */
export function parseSize(key: string, value: unknown): number {
  if (typeof value !== 'string' || DIGITS.test(value)) return parseCount(key, value);
  const n = byteSize(value);
  if (Number.isSafeInteger(n)) return n;
  throw invalidArgument(`${key} must be a size from 0 to ${Number.MAX_SAFE_INTEGER} bytes (digits, or with a unit: 64KiB, 16MiB, 1GiB), not ${shownValue(value)}`);
}

/**
 * The longest duration any setting takes: a ttl is added to the clock, and the
 * sum must stay an exact integer in a record; no expiry or delay needs more.
 */
export const MAX_DURATION_MS = 100 * 365 * 24 * 3_600_000;

/** Durations: "500ms", "2s", "1m", or a bare number of `bareUnitMs`, in ms, unbounded; NaN for anything else. */
export function durationMs(value: unknown, bareUnitMs: number): number {
  if (typeof value === 'number' || typeof value === 'bigint') {
    const n = Number(value);
    // + 0: a double -0 is 0 ms.
    return n >= 0 ? Math.round(n * bareUnitMs) + 0 : Number.NaN;
  }
  if (typeof value === 'string') {
    // Digits (a decimal point allowed) and a unit; not ' 5', '0x10' or '1e3' (see DIGITS).
    const m = /^(\d+(?:\.\d+)?)(?:\s*(ms|s|m|h))?$/.exec(value);
    if (m) {
      const unit = m[2] === 'ms' ? 1 : m[2] === 's' ? 1000 : m[2] === 'm' ? 60_000 : m[2] === 'h' ? 3_600_000 : bareUnitMs;
      return Math.round(Number(m[1]) * unit);
    }
  }
  return Number.NaN;
}

/** A queue's duration argument (durationMs), at most MAX_DURATION_MS. */
export function parseDuration(key: string, value: unknown, bareUnitMs: number): number {
  const ms = durationMs(value, bareUnitMs);
  if (ms >= 0 && ms <= MAX_DURATION_MS) return ms;
  const why = ms > MAX_DURATION_MS && Number.isFinite(ms) ? 'at most 100 years' : 'a duration such as 500ms, 2s or 1m';
  throw invalidArgument(`${key} must be ${why}, not ${shownValue(value)}`);
}

/** The setting a queue argument names (its own keys only: 'constructor' or '__proto__' name none). */
function queueField(key: string): keyof QueueSettings | undefined {
  return Object.hasOwn(queueKeys, key) ? queueKeys[key] : undefined;
}

/**
 * `defaults`: the broker's (tandemd.conf dedup-window, dedup-ttl, dedup-key), for
 * a queue whose arguments set none of the dedup ones.
 */
export function parseQueueSettings(args: Record<string, unknown>, defaults: QueueSettings = defaultQueueSettings): QueueSettings {
  const out: QueueSettings = { ...defaultQueueSettings };
  if (!Object.entries(args).some(([k, v]) => v !== undefined && v !== null && queueField(k)?.startsWith('dedup'))) {
    out.dedupWindow = defaults.dedupWindow;
    out.dedupTtlMs = defaults.dedupTtlMs;
    out.dedupKey = defaults.dedupKey;
  }
  for (const [key, value] of Object.entries(args)) {
    if (value === undefined || value === null) continue;
    const field = queueField(key);
    if (!field) {
      throw invalidArgument(`unknown queue argument '${key}'; known: ${Object.keys(queueKeys).join(', ')}`);
    }
    switch (field) {
      case 'durable':
      case 'autoDelete':
      case 'exclusive':
        out[field] = parseBoolean(key, value);
        break;
      case 'maxCount':
        out.maxCount = parseCount(key, value);
        break;
      case 'maxSize':
        out.maxSize = parseSize(key, value);
        break;
      case 'priorities': {
        const n = parseCount(key, value);
        if (n < 1 || n > 10) throw invalidArgument(`${key} must be between 1 and 10, not ${n}`);
        out.priorities = n;
        break;
      }
      case 'autoDeleteDelayMs':
        // qpidd's auto_delete_timeout is in seconds.
        out.autoDeleteDelayMs = parseDuration(key, value, 1000);
        break;
      case 'defaultTtlMs':
        out.defaultTtlMs = parseDuration(key, value, key === 'default-ttl' ? 1 : 1000);
        break;
      case 'limitPolicy':
        if (value !== 'reject' && value !== 'ring') {
          throw invalidArgument(`${key} must be 'reject' or 'ring', not ${shownValue(value)}`);
        }
        out.limitPolicy = value;
        break;
      case 'alternateExchange':
        out.alternateExchange = String(value);
        break;
      case 'replicate':
        if (!isReplicationLevel(value)) {
          throw invalidArgument(`${key} must be none, configuration or all, not ${shownValue(value)}`);
        }
        out.replicate = value;
        break;
      case 'dedupWindow': {
        const n = parseCount(key, value);
        if (n > DEDUP_MAX_WINDOW) throw invalidArgument(`${key} must be between 0 (off) and ${DEDUP_MAX_WINDOW} keys, not ${n}`);
        out.dedupWindow = n;
        break;
      }
      case 'dedupTtlMs': {
        // Bare numbers are seconds, as for qpid's other durations.
        const ms = parseDuration(key, value, 1000);
        if (ms > DEDUP_MAX_TTL_MS) throw invalidArgument(`${key} must be at most 7 days (0: no age limit), not ${shownValue(value)}`);
        out.dedupTtlMs = ms;
        break;
      }
      case 'dedupKey':
        out.dedupKey = parseDedupKey(key, value);
        break;
      case 'messageGroups':
        // Absent when off: a queue without groups is declared (and journaled) as before them.
        if (parseBoolean(key, value)) out.messageGroups = true;
        else delete out.messageGroups;
        break;
    }
  }
  checkDedup(out);
  return out;
}

/** An application property name a window may key on ('' for the message-id): what parseDedupKey takes. */
export function isDedupKey(value: unknown): value is string {
  return typeof value === 'string' && value.length <= 255 && !/[\u0000-\u001f]/.test(value);
}

function parseDedupKey(key: string, value: unknown): string {
  if (!isDedupKey(value)) {
    throw invalidArgument(`${key} must be an application property name of 1 to 255 characters (or '' for the message-id), not ${shownValue(value)}`);
  }
  return value === 'message-id' ? '' : value;
}

/** A ttl or key without a window would silently do nothing: refuse it. */
function checkDedup(s: QueueSettings): void {
  if (s.dedupWindow === 0 && (s.dedupTtlMs > 0 || s.dedupKey !== '')) {
    throw invalidArgument('dedup-ttl and dedup-key need a dedup-window (the number of keys kept, e.g. --dedup-window 1000000)');
  }
}

/** The dedup settings of tandemd.conf, checked as a queue's are. */
export function parseDedupDefaults(window: unknown, ttl: unknown, key: unknown): Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'> {
  const s = parseQueueSettings({ 'dedup-window': window, 'dedup-ttl': ttl, 'dedup-key': key });
  return { dedupWindow: s.dedupWindow, dedupTtlMs: s.dedupTtlMs, dedupKey: s.dedupKey };
}

export function parseExchangeType(value: unknown): ExchangeType {
  if (value === 'direct' || value === 'topic' || value === 'fanout') return value;
  throw invalidArgument(`exchange type must be direct, topic or fanout, not ${shownValue(value)}`);
}

export function parseExchangeSettings(args: Record<string, unknown>): ExchangeSettings {
  const out: ExchangeSettings = { ...defaultExchangeSettings };
  for (const [key, value] of Object.entries(args)) {
    if (value === undefined || value === null) continue;
    if (key === 'durable') out.durable = parseBoolean(key, value);
    else if (key === 'alternate-exchange' || key === 'alternate_exchange') out.alternateExchange = String(value);
    else if (key === 'replicate' || key === 'qpid.replicate') {
      if (!isReplicationLevel(value)) {
        throw invalidArgument(`${key} must be none, configuration or all, not ${shownValue(value)}`);
      }
      out.replicate = value;
    } else throw invalidArgument(`unknown exchange argument '${key}'; known: durable, alternate-exchange, replicate`);
  }
  return out;
}

/**
 * A replicated queue or exchange (level configuration or all) may not name an
 * alternate exchange of level none: a failover loses that exchange, and the new
 * primary then drops the dead letters, or the messages nothing else routes. The
 * built-in amq.* exchanges are on every broker.
 */
export function refuseUnreplicatedAlternate(
  what: 'queue' | 'exchange',
  name: string,
  level: ReplicationLevel,
  alternate: { name: string; level: ReplicationLevel; builtIn: boolean },
): void {
  if (level === 'none' || alternate.level !== 'none' || alternate.builtIn) return;
  const lost = what === 'queue' ? 'its dead letters (rejected, expired, or left at its delete)' : 'the messages it cannot route';
  throw invalidArgument(
    `${what} '${name}' is replicated (replicate ${level}) but its alternate exchange '${alternate.name}' is not (replicate none): ` +
      `a failover would lose '${alternate.name}' and drop ${lost}; declare '${alternate.name}' with replicate configuration or all, or '${name}' with replicate none`,
  );
}
