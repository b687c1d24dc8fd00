// SASL PLAIN on the broker's side (RFC 4616: authzid NUL authcid NUL password),
// checked against the users file behind the login throttle, with the client's
// address at hand for the throttle and the log. The engine parses the response
// (engine/sasl.ts) and waits for this check before it reads anything more.
import type { UserDirectory } from '../admin/users.js';
import type { Logger } from '../ops/log.js';
import type { LoginThrottle } from './login-throttle.js';

export interface PlainServerOptions {
  users: UserDirectory;
  throttle: LoginThrottle;
  log: Logger;
}

/** The engine's PLAIN check for a client at `remoteAddress`: the user logged in as, or undefined. */
export function plainVerifier(options: PlainServerOptions, remoteAddress: string | undefined): (user: string, password: string) => Promise<string | undefined> {
  const remote = remoteHostOf(remoteAddress);
  return async (user, password) => {
    const { throttle, users, log } = options;
    const delayMs = throttle.begin(remote, user);
    if (delayMs > 0) await sleep(delayMs);
    let ok = false;
    try {
      ok = (await users.authenticate(user, password)) !== undefined;
    } catch (err) {
      log.error({ remote, user, err: (err as Error).message }, 'authentication could not be checked');
    }
    if (ok) {
      throttle.succeeded(remote, user);
      return user;
    }
    throttle.failed(remote, user);
    log.warn({ remote, user, delayMs }, 'authentication failed');
    return undefined;
  };
}

function remoteHostOf(address: string | undefined): string {
  const a = address ?? 'unknown';
  // IPv4 clients of a dual-stack listener appear as ::ffff:a.b.c.d.
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
