// The web console served by tandemd itself (console-port): the pages of ui/ and a
// JSON API over the same management operations as $management and the CLI
// (src/admin/dispatcher.ts). Node's http/https only. Who may do what:
//   - auth=yes: log in with a user of the users file (scrypt, behind the same login
//     throttle as AMQP PLAIN); admins may act, other users only look.
//   - auth=no (loopback only, refused elsewhere by config.ts): every page says so
//     and whoever reaches the port is an admin.
// Every state-changing request needs the session's CSRF token in X-CSRF-Token (a
// cookie alone proves nothing: browsers send it with another site's forms too).
import { isIP } from 'node:net';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { AdminOperations, Requester } from '../admin/dispatcher.js';
import type { Attributes } from '../admin/operations.js';
import type { Role, UserDirectory } from '../admin/users.js';
import { throttledLogin, type LoginThrottle, type ThrottledLogin } from '../amqp/login-throttle.js';
import type { Logger } from '../ops/log.js';
import { readTlsFile } from '../ops/tls-file-read.js';
import { boundHttpServer, connectionGone } from '../util/http-bounds.js';
import { clientAddress } from '../util/host-port.js';
import { clusterHosts, connectSources, isClusterOrigin, roleAnswer } from './follow.js';
import { HttpError, contentSecurityPolicy, httpErrorOf, readJsonBody, securityHeaders, sendError, sendJson, sendJsonText } from './http-io.js';
import type { ClusterView } from './cluster-view.js';
import { LiveOverview } from './live.js';
import { READER_REQUESTS_PER_SECOND, RequestBudget } from './request-budget.js';
import { SessionStore, cookieValue, csrfMatches, sessionCookie, type Session } from './sessions.js';
import { loadStaticFiles, type StaticFile } from './static-files.js';

export interface ConsoleOptions {
  host: string;
  port: number;
  /** PEM files: the console is HTTPS (and its cookie Secure) when given. */
  tls?: { cert: string; key: string };
  auth: boolean;
  users: UserDirectory;
  /** The AMQP listener's throttle: a guess here counts there too, and the other way round. */
  throttle: LoginThrottle;
  ops: AdminOperations;
  cluster(): ClusterView;
  log: Logger;
  /** Where the built pages are (tests); default dist/console-ui. */
  uiDir?: string;
}

const ANONYMOUS = 'anonymous';
const MAX_URL_LENGTH = 4096;
const MAX_NAME_LENGTH = 1024;
/** As long as a client may take to send its request's headers (http-bounds.ts). */
const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

interface Call {
  req: IncomingMessage;
  res: ServerResponse;
  params: string[];
  session: Session;
  role: Role;
  requester: Requester;
  body: Record<string, unknown>;
}

interface Route {
  method: 'GET' | 'POST' | 'DELETE';
  path: RegExp;
  /** Only admins: refused with 403 before the body is read. */
  admin?: boolean;
  handle(call: Call): Promise<unknown> | unknown;
}

export class ConsoleServer {
  private server: Server | undefined;
  private readonly sessions = new SessionStore();
  private readonly readerRequests = new RequestBudget();
  private readonly live: LiveOverview;
  private readonly files: Map<string, StaticFile>;
  private readonly routes: Route[];
  private cookieName = 'tandem_console';

  constructor(private readonly options: ConsoleOptions) {
    this.live = new LiveOverview(options.ops, options.cluster, options.log);
    this.files = loadStaticFiles(options.uiDir);
    this.routes = this.declareRoutes();
  }

  get secure(): boolean {
    return this.options.tls !== undefined;
  }

