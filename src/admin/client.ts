// An AMQP Management client: what `tandem` and the tests use to talk to a
// broker's $management node. One connection, one request link, one dynamic
// reply queue; requests are matched to replies by correlation id.
import rhea, { type Connection, type EventContext, type Receiver, type Sender } from 'rhea';
import { TandemError, errorOfManagementStatus, isErrorCode } from '../broker/errors.js';
import { isCertificateError, rheaTlsOptions } from './link-tls.js';

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

/** rhea's connect options for TLS (verified against address.ca, or the system's CAs) and SASL EXTERNAL. */
export function tlsOptions(address: BrokerAddress): Record<string, unknown> {
  const tls = rheaTlsOptions(address.host, address.tls ? { ca: address.ca, cert: address.cert, key: address.key } : undefined);
  return address.external ? { ...tls, ...externalMechanisms() } : tls;
}

/**
 * SASL for a certificate without a user name: EXTERNAL where the broker offers it (its
 * tls-external-user is on), else ANONYMOUS, which only a broker with auth=no accepts
 * (and there every connection may manage): the same as before certificates could log in.
 * rhea adds EXTERNAL itself to the mechanisms given, on a TLS socket with `cert` set.
 */
export function externalMechanisms(): Record<string, unknown> {
  const mechanisms = (rhea as unknown as { sasl: { client_mechanisms(): { enable_anonymous(name?: string): void } } }).sasl.client_mechanisms();
  mechanisms.enable_anonymous();
  return { sasl_mechanisms: mechanisms, enable_sasl_external: true, username: undefined, password: undefined };
}

/** Why a connection most likely failed, for the two mistakes TLS makes easy. */
function hintFor(address: BrokerAddress, errorCode: string | undefined, opened: boolean): string {
  if (opened) return '';
  if (address.tls && isCertificateError(errorCode)) {
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

export class ManagementClient {
  private connection: Connection | undefined;
  private sender: Sender | undefined;
  private replyTo: string | undefined;
  private readonly pending = new Map<string, Pending>();
  private nextId = 0;
  private lost = false;

  private constructor(private readonly timeoutMs: number) {}

  /** False once the connection is gone (a long-lived client must connect again). */
  get isOpen(): boolean {
    return !this.lost && this.replyTo !== undefined;
  }

  static async connect(address: BrokerAddress, options: { timeoutMs?: number; properties?: Record<string, unknown> } = {}): Promise<ManagementClient> {
    const client = new ManagementClient(options.timeoutMs ?? 10_000);
    await client.open(address, options.properties);
    return client;
  }

  private open(address: BrokerAddress, properties?: Record<string, unknown>): Promise<void> {
    const container = rhea.create_container({ id: `tandem-cli-${process.pid}` });
    return new Promise((resolve, reject) => {
      const fail = (why: string) => {
        clearTimeout(timer);
        this.connection?.close();
        // A host that does not answer would leave the socket connecting for minutes
        // (TCP resends its SYN): give it up now.
        const socket = (this.connection as unknown as { socket?: { connecting: boolean; destroy(): void } } | undefined)?.socket;
        if (socket?.connecting) socket.destroy();
        reject(new ConnectError(why));
      };
      const timer = setTimeout(() => fail(`no answer from ${address.host}:${address.port} within ${this.timeoutMs} ms`), this.timeoutMs);
      const conn = container.connect({
        host: address.host,
        port: address.port,
        username: address.user,
        password: address.password,
        reconnect: false,
        properties,
        idle_time_out: 0,
        ...tlsOptions(address),
      } as never);
      this.connection = conn;
      let opened = false;
      conn.on('connection_open', () => {
        opened = true;
      });
      conn.on('connection_error', (ctx: EventContext) => {
        // A SASL failure on our side (no mechanism in common) is in ctx.error, not the connection's.
        const e = (ctx as unknown as { error?: { description?: string; condition?: string } }).error ?? (ctx.connection as unknown as { error?: { description?: string; condition?: string } }).error;
        const why = e?.description ?? e?.condition ?? 'no reason given';
        // A certificate as the identity, and a broker that offers no EXTERNAL: say what to change.
        const hint = address.external && /No suitable mechanism/.test(why) ? ' (the broker does not take client certificates as identities: set tls-external-user on it, or give a user in the address)' : '';
        fail(`${address.host}:${address.port} refused the connection: ${why}${hint}`);
      });
      conn.on('disconnected', (ctx: EventContext) => {
        this.lost = true;
        const e = (ctx as unknown as { error?: Error & { code?: string } }).error;
        fail(`cannot connect to ${address.host}:${address.port}${e ? `: ${e.message}` : ''}${hintFor(address, e?.code, opened)}`);
        for (const p of this.pending.values()) p.reject(new ConnectError('connection lost'));
        this.pending.clear();
      });
      conn.on('error', () => undefined);
      this.sender = conn.open_sender({ target: { address: '$management' } });
      const receiver: Receiver = conn.open_receiver({ source: { dynamic: true } } as never);
      receiver.on('receiver_open', (ctx: EventContext) => {
        this.replyTo = (ctx.receiver as unknown as { source: { address: string } }).source.address;
        clearTimeout(timer);
        resolve();
      });
      receiver.on('receiver_error', (ctx: EventContext) => {
        const e = (ctx.receiver as unknown as { error?: { description?: string } }).error;
        fail(`cannot open a reply link: ${e?.description ?? 'refused'}`);
      });
      receiver.on('message', (ctx: EventContext) => this.onReply(ctx));
    });
  }

  /** Send one request; resolves with the reply body, rejects with a TandemError. */
  request(operation: string, type: string | undefined, name: string | undefined, body: Record<string, unknown> = {}): Promise<unknown> {
    if (!this.sender || !this.replyTo || this.lost) return Promise.reject(new ConnectError('not connected'));
    const id = `req-${++this.nextId}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ConnectError(`no reply to ${operation} within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      const props: Record<string, unknown> = { operation };
      if (type !== undefined) props.type = type;
      if (name !== undefined) props.name = name;
      this.sender!.send({ message_id: id, reply_to: this.replyTo, application_properties: props, body });
    });
  }

  close(): void {
    this.lost = true;
    for (const p of this.pending.values()) clearTimeout(p.timer);
    this.pending.clear();
    this.connection?.close();
  }

  private onReply(ctx: EventContext): void {
    const m = ctx.message as unknown as { correlation_id?: unknown; application_properties?: Record<string, unknown>; body?: unknown };
    const id = String(m.correlation_id);
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    const status = Number(m.application_properties?.statusCode ?? 500);
    const description = String(m.application_properties?.statusDescription ?? '');
    if (status >= 200 && status < 300) p.resolve(m.body);
    else {
      // The error's own code when the broker names it (a tandem broker does); else the status's.
      const named = m.application_properties?.errorCode;
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
