// The four pages (and a queue's detail page). Each has a part drawn once when it is
// opened (forms, which must keep what is being typed) and a live part drawn again
// from every overview the broker pushes.
import { api, seg } from './api.js';
import { lineChart } from './chart.js';
import { h, replace, type Child } from './dom.js';
import { agoMs, bytes, num, seconds, stateClass, yesNo } from './format.js';

export type Row = Record<string, unknown>;

export interface Overview {
  at: number;
  broker: Row;
  cluster: { ha: boolean; brokers: Row[]; primary: string | null; warnings: string[] };
  queues: Row[];
  'queues-total': number;
  connections: Row[];
  dr: Row[];
}

export interface Sample {
  t: number;
  [k: string]: number | null;
}

export interface PageContext {
  admin: boolean;
  overview: Overview;
  /** Client-side histories (seeded from the API, then one sample per overview). */
  queueHistory(name: string): Sample[];
  drHistory(queue: string): Sample[];
  /** Run an action, report its outcome (what fn resolves to when that is a string, else `what`). */
  act(what: string, fn: () => Promise<unknown>): void;
  /**
   * Ask to type `name` before running fn. With `option`, the dialog also shows that
   * checkbox, unchecked; `text` says what will be done with it as it is now.
   */
  confirm(text: string | ((checked: boolean) => string), name: string, fn: (checked: boolean) => Promise<unknown>, option?: string): void;
}

export interface Page {
  title: string;
  nav: string;
  forms?(ctx: PageContext): Child;
  render(ctx: PageContext): Child;
}

const PRIMARY = new Set(['active', 'recovering', 'standalone']);

export function roleOf(b: Row): string {
  if (!b.reachable) return 'unreachable';
  return PRIMARY.has(String(b.state)) ? 'primary' : 'backup';
}

function table(id: string, headers: string[], rows: HTMLElement[], empty: string): HTMLElement {
  return h(
    'table',
    { id },
    h('thead', {}, h('tr', {}, headers.map((t) => h('th', {}, t)))),
    h('tbody', {}, rows.length > 0 ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, empty))),
  );
}

const n = (v: unknown) => h('td', { class: 'num' }, num(v));

export const clusterPage: Page = {
  title: 'Cluster',
  nav: 'cluster',
  render({ overview }) {
    const c = overview.cluster;
    const rows = c.brokers.map((b) => {
      const role = roleOf(b);
      const link = typeof b.console === 'string' && !b.self ? h('a', { href: b.console, class: 'console-link' }, 'open console') : b.self ? h('span', { class: 'muted' }, 'this console') : '–';
      return h(
        'tr',
        { 'data-address': String(b.address), 'data-role': role, 'data-state': String(b.state ?? 'unreachable') },
        h('td', { class: 'name' }, String(b.address), b.self ? h('span', { class: 'muted' }, ' (this broker)') : null),
        h('td', { class: 'role' }, role),
        h('td', { class: stateClass(b.reachable ? b.state : 'unreachable') }, b.reachable ? String(b.state) : `unreachable (last: ${String(b.state ?? 'never seen')})`),
        n(b.epoch),
        n(b.lsn),
        n(b['lag-changes']),
        h('td', { class: 'num' }, bytes(b['lag-bytes'])),
        h('td', { class: 'num' }, seconds(b['lag-seconds'])),
        h('td', { class: 'num' }, agoMs(b['last-heartbeat-ms-ago'])),
        h('td', {}, link),
      );
    });
    return [
      h('h1', {}, 'Cluster'),
      c.ha ? null : h('p', { class: 'muted' }, 'This broker is not in an HA cluster (ha-cluster=no).'),
      table('brokers', ['Broker', 'Role', 'State', 'Epoch', 'Applied LSN', 'Lag (changes)', 'Lag (bytes)', 'Lag (s)', 'Last heartbeat', 'Console'], rows, 'no broker'),
      h('p', { class: 'muted' }, `Version ${String(overview.broker.version ?? '')} · uptime ${num(overview.broker['uptime-seconds'])} s · ${num(overview.broker.connections)} connections · memory alarm ${yesNo(overview.broker['memory-alarm'])}`),
    ];
  },
};

