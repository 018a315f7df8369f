import nodemailer from 'nodemailer';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { chromiumPath, hasChromium, launchChromium } from '../helpers/browser.js';

const SCREENSHOTS = 'test-output';
const chromiumMissing = !hasChromium();
const missingChromium = `no Chromium at ${chromiumPath()}: install the Debian package (apt-get install chromium) or set CHROMIUM_PATH`;
const onCi = Boolean(process.env.CI) && process.env.CI !== 'false';
/** A 1×1 GIF, hosted by the emulator in the newsletter and inlined by cid in the order email. */
const PIXEL = Buffer.from('R0lGODlhAQABAPAAAP8AAP///yH5BAAAAAAALAAAAAABAAEAAAICRAEAOw==', 'base64');
/** The width the browser decoded an image to: 0 while loading or when blocked. */
const naturalWidth = (img: { complete: boolean; naturalWidth: number }) => (img.complete ? img.naturalWidth : 0);

// CI must not pass without the browser test: there a missing Chromium is a failed test.
if (chromiumMissing && onCi) {
  describe('the inbox browser test on CI', () => {
    it('has Chromium to drive', () => {
      throw new Error(`The inbox browser test cannot run: ${missingChromium}`);
    });
  });
} else if (chromiumMissing) {
  console.warn(`Skipping the inbox browser test: ${missingChromium}`);
}

