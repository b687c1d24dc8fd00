// An AMQP Management client: what `tandem` and the tests use to talk to a
// broker's $management node. One connection, one request link, one dynamic
// reply queue; requests are matched to replies by correlation id. It runs on
// tandem's own engine (src/amqp/engine, client role), as does republish.ts,
// which connects the same way (clientOptions, connectFailure).
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import { AmqpClient, AmqpClientError, type ClientOptions } from '../amqp/engine/client.js';
import type { Delivery } from '../amqp/engine/delivery.js';
import type { Link } from '../amqp/engine/link.js';
import { type Plain, decodeMessage, encodeMessage, toAmqp } from '../amqp/engine/message.js';
import type { AmqpValue } from '../amqp/engine/types.js';
import { TandemError, errorOfManagementStatus, isErrorCode } from '../broker/errors.js';
import { describeRevocation, isCertificateError, tlsConnectOptions } from './link-tls.js';
import { safeString } from '../util/safe-string.js';
import { hostPort } from '../util/host-port.js';
import { monotonicNow } from '../util/monotonic-clock.js';

export interface BrokerAddress {
  host: string;
  port: number;
  user?: string;
  password?: string;
  /** amqps://: TLS, with the broker's certificate verified (never a fallback to plaintext). */
  tls?: boolean;
  /** PEM CA bundle to verify the broker's certificate with, instead of the system's CAs. */
  ca?: string;
  /** PEM client certificate chain and key, for a broker that asks for one. */
  cert?: string;
  key?: string;
  /** CRLs (one PEM string each) the broker's chain is checked against (--tls-crl, ha-tls-crl, dr-tls-crl). */
  crl?: string[];
  /** Log in with SASL EXTERNAL: the client certificate names the user (no user, no password). */
  external?: boolean;
}

/** "[amqp[s]://][user[/password]@]host[:port]" (qpid-config style; also user:password). */
export function parseBrokerAddress(text: string, defaultPort = 5672): BrokerAddress {
  const m = /^(?:(amqps?):\/\/)?(?:([^/:@]+)(?:[/:]([^@]*))?@)?(\[[^\]]+\]|[^:/]+)(?::(\d+))?\/?$/.exec(text.trim());
  if (!m) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `cannot read broker address '${text}'; use [amqp[s]://][user[/password]@]host[:port]`);
  const tls = m[1] === 'amqps';
  const port = m[5] ? Number(m[5]) : tls ? 5671 : defaultPort;
  if (port < 1 || port > 65535) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `bad port in '${text}'`);
  return { host: m[4].replace(/^\[|\]$/g, ''), port, user: m[2], password: m[3], ...(tls ? { tls } : {}) };
}

/** Why a connection most likely failed, for the two mistakes TLS makes easy. */
function hintFor(address: BrokerAddress, errorCode: string | undefined, opened: boolean): string {
  if (opened) return '';
  if (address.tls && isCertificateError(errorCode)) {
    const revocation = address.crl ? describeRevocation(errorCode, '--tls-crl', "the broker's") : undefined;
    if (revocation) return ` (${revocation})`;
    return address.ca
      ? " (the broker's TLS certificate is not signed by the --tls-ca given, or does not name this host)"
      : " (the broker's TLS certificate does not verify against the system CAs: give --tls-ca FILE with the CA that signed it)";
  }
  if (!address.tls && (errorCode === undefined || errorCode === 'EPIPE' || errorCode === 'ECONNRESET')) {
    return ' (the broker closed before AMQP started: if this is its TLS port, use amqps://)';
  }
  return '';
}

export class ConnectError extends Error {
  readonly code = 'TANDEM_ERR_CONNECT';
  constructor(message: string) {
    super(message);
    this.name = 'ConnectError';
  }
}

