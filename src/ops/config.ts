// tandemd's settings, declared once: each key is an INI key of tandemd.conf and a
// --key option, the command line winning. Unknown keys and bad values stop the
// start with the file, the key and what is accepted.
import { isIP } from 'node:net';
import { resolve } from 'node:path';
import ini from 'ini';
import type { QueueSettings } from '../broker/changes.js';
import { byteSize, DEDUP_MAX_TTL_MS, DEDUP_MAX_WINDOW, durationMs, parseDedupDefaults, wholeNumber } from '../broker/settings.js';
import { isLogLevel, type LogLevel } from './log.js';
import { parseDrLine, type DrQueueSpec } from '../dr/config.js';
import { availableMemory, DEFAULT_MEMORY_SHARE } from './system-memory.js';
// brokers-url imports ConfigError from here: a cycle, harmless as both only call each other at run time.
import { MAX_ENDPOINTS, parseBrokersUrl } from '../ha/brokers-url.js';
import { MAJORITY, minReadyBackupsRefusal, type MinReadyBackups } from '../ha/settle-quorum.js';
import { registerSecret } from './secrets.js';
import { readSecretFile, secretFileProblems } from './secret-files.js';
import { readBoundedText } from './bounded-read.js';
import { hostPort } from '../util/host-port.js';
import { readTlsFile } from './tls-file-read.js';
import { readLinkTls, type LinkTlsFiles } from '../admin/link-tls.js';
import { crlWarnings, readCrlFile } from '../admin/crl.js';
import { EXTERNAL_USER_MAPPINGS, type ExternalUserMapping } from '../amqp/sasl-external.js';
import { DEFAULT_HANDSHAKES_PER_ADDRESS, FEWEST_HANDSHAKES_PER_ADDRESS, defaultHandshakesPerAddress } from '../amqp/handshake-gate.js';
import { CONNECTION_TRANSACTION_SHARE, DEFAULT_TRANSACTION_LIMITS, type TransactionLimits } from '../amqp/coordinator.js';

/** Where readConfigFile puts the [dr] section (no INI key can be spelled so). */
const DR_SECTION = '[dr]';

