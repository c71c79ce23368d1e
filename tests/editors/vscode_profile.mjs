// Drives VS Code (code-server) in headless Chromium through the profile workflow a user follows:
// open the sample, open the fusion picture from its code lens and click a node (the editor jumps to
// that line), click the "Profile" code lens, wait for the per-line time hints, hover the hottest line.
// Usage: node vscode_profile.mjs '<json>' with url, chromium, file, lineText, hotLineText, hotWord, hotLine,
// kernelLineText, kernelWord, kernelLine, nodeLine, screenshots (folder). Prints one JSON line.
import { chromium } from 'playwright-core';

const args = JSON.parse(process.argv[2]);
const CHROMIUM_FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
];
const normalize = (text) => (text ?? '').replace(/\u00a0/g, ' ');
// Monaco renders spaces as U+00A0.
const TIME_HINT = /\d+(\.\d+)?[ \u00a0](µs|ms)\/call[ \u00a0]·[ \u00a0](\d+%|<1%)[ \u00a0]·[ \u00a0]\d+[ \u00a0](kernel|ATen[ \u00a0]call)/;

async function main() {
  const result = { ok: false, steps: [], screenshots: [] };
  const started = Date.now();
  const step = (name) => result.steps.push(`${name} ${((Date.now() - started) / 1000).toFixed(1)}s`);
  const shoot = async (page, name) => {
    const path = `${args.screenshots}/${name}`;
    await page.screenshot({ path });
    result.screenshots.push(path);
  };
  const browser = await chromium.launch({ executablePath: args.chromium, args: CHROMIUM_FLAGS, headless: true });
  let page;
  try {
    const context = await browser.newContext({ viewport: { width: 1500, height: 1000 } });
    page = await context.newPage();
    await page.goto(args.url, { waitUntil: 'domcontentloaded', timeout: 60000 });
    await page.locator('.monaco-workbench').waitFor({ timeout: 60000 });
    await page.locator('.monaco-workbench').click({ position: { x: 700, y: 500 } });
    await page.keyboard.press('Control+P');
    await page.locator('.quick-input-widget input').waitFor({ timeout: 20000 });
    await page.keyboard.type(args.file, { delay: 20 });
    await page.locator('.quick-input-list .monaco-list-row').first().waitFor({ timeout: 20000 });
    await page.keyboard.press('Enter');
    const editor = page.locator('.monaco-editor').filter({ hasText: args.lineText }).first();
    await editor.locator('.view-lines').waitFor({ timeout: 30000 });
    step('opened');

    // The fusion picture: its lens opens a webview; clicking a node moves the cursor to its line.
    const lenses = page.locator('.contentWidgets .codelens-decoration');
    const picture = lenses.locator('a', { hasText: /^Fusion picture/ }).first();
    await picture.waitFor({ timeout: 150000 });   // the language server's first start imports torch: >60 s on a loaded 2-core CI host
    await picture.click();
    const tab = page.locator('.tabs-container .tab').filter({ hasText: 'Fusion:' }).first();
    await tab.waitFor({ timeout: 20000 });
    result.fusionTab = normalize(await tab.innerText());
    const webview = page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');
    const node = webview.locator(`[data-line="${args.nodeLine}"]`).first();
    await node.waitFor({ timeout: 20000 });
    result.fusionNodes = await webview.locator('[data-line]').count();
    await page.waitForTimeout(500);
    await shoot(page, 'vscode-fusion-picture.png');
    await node.click();
    const position = page.locator('.statusbar-item', { hasText: /Ln \d+, Col \d+/ }).first();
    await page.waitForFunction(
      (line) => [...document.querySelectorAll('.statusbar-item')].some((item) => item.innerText.includes(`Ln ${line},`)),
      args.nodeLine, { timeout: 20000 },
    );
    result.cursorAfterClick = normalize(await position.innerText());
    step('fusion picture node jumped to its line');

    // Profile: the lens runs the file under the profiler; the hints appear when the records change.
    await tab.locator('.codicon-close').click({ force: true });
    await tab.waitFor({ state: 'detached', timeout: 10000 });
    const profile = lenses.locator('a', { hasText: /^Profile$/ }).first();
    await profile.waitFor({ timeout: 20000 });
    await profile.click();
    step('profile clicked');
    const hinted = page.locator('.monaco-editor .view-line').filter({ hasText: TIME_HINT });
    await hinted.first().waitFor({ timeout: 180000 });
    await page.waitForTimeout(1000);
    result.hintedLines = (await hinted.allInnerTexts()).map(normalize);
    result.lensesAfter = (await lenses.allInnerTexts()).map(normalize);
    step('profile hints shown');
    await shoot(page, 'vscode-profile-hints.png');

    // The hot lines' hovers: the profile table above the kernels (an ATen call's line, then a kernel's).
    result.hover = await hoverLine(page, args.hotLineText, args.hotWord, args.hotLine);
    await page.waitForTimeout(700);
    await shoot(page, 'vscode-profile-hover.png');
    result.kernelHover = await hoverLine(page, args.kernelLineText, args.kernelWord, args.kernelLine);
    await page.waitForTimeout(700);
    await shoot(page, 'vscode-profile-hover-kernel.png');
    step('hover');
    result.ok = true;
  } catch (error) {
    result.error = String(error && error.stack ? error.stack : error);
    try {
      if (page) await shoot(page, 'vscode-profile-failure.png');
    } catch {
      // best effort
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

async function hoverLine(page, lineText, word, number) {
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      const line = page.locator('.monaco-editor .view-lines .view-line').filter({ hasText: lineText }).first();
      const token = line.locator('span > span').filter({ hasText: new RegExp(`^${word}$`) }).first();
      const box = await token.boundingBox();
      await page.mouse.move(box.x, 5);
      await page.waitForTimeout(150);
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      try {
        await page.waitForFunction(
          (heading) => [...document.querySelectorAll('.monaco-hover:not(.hidden)')].some((h) => h.innerText.replace(/\u00a0/g, ' ').includes(heading)),
          `fuse-all profile · line ${number} ·`, { timeout: 4000 },
        );
        break;
      } catch {
        // hover again
      }
    }
    const hover = page.locator('.monaco-hover:not(.hidden) .monaco-hover-content', { hasText: `line ${number}` }).first();
    return normalize(await hover.innerText());
}

await main();