interface Pending {
  resolve(body: unknown): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * The SASL mechanisms a connection of ours may use: what rhea's client did, so the
 * brokers see the same logins. A certificate without a user name: EXTERNAL where the
 * broker offers it (its tls-external-user is on), else ANONYMOUS, which only a broker
 * with auth=no accepts (and there every connection may manage).
 */
function mechanismsFor(address: BrokerAddress): string[] | undefined {
  if (address.external) return ['EXTERNAL', 'ANONYMOUS'];
  if (address.user === undefined) return undefined; // no SASL layer at all (auth=no takes that)
  return address.password !== undefined ? ['PLAIN'] : ['ANONYMOUS'];
}

/** The engine client's options for a connection to `address`: TLS verified (link-tls.ts), SASL as above. */
export function clientOptions(address: BrokerAddress, containerId: string, timeoutMs: number, properties?: Record<string, unknown>): ClientOptions {
  const mechanisms = mechanismsFor(address);
  return {
    host: address.host,
    port: address.port,
    tls: address.tls ? (tlsConnectOptions(address.host, { ca: address.ca, cert: address.cert, key: address.key, crl: address.crl }) as TlsOptions) : undefined,
    user: address.user,
    password: address.password,
    external: address.external,
    sasl: mechanisms !== undefined,
    mechanisms,
    containerId,
    properties: openProperties(properties),
    timeoutMs,
  };
}

/** Open properties as AMQP fields: symbol keys, plain values. */
function openProperties(properties: Record<string, unknown> | undefined): AmqpValue | undefined {
  if (!properties) return undefined;
  return { type: 'map', value: Object.entries(properties).map(([k, v]) => [{ type: 'symbol', value: k }, toAmqp(v as Plain)]) };
}

/** What a failed connect says: the socket's, SASL's or the broker's reason, with a hint where one helps. */
export function connectFailure(address: BrokerAddress, err: unknown): ConnectError {
  const where = hostPort(address.host, address.port);
  const e = err instanceof AmqpClientError ? err : undefined;
  if (e?.kind === 'timeout') return new ConnectError(e.message);
  // Bytes that are no AMQP header (a TLS port answering a plaintext client) say what a bare close says.
  const notAmqp = e?.kind === 'refused' && e.condition === 'amqp:connection:framing-error';
  if (e?.kind === 'refused' && !notAmqp) {
    const why = e.reason ?? 'no reason given';
    // A certificate as the identity, and a broker that offers no EXTERNAL: say what to change.
    const hint = address.external && /No suitable mechanism/.test(why) ? ' (the broker does not take client certificates as identities: set tls-external-user on it, or give a user in the address)' : '';
    return new ConnectError(`${where} refused the connection: ${why}${hint}`);
  }
  const code = e?.kind === 'socket' ? e.code : undefined;
  const reason = e?.kind === 'socket' ? `: ${e.reason}` : '';
  return new ConnectError(`cannot connect to ${where}${reason}${hintFor(address, code, false)}`);
}

export class ManagementClient {
  private client: AmqpClient | undefined;
  private sender: Link | undefined;
  private replyTo: string | undefined;
  private readonly pending = new Map<string, Pending>();
  private nextId = 0;
  private lost = false;

  private constructor(private readonly timeoutMs: number) {}

  /** The address of this client's own reply queue (a temporary queue the broker made for it). */
  get replyAddress(): string | undefined {
    return this.replyTo;
  }

  /** The connection itself, for a tool that attaches links of its own beside the management ones (queue browse). */
  get connection(): AmqpClient {
    if (!this.client || this.lost) throw new ConnectError('not connected');
    return this.client;
  }

  /** False once the connection is gone (a long-lived client must connect again). */
  get isOpen(): boolean {
    return !this.lost && this.replyTo !== undefined;
  }

  static async connect(address: BrokerAddress, options: { timeoutMs?: number; properties?: Record<string, unknown> } = {}): Promise<ManagementClient> {
    const client = new ManagementClient(options.timeoutMs ?? 10_000);
    await client.open(address, options.properties);
    return client;
  }

