// Following the primary when this page's own console stops answering. The page knows
// the other brokers' consoles from its last overview; it asks each one's GET
// /api/role (no session, no cookie: a cookie belongs to its own origin) and moves to
// the one whose broker says it is primary, with the highest epoch if two do. The new
// console asks for its own login (auth=yes); the hash, the page being looked at, comes
// along as the path to return to, and `followed-from` says why the page moved.

/** How long the own console must stay silent before the page looks elsewhere: a blip is not a failover. */
export const FOLLOW_AFTER_MS = 2000;
/** How long one console may take to say who it is. */
const ASK_MS = 1500;
const FROM = 'followed-from';
const TO = 'primary';
const WHY = 'reason';

export interface Console {
  address: string;
  console: string;
}

export interface Role {
  address: string | null;
  state: string | null;
  epoch: number | null;
  primary: boolean;
}

async function ask(base: string): Promise<Role | undefined> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), ASK_MS);
  try {
    const res = await fetch(new URL('/api/role', base), { credentials: 'omit', cache: 'no-store', signal: abort.signal });
    if (!res.ok) return undefined;
    const r = (await res.json()) as Role;
    return typeof r === 'object' && r !== null && typeof r.primary === 'boolean' ? r : undefined;
  } catch {
    // Down, refused by CORS, or slow: not the primary we are looking for.
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/** Whether this page's own console still answers (then the event stream comes back by itself). */
export async function ownAnswers(): Promise<boolean> {
  return (await ask(location.origin)) !== undefined;
}

/** The console among `consoles` whose broker is primary now, if any. */
export async function findPrimary(consoles: Console[]): Promise<Console | undefined> {
  const answers = await Promise.all(consoles.map(async (c) => ({ c, r: await ask(c.console) })));
  const primaries = answers.filter((a) => a.r?.primary).sort((a, b) => Number(b.r!.epoch ?? 0) - Number(a.r!.epoch ?? 0));
  return primaries[0]?.c;
}

/**
 * Why a page moved: the broker it left, the primary it followed, and whether the one
 * it left stopped answering or answers as a backup now (restarted, or demoted).
 */
export interface Followed {
  from: string;
  to: string;
  reason: 'silent' | 'backup';
}

/** The banner's words, on the page that leaves and on the one it reaches. */
export function followText(f: Followed): string {
  return f.reason === 'backup' ? `Broker ${f.from} is a backup now; following the primary at ${f.to}` : `Broker ${f.from} stopped answering; following the primary at ${f.to}`;
}

/** Where to go: the other console's page, told why, on the same route. */
export function followUrl(target: Console, followed: Followed): string | undefined {
  let url: URL;
  try {
    url = new URL(target.console);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  url.pathname = '/';
  url.search = new URLSearchParams({ [FROM]: followed.from, [TO]: followed.to, [WHY]: followed.reason }).toString();
  url.hash = location.hash;
  return url.toString();
}

/** Why this page was opened by a follow, if it was; taken out of the address bar. */
export function takeFollowed(): Followed | undefined {
  const params = new URLSearchParams(location.search);
  const from = params.get(FROM);
  if (from === null) return undefined;
  // A reload shows this console plainly; the history keeps the route.
  history.replaceState(null, '', `${location.pathname}${location.hash}`);
  // Anyone can send a link with these: shown as text only (dom.ts), and only when they
  // are broker addresses (host:port), so a link cannot put sentences of its own
  // ("your session expired, log in at ...") in the console's banner.
  const to = params.get(TO) ?? location.host;
  if (!isAddress(from) || !isAddress(to)) return undefined;
  return { from, to, reason: params.get(WHY) === 'backup' ? 'backup' : 'silent' };
}

/** host:port as ha-brokers-url names brokers: a name, an IPv4 or a bracketed IPv6 address. */
function isAddress(s: string): boolean {
  return /^[A-Za-z0-9._:[\]-]{1,300}$/.test(s);
}
