// Drives VS Code (code-server) in headless Chromium the way a user would: open a file with quick
// open, wait for the fuse-all code lens, move the mouse over a function name until the hover shows.
// Usage: node vscode_hover.mjs '<json>' with url, chromium, userDataDir, file, lineText, word,
// expect (texts the hover must all contain), lensPattern, screenshot. Prints one JSON line.
import { chromium } from 'playwright-core';

const args = JSON.parse(process.argv[2]);
const CHROMIUM_FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
];
// Monaco renders spaces as U+00A0.
const normalize = (text) => (text ?? '').replace(/\u00a0/g, ' ');

async function hoverWord(page, lineText, word) {
  const line = page.locator('.monaco-editor .view-lines .view-line').filter({ hasText: lineText }).first();
  await line.waitFor({ timeout: 30000 });
  const token = line.locator('span > span').filter({ hasText: new RegExp(`^${word}$`) }).first();
  const box = await token.boundingBox();
  if (!box) throw new Error(`no box for ${word}`);
  // Leave (to the title bar, where nothing hovers) and come back so every attempt is a fresh hover.
  await page.mouse.move(box.x, 5);
  await page.waitForTimeout(150);
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
}

async function main() {
  const result = { ok: false, steps: [] };
  const started = Date.now();
  const step = (name) => result.steps.push(`${name} ${((Date.now() - started) / 1000).toFixed(1)}s`);
  const browser = await chromium.launch({ executablePath: args.chromium, args: CHROMIUM_FLAGS, headless: true });
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const page = await context.newPage();
    await page.goto(args.url, { waitUntil: 'domcontentloaded', timeout: 60000 });
    await page.locator('.monaco-workbench').waitFor({ timeout: 60000 });
    step('workbench');

    await page.locator('.monaco-workbench').click({ position: { x: 700, y: 500 } });
    await page.keyboard.press('Control+P');
    await page.locator('.quick-input-widget input').waitFor({ timeout: 20000 });
    await page.keyboard.type(args.file, { delay: 20 });
    await page.locator('.quick-input-list .monaco-list-row').first().waitFor({ timeout: 20000 });
    await page.keyboard.press('Enter');
    await page.locator('.monaco-editor .view-lines').filter({ hasText: args.lineText }).first().waitFor({ timeout: 30000 });
    step('opened');

    const lens = page.locator('.contentWidgets .codelens-decoration').filter({ hasText: new RegExp(args.lensPattern) }).first();
    await lens.waitFor({ timeout: 60000 });
    result.lens = normalize(await lens.innerText());
    step('lens');

    const hover = page.locator('.monaco-hover:not(.hidden) .monaco-hover-content, .monaco-hover:not(.hidden) .hover-contents');
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      await hoverWord(page, args.lineText, args.word);
      try {
        await page.waitForFunction(
          (expect) => [...document.querySelectorAll('.monaco-hover')].some((h) => {
            const text = h.innerText.replace(/\u00a0/g, ' ');
            return expect.every((part) => text.includes(part));
          }),
          args.expect, { timeout: 4000 },
        );
        break;
      } catch {
        // The first hovers come back empty while the language client is still starting.
      }
    }
    result.hover = normalize((await hover.allInnerTexts()).join('\n'));
    step('hover');
    await page.waitForTimeout(700); // the hover fades in
    await page.screenshot({ path: args.screenshot });
    result.hoverOk = args.expect.every((part) => result.hover.includes(part));

    // The lens runs the server's fuse-all.openOutputCode, which asks VS Code to show output_code.py.
    await page.mouse.move(5, 5);
    await lens.locator('a').first().click();
    const tab = page.locator('.tabs-container .tab').filter({ hasText: 'output_code.py' }).first();
    await tab.waitFor({ timeout: 20000 });
    result.openedTab = normalize(await tab.innerText());
    step('lens opened output_code.py');
    result.ok = result.hoverOk;
  } catch (error) {
    result.error = String(error && error.stack ? error.stack : error);
    try {
      const pages = browser.contexts().flatMap((c) => c.pages());
      if (pages.length) await pages[0].screenshot({ path: args.screenshot });
    } catch {
      // best effort: the screenshot of a failure is only a help
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

await main();