export const queuesPage: Page = {
  title: 'Queues',
  nav: 'queues',
  forms(ctx) {
    if (!ctx.admin) return null;
    const name = h('input', { id: 'new-queue-name', placeholder: 'queue name', required: true, maxlength: 1024 }) as HTMLInputElement;
    const durable = h('input', { id: 'new-queue-durable', type: 'checkbox', checked: true }) as HTMLInputElement;
    const replicate = h('select', { id: 'new-queue-replicate' }, ['', 'none', 'configuration', 'all'].map((v) => h('option', { value: v }, v || 'replicate: broker default'))) as HTMLSelectElement;
    return h(
      'form',
      {
        class: 'inline',
        id: 'create-queue-form',
        onsubmit: (e: Event) => {
          e.preventDefault();
          const body: Row = { name: name.value, durable: durable.checked };
          if (replicate.value) body['qpid.replicate'] = replicate.value;
          ctx.act(`created queue ${name.value}`, async () => {
            await api('POST', '/api/queues', body);
            name.value = '';
          });
        },
      },
      h('strong', {}, 'New queue'),
      name,
      h('label', {}, durable, ' durable'),
      replicate,
      h('button', { type: 'submit', id: 'create-queue' }, 'Create'),
    );
  },
  render(ctx) {
    const { overview } = ctx;
    const rows = overview.queues.map((q) => {
      const name = String(q.name);
      const resident = Math.max(0, Number(q['byte-depth'] ?? 0) - Number(q['paged-bytes'] ?? 0));
      return h(
        'tr',
        { 'data-queue': name },
        h('td', { class: 'name' }, h('a', { href: `#/queues/${seg(name)}` }, name)),
        n(q.depth),
        n(q['in-rate']),
        n(q['out-rate']),
        n(q.consumers),
        h('td', {}, yesNo(q.durable)),
        h('td', {}, String(q['qpid.replicate'] ?? '')),
        h('td', { class: 'num' }, bytes(resident)),
        h('td', { class: 'num' }, `${bytes(q['paged-bytes'])} (${num(q['paged-depth'])})`),
        ctx.admin ? h('td', {}, queueActions(ctx, name)) : null,
      );
    });
    const headers = ['Name', 'Depth', 'In/s', 'Out/s', 'Consumers', 'Durable', 'Replicate', 'In memory', 'Paged (messages)'];
    return [
      h('h1', {}, 'Queues'),
      table('queues', ctx.admin ? [...headers, 'Actions'] : headers, rows, 'no queue'),
      overview['queues-total'] > overview.queues.length ? h('p', { class: 'muted' }, `Showing the first ${overview.queues.length} of ${num(overview['queues-total'])} queues (all are in GET /api/queues).`) : null,
    ];
  },
};

function queueActions(ctx: PageContext, name: string): Child {
  return [
    h('button', { 'data-action': 'purge', onclick: () => ctx.confirm(`Purge every message of queue "${name}"?`, name, () => api('POST', `/api/queues/${seg(name)}/purge`, { confirm: name })) }, 'Purge'),
    ' ',
    h('button', { class: 'danger', 'data-action': 'delete', onclick: () => ctx.confirm(`Delete queue "${name}" and its messages?`, name, () => api('DELETE', `/api/queues/${seg(name)}`, { confirm: name })) }, 'Delete'),
  ];
}

/**
 * The queues a move may go to, as the latest overview names them (all but `name`), in the
 * move form's list; replaced only when they changed (options replaced under an open list
 * would flicker). The form is drawn once, the page at every overview: both call this.
 */
function offerMoveTargets(list: HTMLElement, ctx: PageContext, name: string): void {
  const names = ctx.overview.queues.map((q) => String(q.name)).filter((q) => q !== name);
  const joined = names.join('\n');
  if (offeredNames.get(list) === joined) return;
  offeredNames.set(list, joined);
  replace(list, names.map((q) => h('option', { value: q })));
}

/** What each move form's list offers now (kept beside it, not in a DOM attribute: a thousand names). */
const offeredNames = new WeakMap<HTMLElement, string>();

/**
 * Move this queue's available messages to another (MOVE, as tandem queue move): above
 * all a dead-letter queue replayed to the queue its messages came from. The target is
 * typed, offered the queues the page knows; the move asks for this queue's name first.
 */
