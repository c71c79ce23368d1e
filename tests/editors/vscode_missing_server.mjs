// VS Code (code-server) with an interpreter that lacks the language server: opening Python files shows one
// message naming the interpreter and the install command, not an error per file.
// Usage: node vscode_missing_server.mjs '<json>' with url, chromium, files (names to open), screenshot.
import { chromium } from 'playwright-core';

const args = JSON.parse(process.argv[2]);
const CHROMIUM_FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
];
const normalize = (text) => (text ?? '').replace(/\u00a0/g, ' ');

async function main() {
  const result = { ok: false };
  const browser = await chromium.launch({ executablePath: args.chromium, args: CHROMIUM_FLAGS, headless: true });
  try {
    const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
    await page.goto(args.url, { waitUntil: 'domcontentloaded', timeout: 60000 });
    await page.locator('.monaco-workbench').waitFor({ timeout: 60000 });
    await page.locator('.monaco-workbench').click({ position: { x: 700, y: 500 } });
    for (const file of args.files) {
      await page.keyboard.press('Control+P');
      await page.locator('.quick-input-widget input').waitFor({ timeout: 20000 });
      await page.keyboard.type(file, { delay: 20 });
      await page.locator('.quick-input-list .monaco-list-row').first().waitFor({ timeout: 20000 });
      await page.keyboard.press('Enter');
      await page.locator('.tabs-container .tab').filter({ hasText: file }).first().waitFor({ timeout: 20000 });
      await page.waitForTimeout(3000); // time for a (wrong) message per file to show up
    }
    const toasts = page.locator('.notifications-toasts .notification-toast');
    await page.locator('.notifications-toasts .notification-toast', { hasText: 'fuse-all' }).first().waitFor({ timeout: 30000 });
    await page.waitForTimeout(2000);
    result.messages = (await toasts.allInnerTexts()).map(normalize);
    await page.screenshot({ path: args.screenshot });
    result.ok = true;
  } catch (error) {
    result.error = String(error && error.stack ? error.stack : error);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

await main();
