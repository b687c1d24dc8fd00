// The console's single page: log in, then follow the broker's overview (a
// server-sent event a second) and draw the page the address names (#/cluster,
// #/queues, #/queues/NAME, #/connections, #/dr). When this broker's console stops
// answering, the page says so, links the other brokers' consoles it knew, and moves
// to the one whose broker is (or becomes) primary (follow.ts).
import { api, ApiError, seg, setCsrf } from './api.js';
import { byId, h, replace } from './dom.js';
import { FOLLOW_AFTER_MS, findPrimary, followText, followUrl, ownAnswers, takeFollowed, type Console, type Followed } from './follow.js';
import { clusterPage, connectionsPage, drPage, queueDetailPage, queuesPage, roleOf, type Overview, type Page, type PageContext, type Sample } from './pages.js';

interface SessionInfo {
  authenticated: boolean;
  auth: boolean;
  user?: string;
  admin?: boolean;
  csrf?: string;
}

const HISTORY = 300;
let session: SessionInfo = { authenticated: false, auth: true };
let overview: Overview | undefined;
let events: EventSource | undefined;
let lostSince: number | undefined;
/** Set once the page is on its way to the primary's console. */
let following: Followed | undefined;
let followTimer: ReturnType<typeof setInterval> | undefined;
let followBusy = false;
/** Whether this page has seen its own broker as the primary: it follows the role, not the machine. */
let sawOwnPrimary = false;
let currentKey = '';
const queueHistories = new Map<string, Sample[]>();
const drHistories = new Map<string, Sample[]>();
const seeded = new Set<string>();