describe.skipIf(chromiumMissing)('the web inbox in a real browser', () => {
  let emu: Emulator;
  let client: EmlApiClient;
  let transport: EmlApiTransport;
  let browser: Browser;
  let page: Page;
  /** Every URL the browser asked for: the inbox must never reach beyond the emulator. */
  const requested: string[] = [];
  const dialogs: string[] = [];
  const invoice = Buffer.concat([Buffer.from('%PDF-1.4\n% invoice 1042\n'), randomBytes(2048)]);

  beforeAll(async () => {
    await mkdir(SCREENSHOTS, { recursive: true });
    emu = await startEmulator({ groups: ['newsletter', 'beta-testers'] });
    client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
    transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1200, height: 760 }, acceptDownloads: true });
    page.on('request', (r) => requested.push(r.url()));
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });

    await client.addToGroup('newsletter', [
      { email: 'ann@example.test', name: 'Ann Example', substitutions: { first_name: 'Ann', plan: 'Pro' } },
      { email: 'bob@example.test', name: 'Bob', substitutions: { first_name: 'Bob' } },
    ]);
    // Mail from before the page opens: a newsletter to the group.
    await client.sendToGroup('newsletter', {
      from: 'news@example.test',
      subject: 'March news for {{first_name}}',
      textContent: {
        html: '<p>Hi {{first_name}}</p><img id="banner" src="{{banner}}" width="24" height="24" alt="banner">',
        text: 'Hi {{first_name}}',
        images: [{ name: 'banner', data: PIXEL, mimeType: 'image/gif' }],
      },
    });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await client?.close();
    await transport?.close();
    await emu?.close();
  });

  it('shows a message sent after the page opened, without a reload', async () => {
    await page.goto(`${emu.url}/`);
    expect(await page.title()).toBe('Inbox');
    await page.locator('#live.on').waitFor();
    expect(await page.locator('#message-rows tr').count()).toBe(2);
    // Set in this document: still there later only if the page was never reloaded.
    await page.evaluate('window.__openedOnce = true');

    const info = await nodemailer.createTransport(transport).sendMail({
      from: '"Shop" <shop@example.test>',
      to: 'Ann Example <ann@example.test>',
      subject: 'Order #1042 confirmed',
      text: 'Thanks, Ann! Your order #1042 is on its way.',
      html: `<div style="font-family:sans-serif;padding:16px">
<h1 id="greeting" style="color:#2459d6">Thanks, Ann!</h1>
<p>Your order <strong>#1042</strong> is on its way.</p>
<p id="js-check">Scripts are off</p>
<img id="pixel" src="cid:pixel@shop" width="1" height="1" alt="">
<script>document.getElementById('js-check').textContent = 'script ran';</script>
</div>`,
      attachments: [
        { filename: 'invoice-1042.pdf', content: invoice, contentType: 'application/pdf' },
        { filename: 'pixel.gif', content: PIXEL, contentType: 'image/gif', cid: 'pixel@shop' },
      ],
    });
    expect(info.response).toBe('202 Accepted');
    await nodemailer.createTransport(transport).sendMail({
      from: 'mallory@example.test',
      to: 'ann@example.test',
      subject: '<script>alert(1)</script>',
      text: 'hostile subject',
    });

    const row = page.locator('#message-rows tr', { hasText: 'Order #1042 confirmed' });
    await row.waitFor();
    await page.locator('#message-rows tr', { hasText: '<script>alert(1)</script>' }).waitFor();
    expect(await page.evaluate('window.__openedOnce')).toBe(true);

    const rows = page.locator('#message-rows tr');
    expect(await rows.count()).toBe(4);
    // Newest first: the hostile one came last.
    expect(await rows.nth(0).locator('.subject a').textContent()).toBe('<script>alert(1)</script>');
    expect(await rows.nth(1).locator('.subject a').textContent()).toBe('Order #1042 confirmed');
    expect(await rows.nth(1).locator('.to').textContent()).toBe('ann@example.test');
    expect(await rows.nth(1).locator('.from').textContent()).toBe('shop@example.test');
    // The cid image is an inline part, not an attachment.
    expect(await rows.nth(1).locator('.subject').textContent()).toContain('1 attachment');
    expect(await rows.nth(1).locator('time').textContent()).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    expect(await rows.nth(2).locator('.subject').textContent()).toContain('group: newsletter');
    expect(await page.locator('#count').textContent()).toBe('4 messages');
    expect(dialogs).toEqual([]);

    await page.screenshot({ path: `${SCREENSHOTS}/inbox-list.png`, fullPage: true, animations: 'disabled' });
  }, 60_000);

  it('opens the message: HTML in a sandboxed frame without scripts, text, raw source and the attachment', async () => {
    await page.locator('#message-rows tr', { hasText: 'Order #1042 confirmed' }).locator('.subject a').click();
    await page.waitForURL(/\/inbox\/messages\/dlv_[0-9a-f-]+$/);
    expect(await page.locator('h1#subject').textContent()).toBe('Order #1042 confirmed');
    expect(await page.title()).toBe('Order #1042 confirmed');

    const frame = page.locator('iframe#html-body');
    expect(await frame.getAttribute('sandbox')).toBe('allow-popups allow-popups-to-escape-sandbox allow-forms');
    const html = page.frameLocator('iframe#html-body');
    expect(await html.locator('#greeting').textContent()).toBe('Thanks, Ann!');
    expect(await html.locator('strong').textContent()).toBe('#1042');
    expect(await html.locator('#js-check').textContent()).toBe('Scripts are off');
    await expect.poll(() => html.locator('#pixel').evaluate(naturalWidth)).toBe(1);

    const link = page.locator('#attachments a.attachment', { hasText: 'invoice-1042.pdf' });
    expect(await link.textContent()).toBe('invoice-1042.pdf');
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    expect(download.suggestedFilename()).toBe('invoice-1042.pdf');
    expect((await readFile(await download.path())).equals(invoice)).toBe(true);
    expect(await page.locator('#attachments').textContent()).toContain('application/pdf');
    expect(await page.locator('#attachments li', { hasText: 'pixel.gif' }).textContent()).toContain('inline');

    await page.screenshot({ path: `${SCREENSHOTS}/inbox-message.png`, fullPage: true });

    await page.locator('[role=tab]', { hasText: 'Text' }).click();
    expect(await page.locator('#text-body').textContent()).toBe('Thanks, Ann! Your order #1042 is on its way.');
    expect(await frame.isVisible()).toBe(false);
    await page.locator('[role=tab]', { hasText: 'Headers' }).click();
    expect(await page.locator('#panel-headers').textContent()).toContain('Order #1042 confirmed');
    await page.locator('[role=tab]', { hasText: 'Raw' }).click();
    const raw = await page.locator('#raw-source').textContent();
    expect(raw).toContain('Subject: Order #1042 confirmed');
    expect(raw).toContain('Content-Type: application/pdf; name=invoice-1042.pdf');
    expect(page.url()).toMatch(/#raw$/);

    // Opened on its own, outside the frame, the HTML body is still sandboxed by its CSP.
    const messageUrl = page.url().replace(/#raw$/, '');
    await page.goto(`${messageUrl}/html`);
    expect(await page.locator('#greeting').textContent()).toBe('Thanks, Ann!');
    expect(await page.locator('#js-check').textContent()).toBe('Scripts are off');
    expect(dialogs).toEqual([]);
  }, 60_000);

  it('loads the emulator-hosted images of a group email inside the sandboxed frame', async () => {
    await page.goto(`${emu.url}/`);
    await page.locator('#message-rows .subject a', { hasText: 'March news for Ann' }).click();
    await page.waitForURL(/\/inbox\/messages\/dlv_/);
    expect(await page.locator('h1#subject').textContent()).toBe('March news for Ann');
    expect(await page.locator('.head .badge').textContent()).toBe('group: newsletter');
    expect(await page.locator('dl.meta').textContent()).toContain('Groupnewsletter');
    const banner = page.frameLocator('iframe#html-body').locator('#banner');
    expect(await banner.getAttribute('src')).toMatch(new RegExp(`^${emu.url}/images/[0-9a-f]{64}$`));
    await expect.poll(() => banner.evaluate(naturalWidth)).toBe(1);
  }, 60_000);

  it('lists groups with members and substitutions, and follows membership changes', async () => {
    await page.locator('nav a', { hasText: 'Groups' }).click();
    await page.waitForURL(`${emu.url}/inbox/groups`);
    const newsletter = page.locator('section[data-group="newsletter"]');
    expect(await newsletter.locator('h2').textContent()).toBe('newsletter');
    expect(await newsletter.locator('tbody tr').count()).toBe(2);
    const ann = newsletter.locator('tbody tr', { hasText: 'ann@example.test' });
    expect(await ann.textContent()).toContain('Ann Example');
    expect(await ann.locator('.subs').textContent()).toContain('{{plan}} = Pro');
    expect(await page.locator('section[data-group="beta-testers"]').textContent()).toContain('No members.');

    await client.addToGroup('beta-testers', [{ email: 'cyd@example.test', name: 'Cyd' }]);
    await page.locator('section[data-group="beta-testers"] tbody tr', { hasText: 'cyd@example.test' }).waitFor();
    await page.screenshot({ path: `${SCREENSHOTS}/inbox-groups.png`, fullPage: true });
  }, 60_000);

  it('never asked for anything outside the emulator', () => {
    expect(requested.length).toBeGreaterThan(0);
    const outside = requested.filter((url) => !url.startsWith(`${emu.url}/`) && !url.startsWith('data:'));
    expect(outside).toEqual([]);
  });
});