function moveForm(ctx: PageContext, name: string): Child {
  if (!ctx.admin) return null;
  const offered = h('datalist', { id: 'move-to-queues' });
  offerMoveTargets(offered, ctx, name);
  const to = h('input', { id: 'move-to', placeholder: 'to queue', required: true, maxlength: 1024, list: 'move-to-queues' }) as HTMLInputElement;
  const count = h('input', { id: 'move-count', type: 'number', min: 1, step: 1, placeholder: 'all' }) as HTMLInputElement;
  return h(
    'form',
    {
      class: 'inline',
      id: 'move-form',
      onsubmit: (e: Event) => {
        e.preventDefault();
        const target = to.value;
        const body: Row = { confirm: name, to: target };
        if (count.value !== '') body.count = count.value;
        const how = count.value === '' ? 'the available messages' : `at most ${count.value} available messages`;
        ctx.confirm(`Move ${how} of queue "${name}" to queue "${target}"?`, name, async () => {
          const r = await api<{ moved: number }>('POST', `/api/queues/${seg(name)}/move`, body);
          return `${r.moved} messages moved to ${target}`;
        });
      },
    },
    h('strong', {}, 'Move messages'),
    to,
    offered,
    count,
    h('button', { type: 'submit', id: 'move-messages' }, 'Move\u2026'),
  );
}

export function queueDetailPage(name: string): Page {
  return {
    title: `Queue ${name}`,
    nav: 'queues',
    forms: (ctx) => moveForm(ctx, name),
    render(ctx) {
      const targets = document.getElementById('move-to-queues');
      if (targets) offerMoveTargets(targets, ctx, name);
      const q = ctx.overview.queues.find((x) => x.name === name);
      if (!q) return [h('h1', {}, 'Queue ', h('code', {}, name)), h('p', { id: 'queue-missing' }, 'There is no such queue (any more). ', h('a', { href: '#/queues' }, 'All queues'))];
      const hist = ctx.queueHistory(name);
      return [
        h('h1', {}, 'Queue ', h('code', { id: 'queue-title' }, name)),
        ctx.admin ? h('p', {}, queueActions(ctx, name)) : null,
        h('h2', {}, 'Rates (messages/s, last minutes)'),
        h('div', { class: 'legend' }, h('span', { class: 'k0' }, '— in'), h('span', { class: 'k1' }, '— out')),
        lineChart([{ label: 'in/s', values: hist.map((s) => Number(s['in-rate'] ?? 0)) }, { label: 'out/s', values: hist.map((s) => Number(s['out-rate'] ?? 0)) }], { id: 'queue-rate-chart' }),
        h('h2', {}, 'Depth'),
        lineChart([{ label: 'depth', values: hist.map((s) => Number(s.depth ?? 0)) }], { id: 'queue-depth-chart', height: 80 }),
        h('h2', {}, 'Attributes'),
        h('dl', { class: 'attrs' }, Object.entries(q).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v === null || v === undefined ? '–' : typeof v === 'object' ? JSON.stringify(v) : String(v))])),
      ];
    },
  };
}

export const connectionsPage: Page = {
  title: 'Connections',
  nav: 'connections',
  render(ctx) {
    const rows = ctx.overview.connections.map((c) => {
      const id = String(c.id);
      return h(
        'tr',
        { 'data-connection': id },
        h('td', {}, id),
        h('td', {}, String(c.container ?? '–')),
        h('td', {}, String(c.user ?? 'anonymous')),
        h('td', {}, String(c.remote ?? '')),
        n(c.links),
        n(c.unsettled),
        h('td', {}, yesNo(c.admin)),
        ctx.admin
          ? h(
              'td',
              {},
              h(
                'button',
                {
                  class: 'danger',
                  'data-action': 'close',
                  // Typed, as every other destructive action: the rows move under the pointer every second.
                  onclick: () => ctx.confirm(`Close connection ${id} (${String(c.container ?? 'unknown client')} from ${String(c.remote ?? '?')})?`, id, () => api('DELETE', `/api/connections/${seg(id)}`)),
                },
                'Close',
              ),
            )
          : null,
      );
    });
    const headers = ['Id', 'Client', 'User', 'Address', 'Links', 'Unsettled', 'Admin'];
    return [h('h1', {}, 'Connections'), table('connections', ctx.admin ? [...headers, 'Actions'] : headers, rows, 'no connection')];
  },
};

