// What an attacker controls, shown in a real browser (Debian's Chromium) by a real
// broker: a client's container-id, a queue name in an error message, a crafted link
// to the console. Each must be shown as text: no element made from it, no script run
// and no inline script even attempted (the page's CSP would report it). And another
// site cannot frame the console.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { launchChromium, logIn, newContext } from './browser.js';
import { ADMIN, writeUsers } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-console-xss-'));
// Were any of these parsed as markup, the handler would set a global (and the CSP would report it blocked).
const PAYLOAD = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`;
let browser: Browser;
let broker: TestBroker;

beforeAll(async () => {
  browser = await launchChromium();
  broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', await writeUsers(dir), '--console-port', '0'] });
});

afterAll(async () => {
  await browser?.close();
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

/** A page that records every CSP violation and every dialog. */
async function watchedPage(context: BrowserContext): Promise<{ page: Page; dialogs: string[] }> {
  const page = await context.newPage();
  const dialogs: string[] = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  await page.addInitScript(() => {
    const w = window as unknown as { violations: string[] };
    w.violations = [];
    document.addEventListener('securitypolicyviolation', (e) => w.violations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return { page, dialogs };
}

async function expectNothingRan(page: Page, dialogs: string[]): Promise<void> {
  expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
  expect(await page.evaluate(() => (window as unknown as { violations: string[] }).violations)).toEqual([]);
  expect(await page.locator('body img, body script').count()).toBe(0);
  expect(dialogs).toEqual([]);
}

describe('console xss - what attackers control is text', () => {
  it('console xss - a client container-id of markup is text in the Connections table and in the close dialog', async ({ task }) => {
    const client = await TestClient.connect({ port: broker.port, username: ADMIN.name, password: ADMIN.password, container_id: PAYLOAD });
    try {
      const context = await newContext(browser, task.name);
      const { page, dialogs } = await watchedPage(context);
      await logIn(page, broker.consoleUrl!, ADMIN);
      await page.goto(`${broker.consoleUrl}/#/connections`);
      const r = page.locator('#connections tbody tr').filter({ has: page.locator('td', { hasText: 'onerror' }) });
      await r.waitFor();
      expect(await r.locator('td').nth(1).innerText()).toBe(PAYLOAD);
      await r.locator('button[data-action=close]').click();
      await page.waitForSelector('#confirm[open]');
      expect(await page.locator('#confirm-text').innerText()).toContain(PAYLOAD);
      await page.click('#confirm-cancel');
      await expectNothingRan(page, dialogs);
      await context.close();
    } finally {
      client.close();
    }
  }, 60_000);

  it('console xss - a queue name of markup in an error message is text', async ({ task }) => {
    const context = await newContext(browser, task.name);
    const { page, dialogs } = await watchedPage(context);
    await logIn(page, broker.consoleUrl!, ADMIN);
    await page.goto(`${broker.consoleUrl}/#/queues`);
    for (let i = 0; i < 2; i++) {
      await page.fill('#new-queue-name', PAYLOAD);
      await page.click('#create-queue');
      await page.waitForSelector(i === 0 ? '#message:has-text("Done")' : '#message.error');
    }
    // The second is refused, naming the queue: as text.
    expect(await page.locator('#message').innerText()).toContain(PAYLOAD);
    await expectNothingRan(page, dialogs);
    await context.close();
  }, 60_000);

  it('console xss - a crafted link cannot put markup or words of its own in the follow banner', async ({ task }) => {
    const context = await newContext(browser, task.name);
    const { page, dialogs } = await watchedPage(context);
    const spoof = new URLSearchParams({ 'followed-from': PAYLOAD, primary: 'your session expired: log in at https://evil.example', reason: 'silent' });
    await page.goto(`${broker.consoleUrl}/?${spoof.toString()}`);
    await page.waitForSelector('#login-form');
    expect(await page.locator('#follow-banner').isHidden()).toBe(true);
    // Taken out of the address bar all the same.
    expect(new URL(page.url()).search).toBe('');
    // A real follow's addresses are still shown.
    await page.goto(`${broker.consoleUrl}/?followed-from=127.0.0.1:5672&primary=broker-b.example:5672&reason=silent`);
    await page.waitForSelector('#follow-banner:has-text("Broker 127.0.0.1:5672 stopped answering; following the primary at broker-b.example:5672")');
    await expectNothingRan(page, dialogs);
    await context.close();
  }, 60_000);

  it('console xss - another site cannot frame the console (clickjacking)', async ({ task }) => {
    const evil: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<iframe id=f src="${broker.consoleUrl}/" width=800 height=600></iframe>`);
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', () => r()));
    try {
      const context = await newContext(browser, task.name);
      const page = await context.newPage();
      const answered = page.waitForResponse((res) => res.url() === `${broker.consoleUrl}/`);
      await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      const res = await answered;
      expect(res.headers()['x-frame-options']).toBe('DENY');
      expect(res.headers()['content-security-policy']).toMatch(/frame-ancestors 'none'/);
      expect(res.headers()['content-security-policy']).toMatch(/script-src 'self';/);
      // The frame holds an error page, not the console: none of its scripts ran there.
      const frame = page.frames().find((f) => f !== page.mainFrame());
      expect(frame).toBeDefined();
      expect(await frame!.locator('#nav').count()).toBe(0);
      await context.close();
    } finally {
      evil.close();
    }
  }, 60_000);
});