  async listen(): Promise<number> {
    // Off loopback, logins need TLS and auth=no is refused: config.ts checks both.
    const { tls } = this.options;
    const handler = (req: IncomingMessage, res: ServerResponse) => void this.serve(req, res);
    // A client that opens a connection and never starts TLS was held for Node's 120 s:
    // a handful a second kept every one of the console's connections taken.
    // The files are read as the AMQP listener reads them (bounded): /dev/zero or a wrong
    // path to a huge file is a refusal naming the key, not a heap filled at start.
    // Node looks for requests past their time every 30 s by default: a client dribbling
    // its headers was held up to 40 s, not the 10 s of http-bounds.ts. Every second here.
    const checks = { connectionsCheckingInterval: 1_000 };
    const server = tls
      ? createHttpsServer({ cert: readTlsFile(tls.cert, 'tls-cert'), key: readTlsFile(tls.key, 'tls-key'), handshakeTimeout: TLS_HANDSHAKE_TIMEOUT_MS, ...checks }, handler)
      : createHttpServer(checks, handler);
    boundHttpServer(server, 256);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port, this.options.host, () => resolve());
    });
    this.server = server;
    const port = (server.address() as AddressInfo).port;
    // Brokers on one host share cookies (a cookie ignores the port): one name per console.
    this.cookieName = `tandem_console_${port}`;
    this.live.start();
    return port;
  }

  async close(): Promise<void> {
    this.live.stop();
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Closed for pipelining too many requests (http-bounds.ts): nothing is started for the rest.
    if (connectionGone(req)) return;
    securityHeaders(res);
    try {
      if ((req.url ?? '').length > MAX_URL_LENGTH) throw new HttpError(414, 'TANDEM_ERR_INVALID_ARGUMENT', 'URL too long');
      this.checkHost(req);
      const path = requestPath(req.url ?? '/');
      if (!path.startsWith('/api/')) return this.serveFile(req, res, path);
      await this.serveApi(req, res, path);
    } catch (err) {
      const e = httpErrorOf(err);
      if (e.status >= 500) this.options.log.error({ err, url: req.url }, 'console request failed');
      if (e.status === 413) {
        // The rest of an oversized body is not read: the connection cannot carry another request.
        res.setHeader('Connection', 'close');
        res.once('finish', () => req.destroy());
      }
      sendError(res, e);
    }
  }

  private serveFile(req: IncomingMessage, res: ServerResponse, path: string): void {
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new HttpError(405, 'TANDEM_ERR_INVALID_ARGUMENT', `${req.method} is not allowed here`);
    const file = this.files.get(path);
    if (!file) {
      if (path === '/') throw new HttpError(500, 'TANDEM_ERR_INTERNAL', 'the console pages are missing from this installation (dist/console-ui: run npm run build)');
      throw new HttpError(404, 'TANDEM_ERR_NOT_FOUND', `no page ${path}`);
    }
    // The page may ask the cluster's other consoles who is primary (follow.ts); nothing else.
    if (file.type.startsWith('text/html')) res.setHeader('Content-Security-Policy', contentSecurityPolicy(connectSources(this.options.cluster())));
    res.writeHead(200, { 'Content-Type': file.type, 'Content-Length': file.body.length, 'Cache-Control': 'no-cache' });
    res.end(req.method === 'HEAD' ? undefined : file.body);
  }

  private async serveApi(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const method = req.method ?? 'GET';
    if (method !== 'GET' && method !== 'HEAD') this.checkOrigin(req);
    if (path === '/api/session' && method === 'GET') return sendJson(res, 200, this.sessionInfo(req, res));
    if (path === '/api/login' && method === 'POST') return this.login(req, res);
    if (path === '/api/role' && (method === 'GET' || method === 'HEAD')) return this.role(req, res);

    const matches = this.routes.map((r) => ({ r, m: r.path.exec(path) })).filter((x) => x.m);
    if (matches.length === 0) throw new HttpError(404, 'TANDEM_ERR_NOT_FOUND', `no API at ${path} (see docs/console.md)`);
    const found = matches.find((x) => x.r.method === method || (method === 'HEAD' && x.r.method === 'GET'));
    if (!found) throw new HttpError(405, 'TANDEM_ERR_INVALID_ARGUMENT', `${method} is not allowed on ${path}; allowed: ${matches.map((x) => x.r.method).join(', ')}`);

    const session = this.sessionOf(req);
    if (!session) throw new HttpError(401, 'TANDEM_ERR_UNAUTHENTICATED', 'not logged in (POST /api/login)');
    const role = this.roleOf(session);
    if (!role) {
      this.sessions.delete(session.id);
      throw new HttpError(401, 'TANDEM_ERR_UNAUTHENTICATED', `user '${session.user}' is no longer in the users file: log in again`);
    }
    if (role !== 'admin' && !this.readerRequests.take(session.user)) {
      res.setHeader('Retry-After', '1');
      throw new HttpError(429, 'TANDEM_ERR_BUSY', `user '${session.user}' is asking too fast: at most ${READER_REQUESTS_PER_SECOND} requests a second`);
    }
    if (method !== 'GET' && method !== 'HEAD' && !csrfMatches(session, req.headers['x-csrf-token'])) {
      throw new HttpError(403, 'TANDEM_ERR_CSRF', 'missing or wrong X-CSRF-Token header: changes need the token GET /api/session gives');
    }
    if (found.r.admin && role !== 'admin') {
      throw new HttpError(403, 'TANDEM_ERR_UNAUTHORIZED', `user '${session.user}' may look but not change anything: this needs an admin`);
    }
    const params = found.m!.slice(1).map((p) => {
      try {
        return decodeURIComponent(p);
      } catch {
        throw new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', `bad %-escape in ${path}`);
      }
    });
    if (params.some((p) => p.length > MAX_NAME_LENGTH)) throw new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', `names are at most ${MAX_NAME_LENGTH} characters`);
    const body = method === 'GET' || method === 'HEAD' ? {} : await readJsonBody(req);
    const requester: Requester = {
      user: session.user,
      admin: role === 'admin',
      reader: true,
      connectionId: `console:${session.id.slice(0, 8)}`,
      via: 'console',
      remote: clientAddress(req.socket.remoteAddress),
    };
    const result = await found.r.handle({ req, res, params, session, role, requester, body });
    if (!res.headersSent && result !== undefined) sendJson(res, 200, result);
  }

  /**
   * Without a login (auth=no) whoever reaches the port is an admin, and a web page can
   * reach it by a name of its own rebound to 127.0.0.1 (DNS rebinding): to the browser
   * that is the page's own origin, so Origin, SameSite and CSRF tokens all let it in,
   * and any site the operator visits could delete queues. Such a request carries the
   * page's name in Host; one this machine answers to on loopback carries an address,
   * localhost, console-host or a host of ha-brokers-url. (With auth=yes a rebound page
   * has no session: the cookie belongs to the real name.)
   */
  private checkHost(req: IncomingMessage): void {
    if (this.options.auth) return;
    const host = req.headers.host;
    if (host === undefined) return; // no browser leaves it out
    let name: string;
    try {
      // host[:port] and nothing else: 'name@127.0.0.1' is no host of this machine.
      name = /[@/\\?#]/.test(host) ? '' : new URL(`http://${host}`).hostname.toLowerCase();
    } catch {
      name = '';
    }
    const bare = name.startsWith('[') ? name.slice(1, -1) : name;
    if (isIP(bare) !== 0 || name === 'localhost' || name === this.options.host.toLowerCase()) return;
    // The names of ha-brokers-url are the operator's: pages following the primary use them.
    if (clusterHosts(this.options.cluster()).includes(name)) return;
    throw new HttpError(421, 'TANDEM_ERR_MISDIRECTED', `the console has no login (auth=no) and answers only to an address, localhost or ${this.options.host}, not to the name in Host: ${JSON.stringify(host.slice(0, 256))}`);
  }

  /**
   * A browser names the page that sent a request in Origin: from anywhere but this
   * console, a change is refused even before its CSRF token is looked at.
   */
  private checkOrigin(req: IncomingMessage): void {
    const origin = req.headers.origin;
    if (origin === undefined) return;
    let host: string;
    try {
      host = new URL(origin).host;
    } catch {
      host = '';
    }
    if (host !== req.headers.host) throw new HttpError(403, 'TANDEM_ERR_CSRF', `a request from ${origin} may not change anything here`);
  }

  /**
   * This broker's HA role, without a session: a page on another console of the cluster
   * whose own broker stopped answering asks it to find the primary (follow.ts). Only
   * pages served by the cluster's hosts may read it, and never with credentials.
   */
  private role(req: IncomingMessage, res: ServerResponse): void {
    const view = this.options.cluster();
    res.setHeader('Vary', 'Origin');
    const origin = req.headers.origin;
    if (isClusterOrigin(view, origin)) res.setHeader('Access-Control-Allow-Origin', origin!);
    sendJson(res, 200, roleAnswer(view));
  }

  private sessionOf(req: IncomingMessage): Session | undefined {
    return this.sessions.get(cookieValue(req.headers.cookie, this.cookieName));
  }

  private roleOf(session: Session): Role | undefined {
    if (!this.options.auth) return 'admin';
    return this.options.users.role(session.user);
  }

  /** Who is logged in, and the CSRF token; with auth=no an anonymous session is opened here. */
  private sessionInfo(req: IncomingMessage, res: ServerResponse): Attributes {
    let session = this.sessionOf(req);
    if (!session && !this.options.auth) {
      session = this.sessions.create(ANONYMOUS);
      res.setHeader('Set-Cookie', this.cookie(session));
    }
    const role = session ? this.roleOf(session) : undefined;
    if (!session || !role) return { authenticated: false, auth: this.options.auth };
    return { authenticated: true, auth: this.options.auth, user: session.user, admin: role === 'admin', csrf: session.csrf };
  }

  private async login(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!this.options.auth) throw new HttpError(409, 'TANDEM_ERR_PRECONDITION', 'authentication is off (auth=no): there is nothing to log in to');
    const body = await readJsonBody(req, 4096);
    const { user, password } = body;
    if (typeof user !== 'string' || user === '' || user.length > 256 || typeof password !== 'string' || password.length > 1024) {
      throw new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', 'a login needs {"user": NAME, "password": PASSWORD}');
    }
    const { throttle, users, log } = this.options;
    const remote = clientAddress(req.socket.remoteAddress);
    // A client that leaves before its answer abandons the attempt, as over AMQP
    // (sasl-plain.ts): the wait and the hash are dropped. Hashed anyway, logins sent
    // and dropped at once queued hashes on the one hashing thread faster than it does
    // them, and every login (console and AMQP) waited behind them.
    // The socket too: an answer queued behind a pipelined one gets no 'close' of its own.
    const gone = new AbortController();
    const onClose = () => gone.abort();
    const socket = req.socket;
    res.once('close', onClose);
    socket.once('close', onClose);
    let login: ThrottledLogin;
    try {
      login = await throttledLogin(throttle, users, remote, user, password, gone.signal, (err) => log.error({ remote, user, err: err.message }, 'console: authentication could not be checked'));
    } finally {
      res.off('close', onClose);
      socket.off('close', onClose);
    }
    if (login.status === 'abandoned') return;
    const { role, delayMs } = login;
    if (!role) {
      log.warn({ remote, user, delayMs, via: 'console' }, `console: authentication failed for user '${user}' from ${remote}`);
      throw new HttpError(401, 'TANDEM_ERR_UNAUTHENTICATED', 'wrong user name or password');
    }
    const old = this.sessionOf(req);
    if (old) this.sessions.delete(old.id);
    const session = this.sessions.create(user);
    log.info({ remote, user, role, via: 'console' }, `console: ${user} logged in from ${remote}`);
    res.setHeader('Set-Cookie', this.cookie(session));
    sendJson(res, 200, { authenticated: true, auth: true, user, admin: role === 'admin', csrf: session.csrf });
  }

  private cookie(session: Session | undefined): string {
    return sessionCookie(this.cookieName, session, this.secure);
  }

  private declareRoutes(): Route[] {
    const ops = this.options.ops;
    const perform = (c: Call, op: string, type: string | undefined, name: unknown, body: Attributes = {}) => ops.perform(op, type, name, body, c.requester);
    const confirmed = (c: Call, name: string, what: string) => {
      if (c.body.confirm !== name) throw new HttpError(400, 'TANDEM_ERR_CONFIRMATION', `${what} needs {"confirm": ${JSON.stringify(name)}}: type the name to confirm`);
    };
    const NAME = '([^/]+)';
    return [
      { method: 'POST', path: /^\/api\/logout$/, handle: (c) => this.logout(c) },
      {
        method: 'GET',
        path: /^\/api\/overview$/,
        handle: async (c) => {
          sendJsonText(c.res, 200, await this.live.currentJson(c.role === 'admin'));
          return undefined;
        },
      },
      {
        method: 'GET',
        path: /^\/api\/events$/,
        handle: (c) => {
          const id = c.session.id;
          const live = () => this.sessions.get(id) !== undefined && this.roleOf(c.session) !== undefined;
          if (!this.live.watch(c.res, { user: c.session.user, admin: c.role === 'admin' }, live, () => this.roleOf(c.session) === 'admin')) {
            throw new HttpError(503, 'TANDEM_ERR_BUSY', 'too many pages are watching this console; close some');
          }
          return undefined;
        },
      },
      { method: 'GET', path: /^\/api\/cluster$/, handle: () => this.options.cluster() },
      { method: 'GET', path: /^\/api\/ha$/, handle: (c) => perform(c, 'HA-STATUS', 'broker', 'broker') },
      { method: 'GET', path: /^\/api\/broker$/, handle: (c) => perform(c, 'READ', 'broker', 'broker') },
      { method: 'GET', path: /^\/api\/queues$/, handle: (c) => perform(c, 'QUERY', 'queue', undefined) },
      {
        method: 'POST',
        path: /^\/api\/queues$/,
        admin: true,
        handle: async (c) => {
          const { name, ...attrs } = c.body;
          if (typeof name !== 'string' || name === '' || name.length > MAX_NAME_LENGTH) throw new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', `a queue needs a "name" of 1-${MAX_NAME_LENGTH} characters`);
          const created = await perform(c, 'CREATE', 'queue', name, attrs);
          sendJson(c.res, 201, created);
          return undefined;
        },
      },
      { method: 'GET', path: new RegExp(`^/api/queues/${NAME}$`), handle: (c) => perform(c, 'READ', 'queue', c.params[0]) },
      {
        method: 'GET',
        path: new RegExp(`^/api/queues/${NAME}/history$`),
        handle: async (c) => {
          await perform(c, 'READ', 'queue', c.params[0]);
          return { queue: c.params[0], samples: this.live.queueSamples(c.params[0]!) };
        },
      },
      {
        method: 'POST',
        path: new RegExp(`^/api/queues/${NAME}/purge$`),
        admin: true,
        handle: (c) => {
          confirmed(c, c.params[0]!, 'purging a queue');
          return perform(c, 'PURGE', 'queue', c.params[0]);
        },
      },
      {
        method: 'POST',
        path: new RegExp(`^/api/queues/${NAME}/move$`),
        admin: true,
        handle: (c) => {
          confirmed(c, c.params[0]!, "moving a queue's messages");
          return perform(c, 'MOVE', 'queue', c.params[0], pick(c.body, ['to', 'count']));
        },
      },
      {
        method: 'DELETE',
        path: new RegExp(`^/api/queues/${NAME}$`),
        admin: true,
        handle: (c) => {
          confirmed(c, c.params[0]!, 'deleting a queue');
          return perform(c, 'DELETE', 'queue', c.params[0], pick(c.body, ['if-empty', 'if-unused']));
        },
      },
      { method: 'GET', path: /^\/api\/connections$/, handle: (c) => perform(c, 'QUERY', 'connection', undefined) },
      { method: 'DELETE', path: new RegExp(`^/api/connections/${NAME}$`), admin: true, handle: (c) => perform(c, 'DELETE', 'connection', c.params[0]) },
      { method: 'GET', path: /^\/api\/dr$/, handle: async (c) => ((await perform(c, 'DR-STATUS', 'broker', 'broker')) as { queues: unknown }).queues },
      {
        method: 'GET',
        path: new RegExp(`^/api/dr/${NAME}/history$`),
        handle: async (c) => {
          await perform(c, 'DR-STATUS', 'broker', 'broker', { queues: [c.params[0]] });
          return { queue: c.params[0], samples: this.live.drSamples(c.params[0]!) };
        },
      },
      {
        method: 'POST',
        path: new RegExp(`^/api/dr/${NAME}/activate$`),
        admin: true,
        handle: (c) => {
          confirmed(c, c.params[0]!, 'activating a DR copy');
          // The old source is told to stop serving the queue unless the page asks, in so
          // many words, for a drill (the CLI's --keep-source-serving).
          const keep = c.body['keep-source-serving'];
          if (keep !== undefined && typeof keep !== 'boolean') throw new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', `"keep-source-serving" must be true or false, not ${JSON.stringify(keep).slice(0, 64)}`);
          return perform(c, 'DR-ACTIVATE', 'broker', 'broker', { queues: [c.params[0]], ...(keep === true ? { 'keep-source-serving': true } : {}) });
        },
      },
    ];
  }

  private logout(c: Call): Attributes {
    this.sessions.delete(c.session.id);
    c.res.setHeader('Set-Cookie', this.cookie(undefined));
    return { authenticated: false, auth: this.options.auth };
  }
}

function pick(body: Record<string, unknown>, keys: string[]): Attributes {
  const out: Attributes = {};
  for (const k of keys) if (body[k] !== undefined) out[k] = body[k];
  return out;
}


/**
 * The path of a request's target. One that is no URL (`//[`, a port past 65535) is
 * the client's error, a 400: not the 500 it was, with an error and its stack in the
 * log for every such request, from anyone, before any login.
 */
function requestPath(target: string): string {
  try {
    return new URL(target, 'http://console').pathname;
  } catch {
    throw new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', 'the request target is not a URL path');
  }
}