const DRILL_OPTION = 'Drill: keep the old source serving this queue (it is not told; both sites then take writes)';

/** What Activate does, said before it is confirmed: the old source told to stop (the default), or left serving (a drill). */
function activateText(queue: string, source: string, drill: boolean): string {
  return drill
    ? `Activate DR copy "${queue}" as a DRILL? It stops following ${source} and serves clients here; ${source} is NOT told and may go on serving "${queue}" too, both sites taking writes (tandem dr demote it there when the drill ends).`
    : `Activate DR copy "${queue}"? It stops following ${source} and serves clients here; ${source} is told to stop serving "${queue}" as soon as it answers.`;
}

/** DR-ACTIVATE from the page, and what was done, from the broker's answer. */
async function activate(queue: string, drill: boolean): Promise<string> {
  const r = await api<{ activated: string[]; 'source-told'?: boolean; 'old-sources'?: string[] }>('POST', `/api/dr/${seg(queue)}/activate`, drill ? { confirm: queue, 'keep-source-serving': true } : { confirm: queue });
  if (r.activated.length === 0) return `DR copy "${queue}" was already active`;
  const sources = (r['old-sources'] ?? []).join(' and ') || 'the old source';
  return r['source-told']
    ? `activated DR copy "${queue}"; ${sources} is told to stop serving it`
    : `activated DR copy "${queue}" as a drill; ${sources} is NOT told and may still serve it`;
}

export const drPage: Page = {
  title: 'DR',
  nav: 'dr',
  render(ctx) {
    const rows = ctx.overview.dr.map((d) => {
      const queue = String(d.queue);
      const passive = d.state === 'passive';
      return h(
        'tr',
        { 'data-queue': queue, 'data-state': String(d.state) },
        h('td', { class: 'name' }, queue),
        h('td', {}, String(d.source || '–')),
        h('td', {}, String(d.role ?? '')),
        h('td', { class: stateClass(d.state) }, String(d.state)),
        h('td', { class: stateClass(d.link) }, String(d.link)),
        n(d['source-position']),
        n(d['applied-position']),
        n(d['lag-changes']),
        h('td', { class: 'num' }, seconds(d['lag-seconds'])),
        n(d.depth),
        ctx.admin
          ? h(
              'td',
              {},
              passive
                ? h('button', { class: 'danger', 'data-action': 'activate', onclick: () => ctx.confirm((drill) => activateText(queue, String(d.source || 'the old source'), drill), queue, (drill) => activate(queue, drill), DRILL_OPTION) }, 'Activate')
                : h('span', { class: 'muted' }, '–'),
            )
          : null,
      );
    });
    const headers = ['Queue', 'Source', 'Role', 'State', 'Link', 'Source position', 'Applied', 'Lag (changes)', 'Lag (s)', 'Depth'];
    const charts = ctx.overview.dr.map((d) => {
      const queue = String(d.queue);
      const hist = ctx.drHistory(queue);
      const id = queue.replace(/[^A-Za-z0-9_-]/g, '_');
      return h(
        'div',
        { class: 'dr-chart' },
        h('h2', {}, 'Lag of ', h('code', {}, queue), ', last minutes'),
        h('div', { class: 'legend' }, h('span', { class: 'k0' }, 'changes')),
        lineChart([{ label: 'lag (changes)', values: hist.map((s) => Number(s['lag-changes'] ?? 0)) }], { width: 640, height: 90, id: `dr-chart-${id}` }),
        h('div', { class: 'legend' }, h('span', { class: 'k0' }, 'seconds')),
        lineChart([{ label: 'lag (seconds)', values: hist.map((s) => Number(s['lag-seconds'] ?? 0)) }], { width: 640, height: 60, id: `dr-seconds-chart-${id}` }),
      );
    });
    return [
      h('h1', {}, 'Disaster recovery'),
      table('dr', ctx.admin ? [...headers, 'Actions'] : headers, rows, 'no DR copy on this broker (tandem dr add)'),
      charts,
    ];
  },
};