  private async open(address: BrokerAddress, properties?: Record<string, unknown>): Promise<void> {
    const deadline = monotonicNow() + this.timeoutMs;
    let client: AmqpClient;
    try {
      client = await AmqpClient.connect(clientOptions(address, `tandem-cli-${process.pid}`, this.timeoutMs, properties));
    } catch (err) {
      throw connectFailure(address, err);
    }
    this.client = client;
    client.onClosed = () => {
      this.lost = true;
      for (const p of this.pending.values()) {
        clearTimeout(p.timer);
        p.reject(new ConnectError('connection lost'));
      }
      this.pending.clear();
    };
    // The links get what is left of the connect timeout.
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ConnectError(`no answer from ${hostPort(address.host, address.port)} within ${this.timeoutMs} ms`)), Math.max(1, deadline - monotonicNow()));
    });
    // A promise that loses a race may still reject later: that must not be an unhandled rejection.
    const handled = <T>(p: Promise<T>): Promise<T> => (p.catch(() => undefined), p);
    handled(timeout);
    try {
      const session = await Promise.race([handled(client.openSession()), timeout]);
      const links = Promise.all([
        handled(client.openSender(session, '$management')),
        handled(client.openReceiver(session, undefined, { dynamic: true })).catch((err: Error) => {
          throw new ConnectError(`cannot open a reply link: ${(err as AmqpClientError).reason ?? 'refused'}`);
        }),
      ]);
      const [sender, receiver] = await Promise.race([handled(links), timeout]);
      this.sender = sender;
      this.replyTo = receiver.source?.fields.address as string | undefined;
      if (this.replyTo === undefined) throw new ConnectError('cannot open a reply link: the broker gave no reply address');
      client.receive(receiver, 100, (d) => this.onReply(d));
    } catch (err) {
      this.close();
      throw err instanceof ConnectError ? err : new ConnectError(`cannot connect to ${hostPort(address.host, address.port)}: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Send one request; resolves with the reply body, rejects with a TandemError. */
  request(operation: string, type: string | undefined, name: string | undefined, body: Record<string, unknown> = {}): Promise<unknown> {
    if (!this.client || !this.sender || !this.replyTo || this.lost) return Promise.reject(new ConnectError('not connected'));
    const id = `req-${++this.nextId}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ConnectError(`no reply to ${operation} within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      const props: Record<string, Plain> = { operation };
      if (type !== undefined) props.type = type;
      if (name !== undefined) props.name = name;
      const bytes = encodeMessage({ messageId: id, replyTo: this.replyTo, applicationProperties: props, body: body as Plain });
      // The reply answers the request; the send's own outcome only matters if it fails.
      this.client!.send(this.sender!, bytes).catch((err: Error) => {
        const p = this.pending.get(id);
        if (!p) return;
        this.pending.delete(id);
        clearTimeout(p.timer);
        p.reject(new ConnectError(`cannot send ${operation}: ${err.message}`));
      });
    });
  }

  close(): void {
    this.lost = true;
    for (const p of this.pending.values()) clearTimeout(p.timer);
    this.pending.clear();
    this.client?.close().catch(() => undefined);
  }

  private onReply(delivery: Delivery): void {
    delivery.accept();
    let m: ReturnType<typeof decodeMessage>;
    try {
      m = decodeMessage(delivery.payload);
    } catch {
      return; // not a reply we can read: no request is answered by it
    }
    // safeString: a peer's map with a "toString" key of its own made String() throw, and the
    // engine then closed the connection: every pending request failed as "connection lost".
    const id = safeString(m.properties['correlation-id']);
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    const code = m.applicationProperties.statusCode;
    const given = typeof code === 'number' || typeof code === 'bigint' || typeof code === 'string' ? Number(code) : NaN;
    const status = Number.isFinite(given) ? given : 500;
    const description = safeString(m.applicationProperties.statusDescription ?? '');
    if (status >= 200 && status < 300) p.resolve(m.body);
    else {
      // The error's own code when the broker names it (a tandem broker does); else the status's.
      const named = m.applicationProperties.errorCode;
      p.reject(new TandemError(isErrorCode(named) ? named : errorOfManagementStatus(status), description || `status ${status}`));
    }
  }
}

/** QUERY replies come as attribute names plus rows; turn them into objects. */
export function rowsOf(reply: unknown): Array<Record<string, unknown>> {
  const r = reply as { attributeNames?: string[]; results?: unknown[][] };
  if (!r?.attributeNames || !r.results) return [];
  return r.results.map((row) => Object.fromEntries(r.attributeNames!.map((n, i) => [n, row[i]])));
}