function route(): { key: string; page: Page } {
  const hash = location.hash.replace(/^#\/?/, '');
  const [first, ...rest] = hash.split('/');
  switch (first) {
    case 'queues':
      if (rest.length > 0 && rest[0] !== '') {
        let name = rest.join('/');
        try {
          name = decodeURIComponent(name);
        } catch {
          // Shown as typed.
        }
        return { key: `queue:${name}`, page: queueDetailPage(name) };
      }
      return { key: 'queues', page: queuesPage };
    case 'connections':
      return { key: 'connections', page: connectionsPage };
    case 'dr':
      return { key: 'dr', page: drPage };
    default:
      return { key: 'cluster', page: clusterPage };
  }
}

function showMessage(text: string, error = false): void {
  const m = byId('message');
  m.hidden = false;
  m.className = error ? 'error' : '';
  replace(m, text);
}

const ctx: PageContext = {
  get admin() {
    return session.admin === true;
  },
  get overview() {
    return overview!;
  },
  queueHistory: (name) => queueHistories.get(name) ?? [],
  drHistory: (queue) => drHistories.get(queue) ?? [],
  act(what, fn) {
    fn().then(
      (outcome) => {
        showMessage(`Done: ${typeof outcome === 'string' ? outcome : what}.`);
        void refresh();
      },
      (err: unknown) => showMessage(err instanceof ApiError ? `${err.message} (${err.code})` : String(err), true),
    );
  },
  confirm(text, name, fn, option) {
    const dialog = byId<HTMLDialogElement>('confirm');
    const input = byId<HTMLInputElement>('confirm-input');
    const ok = byId<HTMLButtonElement>('confirm-ok');
    const optionRow = byId('confirm-option');
    const checkbox = byId<HTMLInputElement>('confirm-option-input');
    // Unchecked at every opening: an option is never carried from one action to the next.
    checkbox.checked = false;
    optionRow.hidden = option === undefined;
    replace(byId('confirm-option-label'), option ?? '');
    const say = () => (typeof text === 'function' ? text(checkbox.checked) : text);
    checkbox.onchange = () => replace(byId('confirm-text'), say());
    replace(byId('confirm-text'), say());
    replace(byId('confirm-name'), name);
    input.value = '';
    ok.disabled = true;
    input.oninput = () => (ok.disabled = input.value !== name);
    dialog.onclose = () => {
      const checked = option !== undefined && checkbox.checked;
      if (dialog.returnValue === 'ok' && input.value === name) ctx.act(say().replace(/\?$/, ''), () => fn(checked));
    };
    dialog.showModal();
    input.focus();
  },
};

function push<T>(map: Map<string, T[]>, key: string, item: T): void {
  let list = map.get(key);
  if (!list) map.set(key, (list = []));
  list.push(item);
  if (list.length > HISTORY) list.shift();
}

/** One overview in: histories grow, banners and the page are drawn again. */
function onOverview(next: Overview): void {
  overview = next;
  lostSince = undefined;
  stopFollowing();
  if (followFromBackup(next)) return;
  for (const q of next.queues) if (seeded.has(`queue:${String(q.name)}`)) push(queueHistories, String(q.name), { t: next.at, depth: Number(q.depth), 'in-rate': Number(q['in-rate']), 'out-rate': Number(q['out-rate']) });
  for (const d of next.dr) if (seeded.has(`dr:${String(d.queue)}`)) push(drHistories, String(d.queue), { t: next.at, 'lag-changes': Number(d['lag-changes']), 'lag-seconds': d['lag-seconds'] === null ? null : Number(d['lag-seconds']) });
  seedHistories(next);
  draw();
}

/** The server keeps the last minutes: fetched once per queue, then the page appends. */
function seedHistories(next: Overview): void {
  const { key } = route();
  const wanted: Array<[string, string]> = [];
  if (key.startsWith('queue:')) wanted.push(['queue', key.slice(6)]);
  if (key === 'dr') for (const d of next.dr) wanted.push(['dr', String(d.queue)]);
  for (const [kind, name] of wanted) {
    const id = `${kind}:${name}`;
    if (seeded.has(id)) continue;
    seeded.add(id);
    const path = kind === 'queue' ? `/api/queues/${seg(name)}/history` : `/api/dr/${seg(name)}/history`;
    api<{ samples: Sample[] }>('GET', path).then(
      (r) => {
        (kind === 'queue' ? queueHistories : drHistories).set(name, r.samples.slice(-HISTORY));
        draw();
      },
      () => seeded.delete(id),
    );
  }
}

function drawBanners(): void {
  const out: HTMLElement[] = [];
  const brokers = overview?.cluster.brokers ?? [];
  if (following) {
    out.push(h('div', { class: 'banner info', id: 'following-banner' }, `${followText(following)}\u2026`));
  } else if (lostSince !== undefined) {
    const others = brokers.filter((b) => !b.self && typeof b.console === 'string');
    out.push(
      h(
        'div',
        { class: 'banner bad', id: 'lost-banner' },
        `This broker's console has not answered since ${new Date(lostSince).toLocaleTimeString()}; retrying. `,
        others.length > 0 ? ['Looking for the primary among the other brokers\u2019 consoles: ', others.map((b, i) => [i > 0 ? ', ' : '', h('a', { href: String(b.console) }, String(b.address))]), '.'] : null,
      ),
    );
  }
  for (const w of overview?.cluster.warnings ?? []) out.push(h('div', { class: 'banner bad cluster-warning' }, w));
  const self = brokers.find((b) => b.self);
  if (overview?.cluster.ha && self && roleOf(self) === 'backup') {
    const primary = brokers.find((b) => roleOf(b) === 'primary');
    out.push(
      h(
        'div',
        { class: 'banner info', id: 'backup-banner' },
        `This broker is a backup (${String(self.state)}): it copies the primary and serves no clients. `,
        primary ? ['The primary is ', String(primary.address), typeof primary.console === 'string' ? [': ', h('a', { href: primary.console, id: 'primary-console-link' }, 'open its console')] : null, '.'] : 'No primary is visible.',
      ),
    );
  }
  replace(byId('banners'), out);
}

function draw(): void {
  const { key, page } = route();
  for (const a of document.querySelectorAll<HTMLAnchorElement>('#nav a')) a.classList.toggle('current', a.dataset.page === page.nav);
  if (key !== currentKey) {
    currentKey = key;
    document.title = `${page.title} · Tandem`;
    replace(byId('forms'), page.forms?.(ctx) ?? null);
    byId('message').hidden = true;
  }
  drawBanners();
  if (!overview) return;
  replace(byId('page'), page.render(ctx));
}

async function refresh(): Promise<void> {
  try {
    onOverview(await api<Overview>('GET', '/api/overview'));
  } catch {
    // The event stream brings the next one.
  }
}

function watch(): void {
  events?.close();
  events = new EventSource('/api/events');
  events.addEventListener('overview', (e) => onOverview(JSON.parse((e as MessageEvent<string>).data) as Overview));
  events.addEventListener('logged-out', () => void start());
  events.onerror = () => {
    lostSince ??= Date.now();
    startFollowing();
    drawBanners();
    // Closed for good (e.g. a 401 after the broker restarted): ask who we are again.
    if (events?.readyState === EventSource.CLOSED) setTimeout(() => void start(), 1000);
  };
}

/** While this console is silent: once a second, look for the primary among the others. */
function startFollowing(): void {
  followTimer ??= setInterval(() => void followTick(), 1000);
}

function stopFollowing(): void {
  if (followTimer !== undefined) clearInterval(followTimer);
  followTimer = undefined;
}

async function followTick(): Promise<void> {
  if (followBusy || following || lostSince === undefined || Date.now() - lostSince < FOLLOW_AFTER_MS) return;
  followBusy = true;
  try {
    // Answering again (a blip, or a restart): the event stream reconnects; stay.
    if (await ownAnswers()) return;
    const brokers = overview?.cluster.brokers ?? [];
    const others = brokers.filter((b) => !b.self && typeof b.console === 'string').map((b) => ({ address: String(b.address), console: String(b.console) }));
    const target = await findPrimary(others);
    if (!target || lostSince === undefined || following) return;
    moveTo(target, { from: String(brokers.find((b) => b.self)?.address ?? location.host), to: target.address, reason: 'silent' });
  } finally {
    followBusy = false;
  }
}

/**
 * The page's broker answers, but as a backup, after the page saw it primary (it was
 * restarted before the page gave up on it, or demoted): go where the role went,
 * once exactly one other broker is primary. Its own view names that one's console.
 */
function followFromBackup(next: Overview): boolean {
  const self = next.cluster.brokers.find((b) => b.self);
  if (!next.cluster.ha || !self) return false;
  if (roleOf(self) === 'primary') sawOwnPrimary = true;
  if (!sawOwnPrimary || roleOf(self) !== 'backup' || following) return false;
  const primary = next.cluster.brokers.find((b) => !b.self && b.address === next.cluster.primary && typeof b.console === 'string');
  if (!primary) return false;
  return moveTo({ address: String(primary.address), console: String(primary.console) }, { from: String(self.address), to: String(primary.address), reason: 'backup' });
}

function moveTo(target: Console, why: Followed): boolean {
  const url = followUrl(target, why);
  if (!url) return false;
  following = why;
  stopFollowing();
  events?.close();
  drawBanners();
  location.assign(url);
  return true;
}

/** A page that followed the primary here says so until it is left (login included). */
function drawFollowed(followed: Followed | undefined): void {
  if (!followed) return;
  const banner = byId('follow-banner');
  replace(banner, `${followText(followed)}: this is its console.`);
  banner.hidden = false;
}

function drawWho(): void {
  const who = byId('who');
  if (!session.authenticated) return replace(who);
  replace(
    who,
    `${session.user} (${session.admin ? 'admin' : 'read-only'})`,
    session.auth ? h('button', { id: 'logout', onclick: () => void api('POST', '/api/logout').finally(() => void start()) }, 'Log out') : null,
  );
}

function drawLogin(error?: string): void {
  events?.close();
  events = undefined;
  overview = undefined;
  currentKey = '';
  replace(byId('forms'));
  replace(byId('banners'));
  const user = h('input', { id: 'login-user', autocomplete: 'username', required: true }) as HTMLInputElement;
  const password = h('input', { id: 'login-password', type: 'password', autocomplete: 'current-password' }) as HTMLInputElement;
  const button = h('button', { type: 'submit', id: 'login-submit' }, 'Log in') as HTMLButtonElement;
  replace(
    byId('page'),
    h(
      'form',
      {
        class: 'login',
        id: 'login-form',
        onsubmit: (e: Event) => {
          e.preventDefault();
          button.disabled = true;
          api<SessionInfo>('POST', '/api/login', { user: user.value, password: password.value }).then(
            (s) => signedIn(s),
            (err: unknown) => drawLogin(err instanceof ApiError ? err.message : String(err)),
          );
        },
      },
      h('h1', {}, 'Log in to Tandem'),
      error ? h('p', { class: 'banner bad', id: 'login-error' }, error) : null,
      h('label', {}, 'User', user),
      h('label', {}, 'Password', password),
      button,
    ),
  );
  user.focus();
}

function signedIn(s: SessionInfo): void {
  session = s;
  setCsrf(s.csrf ?? '');
  byId('auth-off').hidden = s.auth;
  drawWho();
  currentKey = '';
  draw();
  void refresh();
  watch();
}

async function start(): Promise<void> {
  try {
    session = await api<SessionInfo>('GET', '/api/session');
  } catch (err) {
    lostSince ??= Date.now();
    // The stream may have closed for good before the console went: look elsewhere all the same.
    startFollowing();
    drawBanners();
    setTimeout(() => void start(), 1000);
    return;
  }
  drawWho();
  byId('auth-off').hidden = session.auth;
  if (!session.authenticated) return drawLogin();
  signedIn(session);
}

window.addEventListener('hashchange', () => {
  if (overview) seedHistories(overview);
  draw();
});
drawFollowed(takeFollowed());
void start();