export class ConfigError extends Error {
  readonly code = 'TANDEM_ERR_CONFIG';
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

type Kind = 'string' | 'host' | 'path' | 'port' | 'bool' | 'duration' | 'size' | 'count' | 'level' | 'replicate' | 'min-backups';

interface OptionSpec {
  key: string;
  kind: Kind;
  description: string;
  /** Bounds of a number-valued key (after units), with why, for the refusal. */
  min?: number;
  max?: number;
  why?: string;
}

/** Timers in Node take at most 2^31-1 ms; a longer duration would fire at once. */
const TIMER_MAX_MS = 2 ** 31 - 1;

/** Every setting; `defaults` below holds the values of the embedded default. */
export const optionSpecs: OptionSpec[] = [
  { key: 'host', kind: 'host', description: 'address to listen on (0.0.0.0 for all)' },
  { key: 'port', kind: 'port', description: 'AMQP port; 0 picks a free one' },
  { key: 'data-dir', kind: 'path', description: 'directory for the journal and state' },
  { key: 'auth', kind: 'bool', description: 'require SASL PLAIN authentication (yes/no)' },
  { key: 'users-file', kind: 'path', description: 'users and salted scrypt password hashes (tandem user add)' },
  { key: 'listen-plain', kind: 'bool', description: 'serve plaintext AMQP on port (yes/no); no: TLS only, needs tls-cert and tls-key' },
  { key: 'tls-port', kind: 'port', description: 'AMQPS port (needs tls-cert and tls-key); 0 picks a free one' },
  { key: 'tls-cert', kind: 'path', description: 'PEM certificate chain for TLS' },
  { key: 'tls-key', kind: 'path', description: 'PEM private key for TLS' },
  { key: 'tls-ca', kind: 'path', description: 'PEM CA bundle to verify client certificates' },
  { key: 'tls-crl', kind: 'path', description: 'PEM file of CRLs (one per CA of the chain, root included; or one DER CRL): client certificates they revoke are refused; re-read on SIGHUP' },
  { key: 'tls-require-client-cert', kind: 'bool', description: 'refuse TLS clients without a certificate signed by tls-ca' },
  { key: 'tls-external-user', kind: 'string', description: 'SASL EXTERNAL: a client certificate verified against tls-ca logs in as the user its cn or san-email names (no: off)' },
  { key: 'auto-create', kind: 'bool', description: 'create a queue when a link attaches to an unknown address' },
  { key: 'acl-file', kind: 'path', description: 'permissions (configure, write, read on name patterns) per user or group; unset: every user may use every name that is not reserved' },
  { key: 'max-frame-size', kind: 'size', description: 'largest AMQP frame accepted, bytes', min: 512, max: 16 * 1024 * 1024, why: 'AMQP allows no less; a larger frame only costs memory per connection, as bigger messages span frames' },
  { key: 'max-message-size', kind: 'size', description: 'largest message accepted, bytes', min: 1024, max: 1024 ** 3, why: 'a message is held whole in memory while it arrives' },
  { key: 'max-transaction-size', kind: 'size', description: `bytes of messages one transaction may hold until it is committed (a connection's open transactions together: ${CONNECTION_TRANSACTION_SHARE} times as much)`, min: 1024, max: 1024 ** 3, why: 'its messages wait in memory until it commits, then go to the journal as one record' },
  { key: 'max-transaction-messages', kind: 'count', description: `messages one transaction may hold until it is committed (a connection's open transactions together: ${CONNECTION_TRANSACTION_SHARE} times as many)`, min: 1, max: 10_000_000, why: '0 would refuse every transactional send; each message held costs heap besides its bytes' },
  { key: 'max-memory', kind: 'size', description: 'message bodies kept in memory; durable ones beyond it wait in the journal', min: 1024 * 1024, why: 'message bodies kept in memory' },
  { key: 'memory-limit', kind: 'size', description: "live memory (heap, buffers, queue index) past which new messages are refused; default 40% of the machine's or cgroup's memory", min: 64 * 1024 * 1024, why: 'the broker itself needs tens of MiB' },
  { key: 'checkpoint-bytes', kind: 'size', description: 'write a journal checkpoint after this much journal data (restarts replay only what follows it); 0 = never' },
  { key: 'idle-timeout', kind: 'duration', description: 'close connections silent for this long (0 = never)', max: TIMER_MAX_MS, why: 'the longest timer Node keeps' },
  { key: 'handshake-timeout', kind: 'duration', description: "close a connection whose client has not sent its open this long after connecting (0 = never)", max: TIMER_MAX_MS, why: 'the longest timer Node keeps' },
  { key: 'max-connections', kind: 'count', description: 'connections accepted at once', min: 1, max: 1_000_000, why: '0 would refuse every client' },
  { key: 'max-handshakes-per-address', kind: 'count', description: `connections one client address (an IPv6 one by its /64) may hold before their AMQP open; more are closed at accept (0 = no cap; default a quarter of max-connections, at least ${FEWEST_HANDSHAKES_PER_ADDRESS} and at most ${DEFAULT_HANDSHAKES_PER_ADDRESS})`, max: 1_000_000, why: 'max-connections is at most that' },
  { key: 'max-links-per-connection', kind: 'count', description: 'links one connection may hold at once; an attach past it is refused with amqp:resource-limit-exceeded', min: 1, max: 1_000_000, why: '0 would refuse every link; each link costs a few KiB (a temporary queue more)' },
  { key: 'log-level', kind: 'level', description: 'fatal, error, warn, info, debug or trace' },
  { key: 'metrics-port', kind: 'port', description: 'Prometheus metrics HTTP port (unset = off; 0 picks one)' },
  { key: 'metrics-host', kind: 'host', description: 'address of the metrics listener' },
  { key: 'console-port', kind: 'port', description: 'web console HTTP port (HTTPS with tls-cert/tls-key; unset = off; 0 picks one)' },
  { key: 'console-host', kind: 'host', description: 'address of the web console listener' },
  { key: 'shutdown-timeout', kind: 'duration', description: 'how long SIGTERM waits for in-flight work', max: TIMER_MAX_MS, why: 'the longest timer Node keeps' },
  { key: 'ha-replicate', kind: 'replicate', description: 'replication level for queues that set none' },
  { key: 'ha-cluster', kind: 'bool', description: 'join an HA cluster (starts as a backup)' },
  { key: 'ha-brokers-url', kind: 'string', description: 'every broker of the cluster: [amqp:][user[/password]@]host[:port](,host[:port])*' },
  { key: 'ha-public-url', kind: 'string', description: 'address clients are told to use (e.g. the VIP)' },
  { key: 'ha-username', kind: 'string', description: 'identity brokers use with each other (an admin user)' },
  { key: 'ha-password', kind: 'string', description: 'password of ha-username (never logged; visible in ps on the command line: prefer ha-password-file or TANDEM_HA_PASSWORD)' },
  { key: 'ha-password-file', kind: 'path', description: 'file holding the password of ha-username (its first line, nothing after it; mode 0600 or 0640)' },
  { key: 'ha-mechanism', kind: 'string', description: 'SASL mechanism between brokers: PLAIN, ANONYMOUS, or EXTERNAL (ha-tls-cert names the user; amqps: ha-brokers-url)' },
  { key: 'ha-tls-ca', kind: 'path', description: 'PEM CA bundle the other brokers\' certificates must chain to (amqps: ha-brokers-url; default: tls-ca, else the system CAs)' },
  { key: 'ha-tls-cert', kind: 'path', description: 'PEM client certificate this broker shows on HA links (brokers with tls-require-client-cert ask for one)' },
  { key: 'ha-tls-key', kind: 'path', description: 'PEM private key of ha-tls-cert' },
  { key: 'ha-tls-crl', kind: 'path', description: "CRLs the other brokers' certificate chains are checked against (default: tls-crl when ha-tls-ca is tls-ca); re-read on SIGHUP" },
  { key: 'ha-backup-timeout', kind: 'duration', description: 'how long a new primary waits for the backups that were ready', max: TIMER_MAX_MS, why: 'the longest timer Node keeps' },
  { key: 'ha-heartbeat-interval', kind: 'duration', description: 'replication heartbeat; a backup silent for 2 intervals is dropped', min: 100, max: 3_600_000, why: 'shorter drops backups under ordinary load; longer holds publishers for hours behind a stalled backup' },
  { key: 'ha-min-ready-backups', kind: 'min-backups', description: 'ready backups that must hold a message before the primary settles it: majority (of ha-brokers-url, the default) or a count; 0 = settle alone' },
  { key: 'ha-retain-changes', kind: 'count', description: 'HA: recent changes kept so a returning backup gets only what it lacks (older positions get a snapshot)', min: 10_000, why: 'smaller windows drop changes before backups are sent them' },
  { key: 'ha-retain-size', kind: 'size', description: 'HA: most bytes those changes may hold', min: 16 * 1024 * 1024, why: 'smaller windows drop changes before backups are sent them' },
  { key: 'dr-retain-changes', kind: 'count', description: 'DR source: recent queue changes kept for bridges to resume from (0 = not a DR source)' },
  { key: 'dr-retain-size', kind: 'size', description: 'DR source: most bytes of message data those changes may hold' },
  { key: 'dr-tls-ca', kind: 'path', description: 'PEM CA bundle the DR source brokers\' certificates must chain to (amqps: sources; default: tls-ca, else the system CAs)' },
  { key: 'dr-tls-cert', kind: 'path', description: 'PEM client certificate this broker shows to amqps: DR sources' },
  { key: 'dr-tls-key', kind: 'path', description: 'PEM private key of dr-tls-cert' },
  { key: 'dr-tls-crl', kind: 'path', description: "CRLs the DR source brokers' certificate chains are checked against (default: tls-crl when dr-tls-ca is tls-ca); re-read on SIGHUP" },
  { key: 'dedup-window', kind: 'count', description: 'default duplicate-detection window of new queues: keys of the last N messages (0 = off)', max: DEDUP_MAX_WINDOW, why: 'about 53-69 bytes of memory per key, off the V8 heap' },
  { key: 'dedup-ttl', kind: 'duration', description: 'default age limit of those keys (0 = none)', max: DEDUP_MAX_TTL_MS, why: 'a week; the window\'s count bounds its memory anyway' },
  { key: 'dedup-key', kind: 'string', description: "default key: an application property name (unset = the AMQP message-id)" },
];

export interface Settings {
  host: string;
  port: number;
  dataDir: string;
  auth: boolean;
  usersFile: string;
  /** false: no plaintext listener (TLS only). */
  listenPlain: boolean;
  tlsPort: number | undefined;
  tlsCert: string | undefined;
  tlsKey: string | undefined;
  tlsCa: string | undefined;
  /** CRLs client certificates are checked against (src/admin/crl.ts). */
  tlsCrl: string | undefined;
  tlsRequireClientCert: boolean;
  /** SASL EXTERNAL on the TLS port, and how a certificate names its user (undefined: off). */
  tlsExternalUser: ExternalUserMapping | undefined;
  autoCreate: boolean;
  aclFile: string | undefined;
  maxFrameSize: number;
  maxMessageSize: number;
  /** What one transaction may hold until it is committed (see src/amqp/coordinator.ts). */
  transactionLimits: TransactionLimits;
  idleTimeoutMs: number;
  /** A socket whose client has not sent open this long after it connected is closed (0: never). */
  handshakeTimeoutMs: number;
  maxConnections: number;
  /** Connections one client address may hold before their open (0: no cap); see src/amqp/handshake-gate.ts. */
  maxHandshakesPerAddress: number;
  /** Links one connection may hold at once (attaches past it are refused, the connection stays). */
  maxLinksPerConnection: number;
  logLevel: LogLevel;
  metricsPort: number | undefined;
  metricsHost: string;
  /** Web console (src/console): off unless set. */
  consolePort: number | undefined;
  consoleHost: string;
  shutdownTimeoutMs: number;
  haReplicate: 'none' | 'configuration' | 'all';
  haCluster: boolean;
  haBrokersUrl: string | undefined;
  haPublicUrl: string | undefined;
  haUsername: string | undefined;
  haPassword: string | undefined;
  haMechanism: 'PLAIN' | 'ANONYMOUS' | 'EXTERNAL';
  /** Files for TLS on links to the other brokers (an amqps: ha-brokers-url); see src/admin/peer-addresses.ts. */
  haTls: LinkTlsFiles;
  /** Files for TLS on links to amqps: DR sources. */
  drTls: LinkTlsFiles;
  haBackupTimeoutMs: number;
  haHeartbeatIntervalMs: number;
  /** ha-min-ready-backups: see src/ha/settle-quorum.ts. */
  haMinReadyBackups: MinReadyBackups;
  haRetainChanges: number;
  haRetainBytes: number;
  drRetainChanges: number;
  drRetainBytes: number;
  /** Body bytes of queued messages kept in memory (the rest are paged to the journal). */
  maxMemory: number;
  /** Live memory at which the memory alarm refuses new messages. */
  memoryLimit: number;
  /** Journal bytes between checkpoints; 0: no checkpoints. */
  checkpointBytes: number;
  /** dedup-window, dedup-ttl, dedup-key: what a new queue that sets none gets. */
  dedupDefaults: Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>;
  /** DR queues of the [dr] section (this broker as a secondary). */
  drQueues: DrQueueSpec[];
  /** Where the settings came from, for messages. */
  configFile: string | undefined;
  /** Started from a config file (a service, not a developer's `tandemd`): see docs/security.md. */
  production: boolean;
  /** What the broker should warn about at start (the checks above refuse only what cannot work). */
  warnings: string[];
}

function dedupDefaults(values: Record<string, unknown>): Settings['dedupDefaults'] {
  try {
    const ttlMs = values['dedup-ttl'] as number | undefined;
    return parseDedupDefaults(values['dedup-window'], ttlMs === undefined ? undefined : `${ttlMs}ms`, values['dedup-key']);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

const camel = (key: string): string => key.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

function convert(spec: OptionSpec, raw: unknown, where: string): unknown {
  const value = typeof raw === 'string' ? raw.trim() : raw;
  const bad = (accepts: string): never => {
    throw new ConfigError(`${where}: ${spec.key} = ${JSON.stringify(raw)} is invalid; expected ${accepts}`);
  };
  switch (spec.kind) {
    case 'string':
    case 'path':
      if (typeof value !== 'string' || value === '') bad('a non-empty value');
      return spec.kind === 'path' ? resolve(value as string) : value;
    case 'host':
      // Checked here so a typo is refused naming the key, not met at listen() as a bare getaddrinfo ENOTFOUND.
      if (typeof value !== 'string' || !isListenHost(value)) bad('an IP address or a host name (letters, digits, - and .)');
      return value;
    case 'port': {
      // Digits only: Number() took '' (port= left empty) and '-0' as 0, a random port, and '0x10' or '1e3' as others.
      const n = typeof value === 'number' ? value : /^\d{1,5}$/.test(String(value)) ? Number(value) : NaN;
      if (!Number.isInteger(n) || n < 0 || n > 65535 || Object.is(n, -0)) bad('a port number 0-65535');
      return n;
    }
    case 'count':
    case 'size': {
      const text = String(value);
      const n = spec.kind === 'size' ? byteSize(text) : wholeNumber(text);
      if (Number.isNaN(n)) bad(spec.kind === 'size' ? 'a size such as 1048576, 64KiB or 16MiB' : 'a whole number');
      return bounded(spec, n, where);
    }
    case 'bool':
      if (value === true || value === 'yes' || value === 'true' || value === 'on' || value === '1') return true;
      if (value === false || value === 'no' || value === 'false' || value === 'off' || value === '0') return false;
      return bad('yes or no');
    case 'duration': {
      // Read unbounded: the key's own bounds (bounded) say what it accepts, and why.
      const ms = durationMs(value, 1000);
      if (!Number.isFinite(ms)) return bad('a duration such as 500ms, 2s or 1m (a bare number is seconds)');
      return bounded(spec, ms, where);
    }
    case 'level':
      if (typeof value !== 'string' || !isLogLevel(value)) bad('fatal, error, warn, info, debug or trace');
      return value;
    case 'replicate':
      if (value !== 'none' && value !== 'configuration' && value !== 'all') bad('none, configuration or all');
      return value;
    case 'min-backups': {
      if (value === MAJORITY) return value;
      const n = typeof value === 'number' ? value : /^\d{1,10}$/.test(String(value)) ? Number(value) : NaN;
      // ha-brokers-url lists at most MAX_ENDPOINTS brokers: the others are at most one fewer backups.
      if (!Number.isInteger(n) || n < 0 || n > MAX_ENDPOINTS - 1) bad(`${MAJORITY} or a whole number of backups from 0 (settle alone) to ${MAX_ENDPOINTS - 1}`);
      return n;
    }
  }
}

/**
 * The warning a broker gives at start when SASL PLAIN passwords would cross the network in
 * clear: auth on, a plaintext listener, a host other than loopback. `port` is the port it
 * listens on: with port=0 the one picked at listen, not the 0 of the settings.
 */
export function plainPasswordWarning(settings: Pick<Settings, 'auth' | 'listenPlain' | 'host'>, port: number): string | undefined {
  if (!settings.auth || !settings.listenPlain || isLoopback(settings.host)) return undefined;
  return `SASL PLAIN is offered on the plaintext port ${hostPort(settings.host, port)}: passwords travel in clear to anyone on the network; configure TLS (tls-cert, tls-key, tls-port) and set listen-plain=no`;
}

/** A number within the spec's bounds (and exact: no size past 2^53), or a refusal saying why. */
function bounded(spec: OptionSpec, n: number, where: string): number {
  const show = (v: number) => (spec.kind === 'duration' ? `${v}ms` : String(v));
  const because = spec.why ? ` (${spec.why})` : '';
  if (!Number.isSafeInteger(n)) throw new ConfigError(`${where}: ${spec.key} is too large`);
  if (spec.min !== undefined && n < spec.min) throw new ConfigError(`${where}: ${spec.key} must be at least ${show(spec.min)}${because}`);
  if (spec.max !== undefined && n > spec.max) throw new ConfigError(`${where}: ${spec.key} must be at most ${show(spec.max)}${because}`);
  return n;
}

/** An IPv4 or IPv6 address, or a DNS name: labels of letters, digits and '-', at most 253 characters. */
function isListenHost(host: string): boolean {
  if (isIP(host) !== 0) return true;
  return host.length <= 253 && /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$/.test(host) && !/^[\d.]+$/.test(host);
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

/** tls-external-user: no (the default) or how a certificate names its user. */
function externalUserOf(value: unknown): ExternalUserMapping | undefined {
  if (value === undefined || value === 'no' || value === false) return undefined;
  if ((EXTERNAL_USER_MAPPINGS as readonly unknown[]).includes(value)) return value as ExternalUserMapping;
  throw new ConfigError(`tls-external-user must be no, ${EXTERNAL_USER_MAPPINGS.join(' or ')}, not '${String(value)}'`);
}

/**
 * ha-tls-* or dr-tls-* as given; the CA defaults to tls-ca (the CA this broker trusts),
 * and the CRLs to tls-crl only while the CA is tls-ca's: tls-crl holds the lists of
 * tls-ca's CAs, and OpenSSL refuses every peer whose CAs have no list (crl.ts).
 */
function linkTlsFiles(values: Record<string, unknown>, prefix: 'ha' | 'dr'): LinkTlsFiles {
  const ca = (values[`${prefix}-tls-ca`] as string | undefined) ?? (values['tls-ca'] as string | undefined);
  const sameCa = ca !== undefined && ca === values['tls-ca'];
  return {
    ca,
    cert: values[`${prefix}-tls-cert`] as string | undefined,
    key: values[`${prefix}-tls-key`] as string | undefined,
    crl: (values[`${prefix}-tls-crl`] as string | undefined) ?? (sameCa ? (values['tls-crl'] as string | undefined) : undefined),
  };
}

/**
 * The CRL files must read and parse now (a bad one is a refusal naming the key, not a
 * listener that fails at the first client); what would refuse every certificate of a
 * CA (an expired list, a CA without one) is warned about.
 */
function checkCrls(settings: Settings): void {
  const fail = (m: string) => new ConfigError(m);
  const caOf = (path: string | undefined, key: string) => {
    if (path === undefined) return undefined;
    try {
      return { key, pem: readTlsFile(path, key).toString('utf8') };
    } catch {
      return undefined; // unreadable: refused by the CA's own check
    }
  };
  if (settings.tlsCrl !== undefined) {
    if (!settings.tlsCa) throw new ConfigError('tls-crl needs tls-ca (the CAs whose certificates it revokes)');
    const bundle = readCrlFile(settings.tlsCrl, 'tls-crl', fail);
    settings.warnings.push(...crlWarnings('tls-crl', settings.tlsCrl, bundle, caOf(settings.tlsCa, 'tls-ca')));
    if (!settings.tlsRequireClientCert && !settings.tlsExternalUser && settings.tlsCert) {
      settings.warnings.push('tls-crl: the TLS listener asks for no client certificate (neither tls-require-client-cert nor tls-external-user), so the lists are used only on links to other brokers');
    }
  }
  for (const [prefix, files] of [['ha', settings.haTls], ['dr', settings.drTls]] as const) {
    if (files.crl === undefined || files.crl === settings.tlsCrl) continue;
    const bundle = readCrlFile(files.crl, `${prefix}-tls-crl`, fail);
    settings.warnings.push(...crlWarnings(`${prefix}-tls-crl`, files.crl, bundle, caOf(files.ca, `${prefix}-tls-ca`)));
  }
}

/**
 * Links to other brokers: an amqps: ha-brokers-url needs this broker's own TLS listener
 * (the others reach it there), and a TLS-only broker needs an amqps: one (the others
 * could not reach it at all). The link files must be readable now, not at the first
 * connection, when the only sign would be a backup that never joins.
 */
function checkLinkTls(settings: Settings): void {
  const url = settings.haBrokersUrl ? parseBrokersUrl(settings.haBrokersUrl) : undefined;
  if (settings.haCluster && url?.tls && !settings.tlsCert) {
    throw new ConfigError('ha-brokers-url is amqps: (every broker is reached on its TLS port) but this broker has no TLS listener: set tls-cert, tls-key and tls-port');
  }
  if (settings.haCluster && !settings.listenPlain && !url?.tls) {
    throw new ConfigError(
      'listen-plain=no with ha-cluster=yes needs an amqps: ha-brokers-url listing every broker\'s TLS port (amqps:host:5671,...): with plain addresses the brokers could not reach each other',
    );
  }
  const fail = (m: string) => new ConfigError(m);
  readLinkTls(settings.haTls, { ca: 'ha-tls-ca', cert: 'ha-tls-cert', key: 'ha-tls-key', crl: 'ha-tls-crl' }, fail);
  readLinkTls(settings.drTls, { ca: 'dr-tls-ca', cert: 'dr-tls-cert', key: 'dr-tls-key', crl: 'dr-tls-crl' }, fail);
}

/**
 * Who brokers are to each other: ha-username/ha-password, else the credentials of
 * ha-brokers-url (`user/password@host,...`), which then select PLAIN. The password may
 * come from ha-password-file or TANDEM_HA_PASSWORD instead, neither of which ps shows.
 */
function applyHaCredentials(settings: Settings, values: Record<string, unknown>): void {
  const url = settings.haBrokersUrl ? parseBrokersUrl(settings.haBrokersUrl) : undefined;
  const passwordFile = values['ha-password-file'] as string | undefined;
  if (passwordFile !== undefined && settings.haPassword !== undefined) throw new ConfigError('give ha-password or ha-password-file, not both');
  const explicitMechanism = values['ha-mechanism'] as string | undefined;
  if (url?.user && settings.haUsername && url.user !== settings.haUsername) {
    throw new ConfigError(`ha-brokers-url names user '${url.user}' but ha-username is '${settings.haUsername}': give the identity once`);
  }
  if (url?.user && (explicitMechanism?.toUpperCase() === 'ANONYMOUS' || explicitMechanism?.toUpperCase() === 'EXTERNAL')) {
    throw new ConfigError(`ha-brokers-url carries credentials (user '${url.user}') but ha-mechanism is ${explicitMechanism.toUpperCase()}: remove one of them`);
  }
  settings.haUsername ??= url?.user;
  settings.haPassword ??= passwordFile !== undefined ? readSecretFile(passwordFile, 'ha-password-file') : (url?.password ?? process.env.TANDEM_HA_PASSWORD);
  if (!explicitMechanism) settings.haMechanism = settings.haUsername ? 'PLAIN' : 'ANONYMOUS';
  registerSecret(settings.haPassword);
  registerSecret(url?.password);
}

/**
 * Files holding secrets must not be readable by everyone. A production broker (started
 * from a config file) with auth on refuses to start over it; anything else is warned about.
 */
function checkSecretFiles(settings: Settings, configFile: string | undefined, values: Record<string, unknown>): void {
  const files: Array<{ path: string; what: string }> = [{ path: settings.usersFile, what: 'users-file (password hashes)' }];
  if (configFile && configHoldsSecret(configFile)) files.push({ path: configFile, what: 'the config file (it holds a password)' });
  const passwordFile = values['ha-password-file'] as string | undefined;
  if (passwordFile) files.push({ path: passwordFile, what: 'ha-password-file' });
  if (settings.tlsKey) files.push({ path: settings.tlsKey, what: 'tls-key (a private key)' });
  if (settings.haTls.key) files.push({ path: settings.haTls.key, what: 'ha-tls-key (a private key)' });
  if (settings.drTls.key) files.push({ path: settings.drTls.key, what: 'dr-tls-key (a private key)' });
  const problems = secretFileProblems(files);
  if (problems.length === 0) return;
  if (settings.production && settings.auth) {
    throw new ConfigError(`${problems.join('; ')}; a broker started from a config file with auth=yes refuses world-readable secrets`);
  }
  settings.warnings.push(...problems);
}

/**
 * A config file is a few KiB; [dr] lines for thousands of queues stay well under this.
 * Past it the path is surely wrong (/dev/zero, a log file), and reading on would fill the heap.
 */
export const MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024;

function readConfigText(path: string): string {
  try {
    return readBoundedText(path, MAX_CONFIG_FILE_BYTES, 'config file');
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

/** ha-password, or a password in a broker URL (ha-brokers-url, [dr] sources). */
function configHoldsSecret(path: string): boolean {
  const text = readConfigText(path);
  return /^\s*ha-password\s*=/m.test(text) || /[A-Za-z0-9_.@-][/:][^\s@]*@[A-Za-z0-9[]/.test(text.replace(/^\s*[#;].*$/gm, ''));
}

/** Read tandemd.conf (INI; keys at top level or under [tandemd]). */
export function readConfigFile(path: string): Record<string, unknown> {
  const text = readConfigText(path);
  refuseRepeatedKeys(path, text);
  const parsed = ini.parse(text) as Record<string, unknown>;
  const flat: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (k === 'tandemd' && typeof v === 'object' && v) Object.assign(flat, v);
    else if (k === 'dr' && typeof v === 'object' && v) flat[DR_SECTION] = v;
    else if (typeof v === 'object' && v) throw new ConfigError(`${path}: unknown section [${k}]; put keys at the top or under [tandemd] (DR queues go under [dr])`);
    else flat[k] = v;
  }
  return flat;
}

/**
 * The INI parser keeps the last of two lines with one key, so a forgotten line further
 * down would silently win; refuse it instead. Top-level keys and [tandemd] are one
 * namespace (they are merged); [dr] is another.
 */
function refuseRepeatedKeys(path: string, text: string): void {
  const seen = new Map<string, number>();
  let section = '';
  // Keys and sections as the parser reads them: it unquotes them ('"port"' is port) and
  // ends a line at a lone \r too, so either spelling slipped a second value past this.
  const lines = text.split(/\r?\n/).flatMap((raw, i) => raw.split('\r').map((part) => [part, i] as const));
  lines.forEach(([raw, i]) => {
    const line = raw.trim();
    if (line === '' || line.startsWith(';') || line.startsWith('#')) return;
    const header = /^\[(.*)\]$/.exec(line);
    if (header) {
      const name = ini.unsafe(header[1]);
      section = name === 'tandemd' ? '' : name;
      return;
    }
    const key = ini.unsafe(line.includes('=') ? line.slice(0, line.indexOf('=')) : line);
    // The INI parser drops this key (and a section so named) without a word: refuse it as the unknown key it is.
    if (key === '__proto__' || section === '__proto__') throw new ConfigError(`${path}: unknown ${key === '__proto__' ? 'key' : 'section [__proto__] of key'} '${key}' (line ${i + 1})`);
    const id = `${section}\u0000${key}`;
    const first = seen.get(id);
    if (first !== undefined) {
      const where = section ? ` in [${section}]` : '';
      throw new ConfigError(`${path}: key '${key}'${where} is set twice (lines ${first} and ${i + 1}); keep one`);
    }
    seen.set(id, i + 1);
  });
}

/**
 * Merge embedded defaults, the config file and command-line values (which win).
 * Without a config file the embedded dev default applies: loopback, a data dir
 * under the working directory, and anonymous access allowed only on loopback.
 */
export function loadSettings(cli: Record<string, unknown>, configFile?: string): Settings {
  const fromFile = configFile ? readConfigFile(configFile) : {};
  const values: Record<string, unknown> = {};
  const known = new Map(optionSpecs.map((s) => [s.key, s]));
  const drQueues: DrQueueSpec[] = [];
  for (const [queue, line] of Object.entries((fromFile[DR_SECTION] ?? {}) as Record<string, unknown>)) {
    try {
      const spec = parseDrLine(queue, line);
      registerSecret(spec.password);
      drQueues.push(spec);
    } catch (err) {
      throw new ConfigError(`${configFile}: ${(err as Error).message}`);
    }
  }
  delete fromFile[DR_SECTION];
  for (const [key, raw] of Object.entries(fromFile)) {
    const spec = known.get(key);
    if (!spec) {
      throw new ConfigError(`${configFile}: unknown key '${key}'; known keys: ${optionSpecs.map((s) => s.key).join(', ')}`);
    }
    values[key] = convert(spec, raw, configFile as string);
  }
  for (const spec of optionSpecs) {
    const raw = cli[camel(spec.key)];
    if (raw !== undefined) values[spec.key] = convert(spec, raw, 'command line');
  }
  const host = (values.host as string | undefined) ?? '127.0.0.1';
  const embedded = configFile === undefined;
  const warnings: string[] = [];
  if (cli.haPassword !== undefined) warnings.push('ha-password was given on the command line, where ps shows it to every local user: use ha-password-file or TANDEM_HA_PASSWORD');
  const auth = (values.auth as boolean | undefined) ?? !(embedded && isLoopback(host));
  if (!auth && !isLoopback(host) && embedded) {
    throw new ConfigError(`auth=no on a non-loopback host (${host}) needs an explicit config file; anonymous access is allowed by default only on loopback`);
  }
  const dataDir = (values['data-dir'] as string | undefined) ?? resolve(embedded ? 'tandem-data' : '/var/lib/tandem');
  const maxConnections = (values['max-connections'] as number | undefined) ?? 10000;
  const settings: Settings = {
    host,
    port: (values.port as number | undefined) ?? 5672,
    dataDir,
    auth,
    usersFile: (values['users-file'] as string | undefined) ?? (embedded ? resolve(dataDir, 'users') : '/etc/tandem/users'),
    listenPlain: (values['listen-plain'] as boolean | undefined) ?? true,
    tlsPort: values['tls-port'] as number | undefined,
    tlsCert: values['tls-cert'] as string | undefined,
    tlsKey: values['tls-key'] as string | undefined,
    tlsCa: values['tls-ca'] as string | undefined,
    tlsCrl: values['tls-crl'] as string | undefined,
    tlsRequireClientCert: (values['tls-require-client-cert'] as boolean | undefined) ?? false,
    tlsExternalUser: externalUserOf(values['tls-external-user']),
    autoCreate: (values['auto-create'] as boolean | undefined) ?? true,
    aclFile: values['acl-file'] as string | undefined,
    maxFrameSize: (values['max-frame-size'] as number | undefined) ?? 65536,
    maxMessageSize: (values['max-message-size'] as number | undefined) ?? 100 * 1024 * 1024,
    transactionLimits: {
      maxBytes: (values['max-transaction-size'] as number | undefined) ?? DEFAULT_TRANSACTION_LIMITS.maxBytes,
      maxMessages: (values['max-transaction-messages'] as number | undefined) ?? DEFAULT_TRANSACTION_LIMITS.maxMessages,
    },
    idleTimeoutMs: (values['idle-timeout'] as number | undefined) ?? 0,
    handshakeTimeoutMs: (values['handshake-timeout'] as number | undefined) ?? 10_000,
    maxConnections,
    maxHandshakesPerAddress: (values['max-handshakes-per-address'] as number | undefined) ?? defaultHandshakesPerAddress(maxConnections),
    maxLinksPerConnection: (values['max-links-per-connection'] as number | undefined) ?? 10000,
    logLevel: (values['log-level'] as LogLevel | undefined) ?? 'info',
    metricsPort: values['metrics-port'] as number | undefined,
    metricsHost: (values['metrics-host'] as string | undefined) ?? '127.0.0.1',
    consolePort: values['console-port'] as number | undefined,
    consoleHost: (values['console-host'] as string | undefined) ?? '127.0.0.1',
    shutdownTimeoutMs: (values['shutdown-timeout'] as number | undefined) ?? 10_000,
    haReplicate: (values['ha-replicate'] as Settings['haReplicate'] | undefined) ?? 'all',
    haCluster: (values['ha-cluster'] as boolean | undefined) ?? false,
    haBrokersUrl: values['ha-brokers-url'] as string | undefined,
    haPublicUrl: values['ha-public-url'] as string | undefined,
    haUsername: values['ha-username'] as string | undefined,
    haPassword: values['ha-password'] as string | undefined,
    haMechanism: ((values['ha-mechanism'] as string | undefined) ?? (values['ha-username'] ? 'PLAIN' : 'ANONYMOUS')).toUpperCase() as Settings['haMechanism'],
    haTls: linkTlsFiles(values, 'ha'),
    drTls: linkTlsFiles(values, 'dr'),
    haBackupTimeoutMs: (values['ha-backup-timeout'] as number | undefined) ?? 10_000,
    haHeartbeatIntervalMs: (values['ha-heartbeat-interval'] as number | undefined) ?? 2_000,
    haMinReadyBackups: (values['ha-min-ready-backups'] as MinReadyBackups | undefined) ?? MAJORITY,
    haRetainChanges: (values['ha-retain-changes'] as number | undefined) ?? 1_000_000,
    haRetainBytes: (values['ha-retain-size'] as number | undefined) ?? 512 * 1024 * 1024,
    drRetainChanges: (values['dr-retain-changes'] as number | undefined) ?? 200_000,
    drRetainBytes: (values['dr-retain-size'] as number | undefined) ?? 128 * 1024 * 1024,
    maxMemory: (values['max-memory'] as number | undefined) ?? 1024 * 1024 * 1024,
    checkpointBytes: (values['checkpoint-bytes'] as number | undefined) ?? 256 * 1024 * 1024,
    memoryLimit: (values['memory-limit'] as number | undefined) ?? Math.floor(DEFAULT_MEMORY_SHARE * availableMemory()),
    dedupDefaults: dedupDefaults(values),
    drQueues,
    configFile,
    production: !embedded,
    warnings,
  };
  applyHaCredentials(settings, values);
  if (settings.haMechanism !== 'PLAIN' && settings.haMechanism !== 'ANONYMOUS' && settings.haMechanism !== 'EXTERNAL') {
    throw new ConfigError(`ha-mechanism must be PLAIN, ANONYMOUS or EXTERNAL, not ${settings.haMechanism}`);
  }
  if (settings.haCluster && settings.haMechanism === 'EXTERNAL' && (!settings.haTls.cert || !parseBrokersUrl(settings.haBrokersUrl ?? '').tls)) {
    throw new ConfigError('ha-mechanism EXTERNAL proves the brokers\' identity by a client certificate: it needs an amqps: ha-brokers-url and ha-tls-cert/ha-tls-key (the certificate naming the HA admin user)');
  }
  if (settings.haCluster && settings.haMechanism === 'EXTERNAL' && !settings.tlsExternalUser) {
    // The other brokers log in to this one the same way: it must take certificates as identities.
    throw new ConfigError('ha-mechanism EXTERNAL needs tls-external-user (cn or san-email) on every broker: the others log in to this one by certificate too');
  }
  if (settings.haCluster && !settings.haBrokersUrl) {
    throw new ConfigError('ha-cluster=yes needs ha-brokers-url listing every broker of the cluster');
  }
  if (settings.haCluster) {
    const refusal = minReadyBackupsRefusal(settings.haMinReadyBackups, parseBrokersUrl(settings.haBrokersUrl as string).endpoints.length);
    if (refusal) throw new ConfigError(refusal);
  }
  if (settings.haCluster && settings.haMechanism === 'PLAIN' && (!settings.haUsername || settings.haPassword === undefined)) {
    throw new ConfigError('ha-mechanism PLAIN needs ha-username and a password (ha-password-file, TANDEM_HA_PASSWORD, ha-password, or user/password@ in ha-brokers-url)');
  }
  if (settings.haCluster && !settings.auth && !isLoopback(host)) {
    throw new ConfigError(
      `ha-cluster=yes with auth=no on ${host} would let anyone who reaches the port join the cluster, copy every message or promote a broker: set auth=yes with an admin ha-username on every broker, or listen on 127.0.0.1`,
    );
  }
  if (settings.consolePort !== undefined && !settings.auth && !isLoopback(settings.consoleHost)) {
    // Unlike AMQP (auth=no in a config file is a choice), the console has no read-only
    // anonymous mode: anyone who reached it could delete queues or activate DR copies.
    throw new ConfigError(
      `console-host ${settings.consoleHost} with auth=no would let anyone who reaches the console port delete queues, close connections or activate DR copies: set auth=yes, or console-host=127.0.0.1`,
    );
  }
  if (settings.consolePort !== undefined && settings.auth && !settings.tlsCert && !isLoopback(settings.consoleHost)) {
    // A refusal, where plaintext AMQP off loopback is a warning: a browser's login form
    // gives no sign of where its password goes, and the console has no TLS-only port.
    throw new ConfigError(
      `console-host ${settings.consoleHost} without TLS would send the console's passwords in clear to anyone on the network: set tls-cert and tls-key (the console is then HTTPS), or console-host=127.0.0.1 (reach it through an SSH tunnel or a TLS proxy on this host)`,
    );
  }
  checkSecretFiles(settings, configFile, values);
  if ((settings.tlsCert === undefined) !== (settings.tlsKey === undefined)) {
    throw new ConfigError('tls-cert and tls-key must be given together');
  }
  if (settings.tlsPort !== undefined && !settings.tlsCert) {
    throw new ConfigError('tls-port needs tls-cert and tls-key');
  }
  if (!settings.listenPlain && !settings.tlsCert) {
    throw new ConfigError('listen-plain=no leaves no listener: configure TLS (tls-cert, tls-key, tls-port) or set listen-plain=yes');
  }
  // Before the link files: a bad tls-crl is reported as tls-crl, not as the ha-tls-crl it defaults.
  checkCrls(settings);
  checkLinkTls(settings);
  if (settings.tlsExternalUser && (!settings.tlsCa || !settings.tlsCert)) {
    throw new ConfigError('tls-external-user needs a TLS listener (tls-cert, tls-key) and tls-ca (the CA whose client certificates log in)');
  }
  if (settings.tlsRequireClientCert && !settings.tlsCa) {
    throw new ConfigError('tls-require-client-cert needs tls-ca (the CA that signs client certificates)');
  }
  // (Each key's own bounds are in optionSpecs. The HA window's minimums: a smaller one would
  // drop changes before a live backup is sent them, in batches of 256 with many in flight,
  // dropping it for a snapshot again and again.)
  return settings;
}
