// The web console in a real browser (Debian's Chromium, headless) against real
// brokers: logging in, queues created and purged from the page, what a user who is
// not an admin sees, hostile queue names and cross-site forms, a 3-broker cluster
// followed through a kill -9 and a promotion without a reload, and a DR copy whose
// lag is charted while traffic flows and which is activated from the page.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { drStatus, receive, send } from '../dr/helpers.js';
import { ADMIN, READER, ThrottledProxy, writeUsers } from './helpers.js';
import { confirmTyped, docScreenshot, launchChromium, logIn, newContext, row } from './browser.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const XSS = '<img src=x onerror=alert(1)>';
const dir = mkdtempSync(join(tmpdir(), 'tandem-console-browser-'));
let browser: Browser;

beforeAll(async () => {
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('console in a browser - one broker with logins', () => {
  let broker: TestBroker;
  const auth = { user: ADMIN.name, password: ADMIN.password };
  const depth = async (queue: string) => ((await manage(broker.port, 'READ', 'queue', queue, {}, auth)) as { depth: number }).depth;

  beforeAll(async () => {
    const users = await writeUsers(dir);
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--console-port', '0'] });
  });

  it('console browser - log in, create a queue named like markup (shown as text), purge it after typing its name', async ({ task }) => {
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    let dialogs = 0;
    page.on('dialog', (d) => {
      dialogs++;
      void d.dismiss();
    });
    await logIn(page, broker.consoleUrl!, ADMIN);
    expect(await page.locator('#auth-off').isHidden()).toBe(true);
    await page.goto(`${broker.consoleUrl}/#/queues`);
    await page.fill('#new-queue-name', XSS);
    await page.click('#create-queue');
    const r = row(page, 'data-queue', XSS);
    await r.waitFor();
    expect(await r.locator('td.name').innerText()).toBe(XSS);
    // Text, not markup: no image element anywhere, no script ran.
    expect(await page.locator('main img').count()).toBe(0);
    expect(((await manage(broker.port, 'READ', 'queue', XSS, {}, auth)) as { durable: boolean }).durable).toBe(true);

    const c = await TestClient.connect({ port: broker.port, username: ADMIN.name, password: ADMIN.password });
    await c.send(XSS, ['a', 'b', 'c', 'd', 'e']);
    c.close();
    await page.waitForFunction((name) => document.querySelector(`tr[data-queue=${JSON.stringify(name)}] td.num`)?.textContent === '5', XSS);
    await r.locator('button[data-action=purge]').click();
    // Confirm stays disabled until the name is typed exactly.
    await page.fill('#confirm-input', XSS.slice(0, -1));
    expect(await page.locator('#confirm-ok').isDisabled()).toBe(true);
    await confirmTyped(page, XSS);
    await page.waitForSelector('#message:has-text("Done")');
    expect(await depth(XSS)).toBe(0);
    await page.waitForFunction((name) => document.querySelector(`tr[data-queue=${JSON.stringify(name)}] td.num`)?.textContent === '0', XSS);

    // Its detail page: the name as text in the title, a rate chart.
    await r.locator('td.name a').click();
    await page.waitForSelector('#queue-rate-chart');
    expect(await page.locator('#queue-title').innerText()).toBe(XSS);
    expect(await page.locator('main img').count()).toBe(0);
    expect(dialogs).toBe(0);
    await context.close();
  }, 60_000);

  it('console browser - a dead-letter queue replayed from its page: the target typed, the queue name typed to confirm, the messages back in order', async ({ task }) => {
    await manage(broker.port, 'CREATE', 'queue', 'replay.dlq', { durable: true }, auth);
    const c = await TestClient.connect({ port: broker.port, username: ADMIN.name, password: ADMIN.password });
    await c.send('replay.dlq', ['r1', 'r2', 'r3', 'r4']);
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    await logIn(page, broker.consoleUrl!, ADMIN);
    await page.goto(`${broker.consoleUrl}/#/queues/replay.dlq`);
    await page.waitForSelector('#move-form');
    // A queue made after the page was drawn is offered once an overview names it; this one never is.
    await manage(broker.port, 'CREATE', 'queue', 'replay', { durable: true }, auth);
    await page.locator('#move-to-queues option[value="replay"]').waitFor({ state: 'attached' });
    const offered = await page.locator('#move-to-queues option').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value));
    expect(offered).toContain('replay');
    expect(offered).not.toContain('replay.dlq');
    await page.fill('#move-to', 'replay');
    await page.fill('#move-count', '3');
    await page.click('#move-messages');
    expect(await page.locator('#confirm-text').innerText()).toBe('Move at most 3 available messages of queue "replay.dlq" to queue "replay"?');
    await confirmTyped(page, 'replay.dlq');
    await page.waitForSelector('#message:has-text("3 messages moved to replay")');
    expect(await depth('replay')).toBe(3);
    expect(await depth('replay.dlq')).toBe(1);
    const got = await c.receiveAndAccept('replay', 3);
    expect(got.map((m) => String(m.body))).toEqual(['r1', 'r2', 'r3']);
    c.close();
    await context.close();
  }, 60_000);

  it('console browser - a user who is not an admin sees no action buttons, and the API answers 403', async ({ task }) => {
    await manage(broker.port, 'CREATE', 'queue', 'readers-view', {}, auth);
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    await logIn(page, broker.consoleUrl!, READER);
    expect(await page.locator('#who').innerText()).toContain('read-only');
    await page.goto(`${broker.consoleUrl}/#/queues`);
    await row(page, 'data-queue', 'readers-view').waitFor();
    expect(await page.locator('#create-queue-form').count()).toBe(0);
    expect(await page.locator('button[data-action]').count()).toBe(0);
    await page.goto(`${broker.consoleUrl}/#/connections`);
    await page.waitForSelector('#connections');
    expect(await page.locator('button[data-action]').count()).toBe(0);
    // Even with its own valid CSRF token, a change is refused.
    const answer = await page.evaluate(async () => {
      const s = await (await fetch('/api/session')).json();
      const r = await fetch('/api/queues/readers-view/purge', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': s.csrf }, body: JSON.stringify({ confirm: 'readers-view' }) });
      return { status: r.status, body: await r.json() };
    });
    expect(answer.status).toBe(403);
    expect(answer.body.error.code).toBe('TANDEM_ERR_UNAUTHORIZED');
    await context.close();
  }, 60_000);

  it('console browser - a form on another site that posts to the console is refused, and the queue keeps its messages', async ({ task }) => {
    await manage(broker.port, 'CREATE', 'queue', 'victim', {}, auth);
    const c = await TestClient.connect({ port: broker.port, username: ADMIN.name, password: ADMIN.password });
    await c.send('victim', ['keep-1', 'keep-2']);
    c.close();
    const target = `${broker.consoleUrl}/api/queues/victim/purge`;
    // Another origin (another port is another origin, though the same site: SameSite lets the cookie go).
    const evil: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<form id=f method=POST action="${target}" enctype="text/plain"><input name='{"confirm":"victim","x":"' value='"}'></form><script>document.getElementById('f').submit()</script>`);
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', () => r()));
    try {
      const context = await newContext(browser, task.name);
      const page = await context.newPage();
      await logIn(page, broker.consoleUrl!, ADMIN);
      const refused = page.waitForResponse((res) => res.url() === target);
      await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      const res = await refused;
      expect(res.status()).toBe(403);
      expect((await res.json()).error.code).toBe('TANDEM_ERR_CSRF');
      expect(await depth('victim')).toBe(2);
      await context.close();
    } finally {
      evil.close();
    }
  }, 60_000);
});

describe('console in a browser - a 3-broker cluster', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--console-port', '0']);
    const promoted = await cluster.promote(0);
    expect(promoted.code, promoted.stderr).toBe(0);
    await cluster.waitState(1, 'ready');
    await cluster.waitState(2, 'ready');
  });

  afterAll(async () => {
    await cluster?.stopAll();
  });

  it('console browser - a backup console shows every broker role; after kill -9 of the primary and a promotion the page shows the new primary without a reload', async ({ task }) => {
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    const url = cluster.brokers[1]!.consoleUrl!;
    await page.goto(`${url}/#/cluster`);
    // auth=no (loopback, no config file): no login, and the page says so.
    await page.waitForSelector('#auth-off', { state: 'visible' });
    const brokerRow = (i: number) => row(page, 'data-address', cluster.address(i));
    await waitFor(async () => (await brokerRow(0).getAttribute('data-state')) === 'active', { timeout: 15_000, name: 'primary shown' });
    for (const i of [1, 2]) {
      await waitFor(async () => (await brokerRow(i).getAttribute('data-state')) === 'ready', { timeout: 15_000, name: `backup ${i} shown ready` });
      expect(await brokerRow(i).getAttribute('data-role')).toBe('backup');
    }
    expect(await brokerRow(0).getAttribute('data-role')).toBe('primary');
    expect(await page.locator('#backup-banner').innerText()).toContain(cluster.address(0));
    expect(await page.locator('#primary-console-link').getAttribute('href')).toBe(`${cluster.brokers[0]!.consoleUrl}/`);
    expect(await page.locator('.cluster-warning').count()).toBe(0);
    await docScreenshot(page, 'console-cluster.png');

    // A reload would lose this.
    await page.evaluate(() => ((window as unknown as { stillHere: boolean }).stillHere = true));
    await cluster.kill(0);
    await waitFor(async () => (await brokerRow(0).getAttribute('data-role')) === 'unreachable', { timeout: 10_000, name: 'dead primary shown unreachable' });
    await page.waitForSelector('.cluster-warning:has-text("no broker is primary")');
    const promoted = await cluster.promote(2);
    expect(promoted.code, promoted.stderr).toBe(0);
    await waitFor(async () => (await brokerRow(2).getAttribute('data-role')) === 'primary', { timeout: 10_000, name: 'new primary shown' });
    await waitFor(async () => (await page.locator('#backup-banner').innerText()).includes(cluster.address(2)), { timeout: 10_000, name: 'banner names the new primary' });
    expect(await page.evaluate(() => (window as unknown as { stillHere?: boolean }).stillHere)).toBe(true);
    await context.close();
  }, 90_000);
});

describe('console in a browser - DR', () => {
  let source: TestBroker;
  let copy: TestBroker;
  let link: ThrottledProxy;

  beforeAll(async () => {
    source = await TestBroker.start();
    copy = await TestBroker.start({ args: ['--console-port', '0'] });
    link = await ThrottledProxy.start(source.port);
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'orders', '--source', `127.0.0.1:${link.port}`, '-b', copy.url]);
    expect(add.code, add.stderr).toBe(0);
  });

  afterAll(() => link?.close());

  it('console browser - the DR page charts a copy lag while traffic flows, and activate from the page opens the copy to clients', async ({ task }) => {
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    await page.goto(`${copy.consoleUrl}/#/dr`);
    const r = row(page, 'data-queue', 'orders');
    await r.waitFor();
    await waitFor(async () => (await r.locator('td.state').nth(1).innerText()) === 'connected', { timeout: 15_000, name: 'DR link connected' });
    // Clients are refused while the copy is passive.
    expect(await receive(copy.port, 'orders', 1, { timeoutMs: 3000 }).then(() => 'served', (e: Error) => e.message)).toMatch(/passive|DR|refused/i);

    const chart = page.locator('svg#dr-chart-orders');
    const samples = async () => Number(await chart.getAttribute('data-samples'));
    const before = await samples();
    // The copy keeps up with a sender on this machine to within a sample: the link to
    // its source is slowed (a long, thin line between sites) so that it falls behind
    // while the traffic flows, and the chart must show that lag without a reload.
    link.rate = 16 * 1024;
    const sent = 20_000;
    const sending = send(source.port, 'orders', Array.from({ length: sent }, (_, i) => `o${i}`), { window: 2000 });
    await waitFor(async () => Number(await chart.getAttribute('data-max')) > 100, { timeout: 30_000, interval: 100, name: 'lag charted' });
    const seen = await samples();
    await waitFor(async () => (await samples()) >= seen + 5, { timeout: 15_000, interval: 200, name: 'more samples' });
    await docScreenshot(page, 'console-dr.png');
    await sending;
    link.rate = undefined;
    expect(await samples()).toBeGreaterThan(before);
    await waitFor(async () => (await drStatus(copy.port))[0]!['applied-position'] === (await drStatus(copy.port))[0]!['source-position'] && (await drStatus(copy.port))[0]!.depth === sent, { timeout: 30_000, name: 'copy caught up' });

    await r.locator('button[data-action=activate]').click();
    // The safe default, said before it is done: the old source is told.
    await page.waitForSelector('#confirm[open]');
    expect(await page.locator('#confirm-option-input').isChecked()).toBe(false);
    expect(await page.locator('#confirm-text').innerText()).toContain('is told to stop serving "orders"');
    await confirmTyped(page, 'orders');
    await page.waitForSelector('#message:has-text("Done")');
    expect(await page.locator('#message').innerText()).toContain('is told to stop serving it');
    await waitFor(async () => (await r.getAttribute('data-state')) === 'active', { timeout: 10_000, name: 'shown active' });
    expect(await r.locator('button[data-action=activate]').count()).toBe(0);
    // Open to clients now: the first message is the first sent.
    expect(await receive(copy.port, 'orders', 1)).toEqual(['o0']);
    await waitFor(() => copy.stderr.includes("audit: DR-ACTIVATE"), { name: 'audit line' });
    expect(copy.stderr).toMatch(/"via":"console"/);
    await context.close();
  }, 90_000);

  it('console browser - activate as a drill, ticked in the dialog (off by default, and again at each opening): the dialog and the outcome say the old source is not told', async ({ task }) => {
    expect((await tandem(['queue', 'add', 'drill-orders', '--durable', '-b', source.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'drill-orders', '--source', source.url, '-b', copy.url]);
    expect(add.code, add.stderr).toBe(0);
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    await page.goto(`${copy.consoleUrl}/#/dr`);
    const r = row(page, 'data-queue', 'drill-orders');
    await r.waitFor();
    const open = async () => {
      await r.locator('button[data-action=activate]').click();
      await page.waitForSelector('#confirm[open]');
    };
    await open();
    const option = page.locator('#confirm-option-input');
    expect(await page.locator('#confirm-option').isVisible()).toBe(true);
    expect(await option.isChecked()).toBe(false);
    expect(await page.locator('#confirm-text').innerText()).toContain('is told to stop serving');
    await option.check();
    const drillText = await page.locator('#confirm-text').innerText();
    expect(drillText).toContain('as a DRILL');
    expect(drillText).toContain('is NOT told');
    // Cancelled, then opened again: unchecked again.
    await page.click('#confirm-cancel');
    await open();
    expect(await option.isChecked()).toBe(false);
    expect(await page.locator('#confirm-text').innerText()).not.toContain('DRILL');
    await option.check();
    await confirmTyped(page, 'drill-orders');
    await page.waitForSelector('#message:has-text("Done")');
    expect(await page.locator('#message').innerText()).toContain('as a drill');
    expect(await page.locator('#message').innerText()).toContain('is NOT told');
    await waitFor(async () => (await r.getAttribute('data-state')) === 'active', { timeout: 10_000, name: 'shown active' });
    await waitFor(() => copy.stderr.includes('NOT told (keep-source-serving'), { name: 'drill logged' });
    // Other dialogs show no such option.
    await page.goto(`${copy.consoleUrl}/#/queues`);
    await row(page, 'data-queue', 'drill-orders').locator('button[data-action=purge]').click();
    await page.waitForSelector('#confirm[open]');
    expect(await page.locator('#confirm-option').isHidden()).toBe(true);
    await page.click('#confirm-cancel');
    await context.close();
  }, 60_000);
});
