// SASL PLAIN on the broker's side (RFC 4616: authzid NUL authcid NUL password),
// checked against the users file behind the login throttle, with the client's
// address at hand for the throttle and the log. The engine parses the response
// (engine/sasl.ts) and waits for this check before it reads anything more. A client
// that leaves before its check is done abandons it (the engine aborts `signal`): the
// throttle's wait and a queued hash are dropped, and it counts as no attempt at all,
// since its verdict could reach nobody.
// A non-empty authzid asks to act as that user (RFC 4616 section 2); tandem has no
// proxy authorisation, so one other than the authcid fails the login, as a wrong
// password does: logged, and counted by the throttle (its password is not checked).
import type { UserDirectory } from '../admin/users.js';
import type { Logger } from '../ops/log.js';
import { throttledLogin, type LoginThrottle } from './login-throttle.js';
import { clientAddress } from '../util/host-port.js';

/** The directory a login asking to act as another user is checked against: it knows no one. */
const NO_ONE: Pick<UserDirectory, 'authenticate'> = { authenticate: async () => undefined };

export interface PlainServerOptions {
  users: UserDirectory;
  throttle: LoginThrottle;
  log: Logger;
}

/** The engine's PLAIN check for a client at `remoteAddress`: the user logged in as, or undefined. */
export function plainVerifier(options: PlainServerOptions, remoteAddress: string | undefined): (user: string, password: string, authzid: string, signal?: AbortSignal) => Promise<string | undefined> {
  const remote = clientAddress(remoteAddress);
  return async (user, password, authzid, signal) => {
    const { throttle, users, log } = options;
    const proxied = authzid !== '' && authzid !== user;
    const login = await throttledLogin(throttle, proxied ? NO_ONE : users, remote, user, password, signal, (err) => log.error({ remote, user, err: err.message }, 'authentication could not be checked'));
    if (login.status === 'abandoned') return undefined;
    if (login.role) return user;
    if (proxied) log.warn({ remote, user, asked: authzid, delayMs: login.delayMs }, `authentication failed: '${user}' asked to act as another user (a SASL PLAIN authzid), which tandem does not allow`);
    else log.warn({ remote, user, delayMs: login.delayMs }, 'authentication failed');
    return undefined;
  };
}

