// The Connections page in a real browser against a real broker: a real AMQP client
// (rhea) is listed, an admin closes it from the page after typing its id, the client
// loses its connection the way the broker ends it (the transport dropped, no close
// frame: src/amqp/server.ts closeConnection), and the row goes. A user who is not an
// admin sees no close button and is refused by the API.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import type { EventContext } from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { confirmTyped, launchChromium, logIn, newContext } from './browser.js';
import { ADMIN, READER, writeUsers } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-console-connections-'));
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

/** What the client heard of its connection's end. */
interface Ending {
  closeFrame: { condition?: string; description?: string } | undefined;
  disconnected: boolean;
  error: string | undefined;
}

function watchEnding(client: TestClient): Ending {
  const ending: Ending = { closeFrame: undefined, disconnected: false, error: undefined };
  const conn = client.connection;
  conn.on('connection_close', (ctx: EventContext) => {
    const e = (ctx.connection as unknown as { error?: { condition?: string; description?: string } }).error;
    ending.closeFrame = { condition: e?.condition, description: e?.description };
  });
  conn.on('disconnected', (ctx: EventContext) => {
    ending.disconnected = true;
    ending.error = (ctx as unknown as { error?: Error }).error?.message;
  });
  return ending;
}

/** The row of the connection whose client container is `container`, once the page lists it. */
async function rowOf(page: Page, container: string) {
  const r = page.locator('#connections tbody tr').filter({ has: page.locator('td', { hasText: container }) });
  await r.waitFor({ timeout: 10_000 });
  return r;
}

const containerOf = (c: TestClient) => (c.connection as unknown as { options: { container_id: string } }).options.container_id;

describe('console connections - close from the page', () => {
  it('console connections - an admin closes a client connection after typing its id; the client is cut off and the row goes', async ({ task }) => {
    const client = await TestClient.connect({ port: broker.port, username: READER.name, password: READER.password });
    const ending = watchEnding(client);
    // A link too, so the page's link count is the client's.
    await client.openReceiver('listed-queue');
    const container = containerOf(client);
    const other = await TestClient.connect({ port: broker.port, username: READER.name, password: READER.password });

    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    page.on('dialog', (d) => void d.dismiss());
    await logIn(page, `${broker.consoleUrl}/#/connections`, ADMIN);
    const r = await rowOf(page, container);
    const id = (await r.getAttribute('data-connection'))!;
    expect(id).toBeTruthy();
    expect(await r.innerText()).toContain(READER.name);
    await waitFor(async () => (await r.locator('td.num').first().innerText()) === '1', { timeout: 10_000, name: 'one link listed' });

    await r.locator('button[data-action=close]').click();
    await page.waitForSelector('#confirm[open]');
    expect(await page.locator('#confirm-text').innerText()).toContain(container);
    // A wrong id does not enable the button; cancelling closes nothing.
    await page.fill('#confirm-input', `${id}x`);
    expect(await page.locator('#confirm-ok').isDisabled()).toBe(true);
    await page.click('#confirm-cancel');
    expect(await r.count()).toBe(1);
    expect(client.closed).toBe(false);

    await r.locator('button[data-action=close]').click();
    await confirmTyped(page, id);
    await page.waitForSelector('#message:has-text("Done")');
    await waitFor(() => ending.disconnected, { timeout: 10_000, name: 'client disconnected' });
    // What the broker sends: its end of the socket, no close frame (clients reconnect on that).
    expect(ending.closeFrame).toBeUndefined();
    expect(client.closed).toBe(true);
    await r.waitFor({ state: 'detached', timeout: 10_000 });
    // Only that one.
    await rowOf(page, containerOf(other));
    expect(other.closed).toBe(false);
    await waitFor(() => broker.stderr.includes(`audit: DELETE connection '${id}' by ${ADMIN.name} via console`), { name: 'audit line' });
    other.close();
    await context.close();
  }, 60_000);

  it('console connections - a user who is not an admin sees the connection with no close button, and the API answers 403', async ({ task }) => {
    const client = await TestClient.connect({ port: broker.port, username: READER.name, password: READER.password });
    const ending = watchEnding(client);
    const container = containerOf(client);
    const context = await newContext(browser, task.name);
    const page = await context.newPage();
    await logIn(page, `${broker.consoleUrl}/#/connections`, READER);
    const r = await rowOf(page, container);
    const id = (await r.getAttribute('data-connection'))!;
    expect(await page.locator('button[data-action]').count()).toBe(0);
    expect(await page.locator('#connections th').allInnerTexts()).not.toContain('Actions');
    // Even with its own valid CSRF token.
    const answer = await page.evaluate(async (connection) => {
      const s = await (await fetch('/api/session')).json();
      const res = await fetch(`/api/connections/${encodeURIComponent(connection)}`, { method: 'DELETE', headers: { 'x-csrf-token': s.csrf } });
      return { status: res.status, body: await res.json() };
    }, id);
    expect(answer.status).toBe(403);
    expect(answer.body.error.code).toBe('TANDEM_ERR_UNAUTHORIZED');
    // Still connected, still listed: a round trip on the connection proves it.
    expect((await client.send('after-refusal', ['still-here']))[0]!.state).toBe('accepted');
    expect(ending.disconnected).toBe(false);
    expect(await r.count()).toBe(1);
    client.close();
    await context.close();
  }, 60_000);
});
