// SASL PLAIN on the broker's side (RFC 4616: authzid NUL authcid NUL password),
// checked against the users file behind the login throttle, with the client's
// address at hand for the throttle and the log. rhea creates a mechanism per
// sasl-init without saying for which connection; rhea-patches.ts tells us.
import type { UserDirectory } from '../admin/users.js';
import type { Logger } from '../ops/log.js';
import type { LoginThrottle } from './login-throttle.js';
import { saslInitConnection } from './rhea-patches.js';

export interface PlainServerOptions {
  users: UserDirectory;
  throttle: LoginThrottle;
  log: Logger;
}

/** The object rhea's SASL server drives: start() settles outcome (and username on success). */
class PlainMechanism {
  outcome: boolean | undefined;
  username: string | undefined;

  constructor(
    private readonly options: PlainServerOptions,
    private readonly remote: string,
  ) {}

  async start(response: Buffer | undefined): Promise<void> {
    const fields = splitNul(response);
    if (!fields) {
      this.options.log.warn({ remote: this.remote }, 'authentication failed: malformed PLAIN response');
      this.outcome = false;
      return;
    }
    const [, user, password] = fields;
    const { throttle, users, log } = this.options;
    const delayMs = throttle.begin(this.remote, user);
    if (delayMs > 0) await sleep(delayMs);
    let ok = false;
    try {
      ok = (await users.authenticate(user, password)) !== undefined;
    } catch (err) {
      log.error({ remote: this.remote, user, err: (err as Error).message }, 'authentication could not be checked');
    }
    if (ok) {
      throttle.succeeded(this.remote, user);
      this.username = user;
    } else {
      throttle.failed(this.remote, user);
      log.warn({ remote: this.remote, user, delayMs }, `authentication failed for user '${user}' from ${this.remote}`);
    }
    this.outcome = ok;
  }
}

/** A factory for rhea's sasl_server_mechanisms.PLAIN. */
export function plainServer(options: PlainServerOptions): () => PlainMechanism {
  return () => new PlainMechanism(options, remoteHostOf(saslInitConnection()));
}

function remoteHostOf(conn: { socket?: { remoteAddress?: string } } | undefined): string {
  const address = conn?.socket?.remoteAddress ?? 'unknown';
  // IPv4 clients of a dual-stack listener appear as ::ffff:a.b.c.d.
  return address.startsWith('::ffff:') ? address.slice(7) : address;
}

function splitNul(response: Buffer | undefined): [string, string, string] | undefined {
  if (!Buffer.isBuffer(response)) return undefined;
  const a = response.indexOf(0);
  const b = a < 0 ? -1 : response.indexOf(0, a + 1);
  if (a < 0 || b < 0 || response.indexOf(0, b + 1) >= 0) return undefined;
  const user = response.toString('utf8', a + 1, b);
  if (user === '') return undefined;
  return [response.toString('utf8', 0, a), user, response.toString('utf8', b + 1)];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
