import { mkdir } from 'node:fs/promises';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiClient } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { chromiumPath, hasChromium, launchChromium } from '../helpers/browser.js';

/**
 * The web inbox as a developer uses it every day, in Chromium: search with
 * live results, paging over every message, delete one, delete a search's
 * results, clear all, read marks, keyboard tabs, links opening new tabs,
 * the unsubscribe flow from inside the inbox, and a tab that follows an
 * emulator restart.
 */

const SCREENSHOTS = 'test-output';
const chromiumMissing = !hasChromium();
const onCi = Boolean(process.env.CI) && process.env.CI !== 'false';
if (chromiumMissing && onCi) {
  describe('the inbox actions browser test on CI', () => {
    it('has Chromium to drive', () => {
      throw new Error(`no Chromium at ${chromiumPath()}`);
    });
  });
}

async function sendEml(emu: Emulator, subject: string, body = 'hello', to = 'ann@example.test'): Promise<void> {
  const eml = `From: app@example.test\r\nTo: ${to}\r\nSubject: ${subject}\r\n\r\n${body}\r\n`;
  const res = await request(`${emu.url}/v1/send/eml`, {
    method: 'POST',
    headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ mail: Buffer.from(eml).toString('base64') }),
  });
  expect(res.statusCode, await res.body.text()).toBe(202);
}

