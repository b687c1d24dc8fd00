// The console follows the primary: a page open on the primary's own console, whose
// broker is killed -9, finds the promoted backup through the other consoles' GET
// /api/role and moves to its console by itself, where (auth=yes, cookies are per
// origin) it asks for a login and then shows the cluster from the new primary.
// Real brokers (3, consoles on all three), Debian's Chromium.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { HA_PASSWORD, HA_USER, haIdentity } from '../helpers/ha-identity.js';
import { launchChromium, logIn, newContext, row, submitLogin } from './browser.js';
import { ADMIN, READER, writeUsers } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-console-follow-'));
let browser: Browser;
let cluster: TestCluster;

beforeAll(async () => {
  browser = await launchChromium();
  const identity = await haIdentity(dir);
  // The same users file on every broker: the brokers' own identity and two people.
  const users = await writeUsers(dir, [ADMIN, READER, { name: HA_USER, role: 'admin', password: HA_PASSWORD }]);
  cluster = await TestCluster.start(3, ['--auth', 'yes', '--users-file', users, '--ha-username', HA_USER, '--ha-password-file', identity.passwordFile, '--console-port', '0'], undefined, { cliUser: HA_USER });
  const promoted = await cluster.promote(0);
  expect(promoted.code, promoted.stderr).toBe(0);
  await cluster.waitState(1, 'ready');
  await cluster.waitState(2, 'ready');
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await cluster?.stopAll();
  rmSync(dir, { recursive: true, force: true });
});

