// Headless Chromium for the console tests: Debian's /usr/bin/chromium driven by
// playwright-core (never a downloaded browser). Each test's pages are kept so a
// failure leaves a screenshot of each under test-results/console/.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { onTestFailed } from 'vitest';
import { repoRoot } from '../helpers/broker.js';

export const CHROMIUM = '/usr/bin/chromium';
export const OUTPUT_DIR = join(repoRoot, 'test-results', 'console');

export function launchChromium(): Promise<Browser> {
  // Chromium's sandbox refuses to run as root; the tests run as root on CI.
  const args = process.getuid?.() === 0 ? ['--no-sandbox'] : [];
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args, timeout: 30_000 });
}

/** A fresh context (its own cookies) whose pages are screenshotted if the current test fails. */
export async function newContext(browser: Browser, testName: string): Promise<BrowserContext> {
  const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
  context.setDefaultTimeout(15_000);
  onTestFailed(async () => {
    const dir = join(OUTPUT_DIR, testName.replace(/[^A-Za-z0-9_-]+/g, '_'));
    mkdirSync(dir, { recursive: true });
    for (const [i, page] of context.pages().entries()) {
      const name = `${i}-${(page.url().split('#')[1] ?? 'page').replace(/[^A-Za-z0-9_-]+/g, '_') || 'page'}.png`;
      await page.screenshot({ path: join(dir, name), fullPage: true }).catch(() => undefined);
    }
  });
  return context;
}

/** Save a screenshot for the README (only when TANDEM_CONSOLE_SCREENSHOTS=1: the committed ones stay put). */
export async function docScreenshot(page: Page, file: string): Promise<void> {
  if (process.env.TANDEM_CONSOLE_SCREENSHOTS !== '1') return;
  await page.screenshot({ path: join(repoRoot, 'docs', file), fullPage: false });
}

/** Open the console at `url` and log in through its form. */
export async function logIn(page: Page, url: string, user: { name: string; password: string }): Promise<void> {
  await page.goto(url);
  await submitLogin(page, user);
}

/** Fill and send the login form the page shows now. */
export async function submitLogin(page: Page, user: { name: string; password: string }): Promise<void> {
  await page.fill('#login-user', user.name);
  await page.fill('#login-password', user.password);
  await page.click('#login-submit');
  await page.waitForSelector(`#who:has-text("${user.name}")`);
}

/** Type the name into the confirmation dialog and confirm. */
export async function confirmTyped(page: Page, name: string): Promise<void> {
  await page.waitForSelector('#confirm[open]');
  await page.fill('#confirm-input', name);
  await page.click('#confirm-ok');
}

/** The table row whose `attr` is `value`. */
export const row = (page: Page, attr: string, value: string) => page.locator(`tr[${attr}=${JSON.stringify(value)}]`);