describe.skipIf(chromiumMissing)('the web inbox actions in a real browser', () => {
  let emu: Emulator;
  let client: EmlApiClient;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  const dialogs: string[] = [];

  beforeAll(async () => {
    await mkdir(SCREENSHOTS, { recursive: true });
    emu = await startEmulator({ groups: ['newsletter', 'crowd'] });
    client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
    // Links in mail point outside: answered here, never fetched from the network.
    await context.route(/^https:\/\/shop\.example\.test\//, (route) =>
      route.fulfill({ status: 200, contentType: 'text/html', body: '<h1 id="landing">Tracked</h1>' }),
    );
    page = await context.newPage();
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.accept();
    });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await client?.close();
    await emu?.close();
  });

  const rows = () => page.locator('#message-rows tr');

  it('searches as one types, with live results and Mailpit operators', async () => {
    await sendEml(emu, 'Invoice 1 for Ann', 'amount due');
    await sendEml(emu, 'Welcome Ann', 'hello');
    await page.goto(`${emu.url}/`);
    await page.locator('#live.on').waitFor();
    const box = page.getByRole('searchbox', { name: 'Search messages' });
    await box.fill('subject:invoice');
    await expect.poll(() => rows().count()).toBe(1);
    expect(await page.locator('#matching').textContent()).toBe('1 result');
    expect(page.url()).toBe(`${emu.url}/?query=subject%3Ainvoice`);
    // A message that matches shows up in the results without a reload; one that does not, does not.
    await sendEml(emu, 'Invoice 2 for Ann', 'amount due');
    await sendEml(emu, 'Newsletter', 'no match');
    await expect.poll(() => page.locator('#count').textContent()).toBe('4 messages');
    expect(await rows().count()).toBe(2);
    expect(await rows().first().locator('.subject a').textContent()).toBe('Invoice 2 for Ann');
    await box.fill('-subject:invoice');
    await expect.poll(() => rows().count()).toBe(2);
    await box.fill('');
    await expect.poll(() => rows().count()).toBe(4);
  }, 60_000);

  it('deletes one message, a search’s results and then everything', async () => {
    const welcome = rows().filter({ hasText: 'Welcome Ann' });
    await welcome.getByRole('button', { name: /Delete/ }).click();
    await expect.poll(() => rows().count()).toBe(3);
    expect(await page.locator('#count').textContent()).toBe('3 messages');

    await page.getByRole('searchbox').fill('invoice');
    await expect.poll(() => rows().count()).toBe(2);
    await page.getByRole('button', { name: 'Delete results' }).click();
    await expect.poll(() => page.locator('#count').textContent()).toBe('1 message');
    expect(dialogs.at(-1)).toBe('Delete every message matching "invoice"?');
    await page.getByRole('searchbox').fill('');
    await expect.poll(() => rows().count()).toBe(1);

    await page.getByRole('button', { name: 'Delete all' }).click();
    await expect.poll(() => page.locator('#count').textContent()).toBe('0 messages');
    expect(await page.locator('#empty').isVisible()).toBe(true);
    expect(emu.mailbox('ann@example.test')).toEqual([]);
  }, 60_000);

  it('pages over every message with exact totals', async () => {
    const members = Array.from({ length: 120 }, (_, i) => ({
      email: `m${i}@crowd.test`,
      substitutions: { n: String(i) },
    }));
    await client.addToGroup('crowd', members);
    await client.sendToGroup('crowd', {
      from: 'news@example.test',
      subject: 'Issue {{n}}',
      textContent: { text: 'x' },
    });
    await expect.poll(() => page.locator('#count').textContent()).toBe('120 messages');
    expect(await rows().count()).toBe(50);
    expect(await page.locator('#range').textContent()).toBe('1\u201350 of 120');
    await page.getByRole('link', { name: /Older/ }).click();
    await expect.poll(() => page.locator('#range').textContent()).toBe('51\u2013100 of 120');
    expect(await rows().first().locator('.subject a').textContent()).toBe('Issue 69');
    await page.getByRole('link', { name: /Older/ }).click();
    await expect.poll(() => page.locator('#range').textContent()).toBe('101\u2013120 of 120');
    expect(await rows().count()).toBe(20);
    expect(await rows().last().locator('.subject a').textContent()).toBe('Issue 0');
    expect(await page.getByRole('link', { name: /Older/ }).count()).toBe(0);
    // The page works without its script too: the same page from its URL.
    await page.reload();
    expect(await page.locator('#range').textContent()).toBe('101\u2013120 of 120');
    await page.screenshot({ path: `${SCREENSHOTS}/inbox-paging.png`, fullPage: true, animations: 'disabled' });
    await page.getByRole('button', { name: 'Delete all' }).click();
    await expect.poll(() => page.locator('#count').textContent()).toBe('0 messages');
  }, 60_000);

  it('opens links of the HTML view in a new tab, and unsubscribes from inside the inbox', async () => {
    await client.addToGroup('newsletter', [{ email: 'ann@example.test', substitutions: { first: 'Ann' } }]);
    await client.sendToGroup('newsletter', {
      from: 'news@example.test',
      subject: 'March news for {{first}}',
      textContent: {
        html: '<p>Hi {{first}}</p><p><a id="track" href="https://shop.example.test/sale">Sale</a></p><p><a id="unsub" href="{{unsubscribe}}">Unsubscribe</a></p>',
        text: 'Hi {{first}}, see https://shop.example.test/sale',
      },
    });
    await page.goto(`${emu.url}/`);
    await expect.poll(() => rows().count()).toBe(1);
    expect(await rows().first().getAttribute('class')).toContain('unread');
    await rows().first().locator('.subject a').click();
    await page.waitForURL(/\/inbox\/messages\/dlv_/);
    const frame = page.frameLocator('iframe#html-body');

    const [shop] = await Promise.all([context.waitForEvent('page'), frame.locator('#track').click()]);
    await shop.locator('#landing').waitFor();
    expect(shop.url()).toBe('https://shop.example.test/sale');
    await shop.close();
    // The frame still shows the message.
    expect(await frame.locator('#unsub').textContent()).toBe('Unsubscribe');

    const [unsubscribe] = await Promise.all([context.waitForEvent('page'), frame.locator('#unsub').click()]);
    await unsubscribe.locator('#confirm').click();
    await unsubscribe.locator('#done').waitFor();
    expect(await unsubscribe.locator('#done').textContent()).toContain('has been removed from newsletter');
    await unsubscribe.close();
    expect(emu.members('newsletter')).toEqual([]);

    // The Text view's URLs are links too.
    await page.getByRole('tab', { name: 'Text' }).click();
    const textLink = page.locator('#text-body a');
    expect(await textLink.getAttribute('href')).toBe('https://shop.example.test/sale');
    expect(await textLink.getAttribute('target')).toBe('_blank');
  }, 60_000);

  it('moves between the message tabs with the arrow keys, Home and End', async () => {
    const tabs = page.getByRole('tablist', { name: 'Message parts' }).getByRole('tab');
    expect(await tabs.allTextContents()).toEqual(['HTML', 'Text', 'Headers', 'Raw']);
    await page.getByRole('tab', { name: 'HTML' }).click();
    await page.keyboard.press('ArrowRight');
    expect(await page.getByRole('tab', { selected: true }).textContent()).toBe('Text');
    expect(await page.evaluate('document.activeElement?.textContent')).toBe('Text');
    await page.keyboard.press('End');
    expect(await page.getByRole('tab', { selected: true }).textContent()).toBe('Raw');
    expect(await page.locator('#panel-raw').isVisible()).toBe(true);
    await page.keyboard.press('ArrowRight');
    expect(await page.getByRole('tab', { selected: true }).textContent()).toBe('HTML');
    await page.keyboard.press('ArrowLeft');
    await page.keyboard.press('Home');
    expect(await page.getByRole('tab', { selected: true }).textContent()).toBe('HTML');
    expect(await page.getByRole('tab', { name: 'Text' }).getAttribute('tabindex')).toBe('-1');
  }, 60_000);

  it('marks a message read when opened, and unread again from its page', async () => {
    await page.goto(`${emu.url}/`);
    expect((await rows().first().getAttribute('class')) ?? '').not.toContain('unread');
    await rows().first().locator('.subject a').click();
    await page.getByRole('button', { name: 'Mark unread' }).click();
    await page.getByRole('button', { name: 'Marked unread' }).waitFor();
    await page.goto(`${emu.url}/`);
    expect(await rows().first().getAttribute('class')).toContain('unread');
  }, 60_000);

  it('reloads its list when the emulator it follows restarts', async () => {
    const own = await startEmulator();
    const port = own.port;
    await sendEml(own, 'Before the restart');
    await page.goto(`${own.url}/`);
    await page.locator('#live.on').waitFor();
    expect(await rows().count()).toBe(1);
    await own.close();
    await page.locator('#live.off').waitFor();
    const again = await startEmulator({ port });
    try {
      await sendEml(again, 'After the restart');
      await page.locator('#live.on').waitFor({ timeout: 20_000 });
      await expect
        .poll(() => rows().allTextContents(), { timeout: 20_000 })
        .toEqual([expect.stringContaining('After the restart')]);
    } finally {
      await again.close();
    }
  }, 90_000);
});
