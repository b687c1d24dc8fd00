// Console sessions: a random id in an HttpOnly cookie, and with each session a
// random CSRF token that every state-changing request must echo in a header. A
// session holds only who logged in: the role is looked up again on each request,
// so a user removed from the users file (or demoted) loses the console at once.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { monotonicNow } from '../util/monotonic-clock.js';

/** A session unused this long is forgotten. */
export const IDLE_TIMEOUT_MS = 30 * 60_000;
/** And any session this old, used or not. */
export const MAX_AGE_MS = 12 * 3600_000;
/** Sessions kept at most (the least recently used go first), so logins cannot grow memory. */
const MAX_SESSIONS = 1000;
/**
 * Sessions of one user kept at most (that user's least recently used go first): else
 * one user logging in again and again pushed everyone else's out of MAX_SESSIONS, a
 * reader logging the admins out. A browser holds one (the cookie is per console).
 */
export const MAX_SESSIONS_PER_USER = 32;

export interface Session {
  id: string;
  user: string;
  csrf: string;
  createdAt: number;
  lastSeen: number;
}

export class SessionStore {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly now: () => number = monotonicNow) {}

  create(user: string): Session {
    const t = this.now();
    const session: Session = { id: token(), user, csrf: token(), createdAt: t, lastSeen: t };
    const own = [...this.sessions.values()].filter((s) => s.user === user);
    if (own.length >= MAX_SESSIONS_PER_USER) this.sessions.delete(own[0]!.id);
    else if (this.sessions.size >= MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    this.sessions.set(session.id, session);
    return session;
  }

  /** The live session of this id, touched; undefined when unknown or expired. */
  get(id: string | undefined): Session | undefined {
    if (!id) return undefined;
    const s = this.sessions.get(id);
    if (!s) return undefined;
    const t = this.now();
    if (t - s.lastSeen > IDLE_TIMEOUT_MS || t - s.createdAt > MAX_AGE_MS) {
      this.sessions.delete(id);
      return undefined;
    }
    s.lastSeen = t;
    // Most recently used last, so the map's first key is the one to drop.
    this.sessions.delete(id);
    this.sessions.set(id, s);
    return s;
  }

  delete(id: string): void {
    this.sessions.delete(id);
  }

  get size(): number {
    return this.sessions.size;
  }
}

/** Whether `given` is the session's CSRF token (compared in constant time). */
export function csrfMatches(session: Session, given: unknown): boolean {
  if (typeof given !== 'string') return false;
  const a = Buffer.from(session.csrf);
  const b = Buffer.from(given);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The value of one cookie of a Cookie header (undefined when absent). */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header || header.length > 8192) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Set-Cookie for a session (undefined: the cookie removed). Scripts never see it; other sites' requests never carry it. */
export function sessionCookie(name: string, session: Session | undefined, secure: boolean): string {
  const attrs = ['Path=/', 'HttpOnly', 'SameSite=Strict', ...(secure ? ['Secure'] : [])];
  return session ? [`${name}=${session.id}`, ...attrs].join('; ') : [`${name}=`, 'Max-Age=0', ...attrs].join('; ');
}

function token(): string {
  return randomBytes(32).toString('base64url');
}