describe('console follow - a 3-broker cluster with logins', () => {
  it('console follow - GET /api/role needs no session and only pages of the cluster hosts may read it', async () => {
    const base = cluster.brokers[1]!.consoleUrl!;
    // A page of another console of the cluster (another port of a cluster host).
    await waitFor(async () => (await (await fetch(`${base}/api/role`)).json()).address === cluster.address(1), { timeout: 10_000, name: 'broker 1 knows itself' });
    const fromPeer = await fetch(`${base}/api/role`, { headers: { origin: cluster.brokers[0]!.consoleUrl! } });
    expect(fromPeer.status).toBe(200);
    expect(fromPeer.headers.get('access-control-allow-origin')).toBe(cluster.brokers[0]!.consoleUrl);
    expect(fromPeer.headers.get('access-control-allow-credentials')).toBeNull();
    expect(fromPeer.headers.get('vary')).toMatch(/Origin/);
    // Only the role: nothing a login would be needed for.
    expect(await fromPeer.json()).toEqual({ address: cluster.address(1), state: 'ready', epoch: expect.any(Number), primary: false });
    for (const origin of ['http://evil.example', 'http://127.0.0.1.evil.example:8080', 'null', 'http://127.0.0.1:1/x', 'file://', 'http://localhost:1', `${'x'.repeat(600)}`]) {
      const r = await fetch(`${base}/api/role`, { headers: { origin } });
      expect(r.status, origin).toBe(200);
      expect(r.headers.get('access-control-allow-origin'), origin).toBeNull();
    }
    // The pages may ask the cluster's hosts, nowhere else.
    const page = await fetch(`${base}/`);
    expect(page.headers.get('content-security-policy')).toMatch(/connect-src 'self' http:\/\/127\.0\.0\.1:\* https:\/\/127\.0\.0\.1:\*;/);
    // Everything else still needs a login.
    expect((await fetch(`${base}/api/cluster`)).status).toBe(401);
  });

  it('console follow - a page on the primary console moves by itself to the promoted backup console after kill -9, and logs in there', async ({ task }) => {
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    const [first, , second] = [0, 1, 2].map((i) => cluster.brokers[i]!.consoleUrl!);
    await logIn(page, `${first}/#/cluster`, ADMIN);
    const brokerRow = (i: number) => row(page, 'data-address', cluster.address(i));
    await waitFor(async () => (await brokerRow(0).getAttribute('data-role')) === 'primary', { timeout: 15_000, name: 'primary shown' });
    // The page must know the other consoles before it can follow them.
    await waitFor(async () => (await page.locator('a.console-link').count()) === 2, { timeout: 15_000, name: 'other consoles known' });

    await cluster.kill(0);
    await page.waitForSelector('#lost-banner:has-text("Looking for the primary")', { timeout: 15_000 });
    // No broker is primary: there is nowhere to go yet.
    expect(page.url().startsWith(first)).toBe(true);

    const promoted = await cluster.promote(2);
    expect(promoted.code, promoted.stderr).toBe(0);
    // The test never navigates: the page goes to the new primary's console itself.
    await page.waitForURL((u) => u.origin === new URL(second).origin, { timeout: 20_000 });
    // Another origin, another cookie: a login, with the reason on the page.
    await page.waitForSelector('#login-form');
    const banner = page.locator('#follow-banner');
    expect(await banner.innerText()).toContain(`Broker ${cluster.address(0)} stopped answering; following the primary at ${cluster.address(2)}`);
    await submitLogin(page, ADMIN);
    // Back on the route it was following, the address bar without the follow's parameters.
    expect(new URL(page.url()).hash).toBe('#/cluster');
    expect(new URL(page.url()).search).toBe('');
    await waitFor(async () => (await brokerRow(2).getAttribute('data-role')) === 'primary', { timeout: 15_000, name: 'new primary shown' });
    expect(await brokerRow(2).innerText()).toContain('(this broker)');
    expect(await brokerRow(0).getAttribute('data-role')).toBe('unreachable');
    expect(await page.locator('#backup-banner').count()).toBe(0);
    expect(await banner.isVisible()).toBe(true);
    await context.close();
  }, 90_000);

  it('console follow - a page whose primary comes back as a backup (restarted before the page gave up) goes where the primary went', async ({ task }) => {
    // From the test before: broker 0 is dead, 2 the primary, 1 its backup.
    await cluster.waitState(1, 'ready');
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    const [one, two] = [1, 2].map((i) => cluster.brokers[i]!.consoleUrl!);
    const consolePort = cluster.brokers[2]!.consolePort!;
    await logIn(page, `${two}/#/cluster`, ADMIN);
    const brokerRow = (i: number) => row(page, 'data-address', cluster.address(i));
    await waitFor(async () => (await brokerRow(2).getAttribute('data-role')) === 'primary', { timeout: 15_000, name: 'primary shown' });
    await waitFor(async () => (await page.locator('a.console-link').count()) === 2, { timeout: 15_000, name: 'other consoles known' });

    await cluster.kill(2);
    // Back on the same console port, before any broker is primary: its page answers again.
    await cluster.startBroker(2, ['--console-port', String(consolePort)]);
    // Its sessions died with it: the page asks for a login on its own console.
    await page.waitForSelector('#login-form', { timeout: 20_000 });
    await submitLogin(page, ADMIN);
    await waitFor(async () => (await brokerRow(2).getAttribute('data-role')) === 'backup', { timeout: 15_000, name: 'this broker shown as a backup' });
    // No primary anywhere: it stays.
    expect(new URL(page.url()).origin).toBe(new URL(two).origin);

    const promoted = await cluster.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await page.waitForURL((u) => u.origin === new URL(one).origin, { timeout: 20_000 });
    await page.waitForSelector('#login-form');
    expect(await page.locator('#follow-banner').innerText()).toContain(`Broker ${cluster.address(2)} is a backup now; following the primary at ${cluster.address(1)}`);
    await submitLogin(page, ADMIN);
    await waitFor(async () => (await brokerRow(1).getAttribute('data-role')) === 'primary', { timeout: 15_000, name: 'new primary shown' });
    expect(await brokerRow(1).innerText()).toContain('(this broker)');
    await context.close();
  }, 90_000);
});
