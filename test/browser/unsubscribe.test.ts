import nodemailer from 'nodemailer';
import { mkdir } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { chromiumPath, hasChromium, launchChromium } from '../helpers/browser.js';

const SCREENSHOTS = 'test-output';
const chromiumMissing = !hasChromium();
const missingChromium = `no Chromium at ${chromiumPath()}: install the Debian package (apt-get install chromium) or set CHROMIUM_PATH`;
const onCi = Boolean(process.env.CI) && process.env.CI !== 'false';

// CI must not pass without the browser test: there a missing Chromium is a failed test.
if (chromiumMissing && onCi) {
  describe('the browser test on CI', () => {
    it('has Chromium to drive', () => {
      throw new Error(`The unsubscribe browser test cannot run: ${missingChromium}`);
    });
  });
} else if (chromiumMissing) {
  console.warn(`Skipping the unsubscribe browser test: ${missingChromium}`);
}

describe.skipIf(chromiumMissing)('unsubscribing from a newsletter in a real browser', () => {
  let emu: Emulator;
  let client: EmlApiClient;
  let transport: EmlApiTransport;
  let browser: Browser;
  let page: Page;
  /** Ann's rendered newsletter, as her mail client would show it. */
  let annHtml: string;
  let annLink: string;

  beforeAll(async () => {
    await mkdir(SCREENSHOTS, { recursive: true });
    emu = await startEmulator({ groups: ['newsletter'] });
    client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
    transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 800, height: 500 } });

    const added = await client.addToGroup('newsletter', [
      { email: 'ann@example.test', name: 'Ann', substitutions: { first_name: 'Ann' } },
      { email: 'bob@example.test' },
    ]);
    expect(added.added).toEqual(['ann@example.test', 'bob@example.test']);

    const info = await nodemailer.createTransport(transport).sendMail({
      from: 'news@example.test',
      subject: 'Hello {{first_name}}',
      html: '<p>Hi {{first_name}}</p><p><a id="unsub" href="{{unsubscribe}}">Unsubscribe</a></p>',
      text: 'Hi {{first_name}}',
      group: 'newsletter',
    });
    expect(info.response).toBe('202 Accepted');

    const [copy] = emu.mailbox('ann@example.test');
    expect(copy?.subject).toBe('Hello Ann');
    annHtml = copy?.html ?? '';
    expect(annHtml).toContain('Hi Ann');
    annLink = /<a id="unsub" href="([^"]+)"/.exec(annHtml)?.[1] ?? '';
    expect(annLink.startsWith(`${emu.url}/unsubscribe/`)).toBe(true);
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await client?.close();
    await transport?.close();
    await emu?.close();
  });

  it('follows the link in the delivered email to a confirm form, and confirming removes only that member', async () => {
    await page.setContent(annHtml);
    const formResponse = page.waitForResponse((r) => r.url() === annLink);
    await page.click('#unsub');
    expect((await formResponse).status()).toBe(200);
    await page.waitForURL(annLink);

    const confirm = page.locator('#confirm');
    await expect(confirm.isVisible()).resolves.toBe(true);
    expect(await confirm.textContent()).toBe('Confirm unsubscribe');
    const question = await page.locator('body').innerText();
    expect(question).toContain('Stop sending emails of the list newsletter to ann@example.test?');
    await page.screenshot({ path: `${SCREENSHOTS}/unsubscribe-form.png`, fullPage: true });

    // Nothing changes before the person confirms.
    expect(await client.isInGroup('newsletter', 'ann@example.test')).toBe(true);

    const doneResponse = page.waitForResponse((r) => r.url() === annLink && r.request().method() === 'POST');
    await confirm.click();
    expect((await doneResponse).status()).toBe(200);
    const done = page.locator('#done');
    await done.waitFor();
    expect(await done.innerText()).toBe('ann@example.test has been removed from newsletter.');
    expect(await page.title()).toBe('Unsubscribed');
    await page.screenshot({ path: `${SCREENSHOTS}/unsubscribed.png`, fullPage: true });

    expect(await client.isInGroup('newsletter', 'ann@example.test')).toBe(false);
    expect(await client.isInGroup('newsletter', 'bob@example.test')).toBe(true);
    expect(emu.members('newsletter').map((m) => m.email)).toEqual(['bob@example.test']);
  }, 60_000);

  it('shows the "not valid" page with HTTP 404 when the used link is opened again', async () => {
    await page.setContent(annHtml);
    const response = page.waitForResponse((r) => r.url() === annLink);
    await page.click('#unsub');
    expect((await response).status()).toBe(404);
    await page.waitForURL(annLink);

    expect(await page.title()).toBe('Link not valid');
    const text = await page.locator('body').innerText();
    expect(text).toContain('This unsubscribe link is not valid, or it was already used.');
    expect(text).not.toMatch(/error|stack|at .+\(.+:\d+:\d+\)/i);
    expect(await page.locator('#confirm').count()).toBe(0);
    expect(emu.members('newsletter').map((m) => m.email)).toEqual(['bob@example.test']);
  }, 60_000);
});
