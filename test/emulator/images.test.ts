import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  b64,
  type Content,
  emulatorApi,
  expectError,
  fetchPublic,
  type GroupAccepted,
  LOGO,
  LOGO_SHA256,
  logoImage,
  type StandardAccepted,
  standardEmail,
} from '../helpers/emulator-api.js';

/**
 * Hosted images: textContent.images of standard and group sends replaced by
 * URLs the emulator serves until 180 days after their last use, and the plus
 * plan they need (SERVICE-SPEC.md part 5).
 */

/** The first bytes of a JFIF JPEG: not a PNG. */
const JPEG_BYTES = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00]);
/** Bytes that are no image format at all. */
const NOISE_BYTES = Buffer.from(Array.from({ length: 64 }, (_, i) => (i * 37 + 11) & 0xff));
const DAY_MS = 24 * 60 * 60 * 1000;
const FREE_KEY = 'k-free-senders';
const PLUS_KEY = 'k-plus-senders';

let emu: Emulator;
const { api, addOk, sendGroup, sendGroupOk, sendEmail, sendEmailOk, copyOf, imageUrls, address, freshGroup } =
  emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({
    apiKeys: [
      { key: FREE_KEY, scopes: ['sender', 'group.sender'], plan: 'free' },
      { key: PLUS_KEY, scopes: ['sender', 'group.sender'], plan: 'plus' },
    ],
  });
});

afterAll(() => emu.close());

describe('hosted images', () => {
  it('accepts an image name written in double braces, as the spec writes it', async () => {
    const to = address('img-braces');
    const answer = await sendEmail([to], 'Braces', {
      html: '<img src="{{logo}}">',
      images: [{ name: '{{logo}}', data: b64(LOGO), mimeType: 'PNG' }],
    });
    expect(answer.status).toBe(202);
    expect(emu.mailbox(to)[0]!.html).toContain(`${emu.url}/images/${LOGO_SHA256}`);
  });

  const imageHtml = '<p><img src="{{logo}}" alt="Logo"></p>';

  it('replaces {{logo}} in a standard send with a hosted URL that serves the PNG', async () => {
    const to = address('img-std');
    const sent = await sendEmailOk([to], 'Logo', { html: imageHtml, images: [logoImage()] });
    const html = copyOf(to, sent.id).html;
    const urls = imageUrls(html);
    expect(urls).toEqual([`${emu.url}/images/${LOGO_SHA256}`]);
    expect(html).toContain(`<img src="${urls[0]}" alt="Logo">`);
    expect(html).not.toContain('{{logo}}');

    const image = await fetchPublic(urls[0]!);
    expect(image.status).toBe(200);
    expect(image.headers['content-type']).toBe('image/png');
    expect(image.body.equals(LOGO)).toBe(true);

    const head = await fetchPublic(urls[0]!, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers['content-type']).toBe('image/png');
    expect(head.headers['content-length']).toBe(String(LOGO.length));
    expect(head.body).toHaveLength(0);
  });

  it('replaces {{logo}} in every copy of a group send with the same hosted URL', async () => {
    const group = freshGroup('img-group');
    const members = [address('img-a'), address('img-b')];
    await addOk(
      group,
      members.map((email) => ({ email })),
    );
    const sent = await sendGroupOk(group, 'Logo', { html: imageHtml, images: [logoImage()] });
    for (const member of members) {
      expect(imageUrls(copyOf(member, sent.id).html)).toEqual([`${emu.url}/images/${LOGO_SHA256}`]);
    }
    const image = await fetchPublic(`${emu.url}/images/${LOGO_SHA256}`);
    expect(image.status).toBe(200);
    expect(image.body.equals(LOGO)).toBe(true);
  });

  it('answers 400 when the data does not match the declared type', async () => {
    const group = freshGroup('img-bad');
    await addOk(group, [{ email: address('img-bad-member') }]);
    const before = emu.messages().length;
    for (const data of [JPEG_BYTES, NOISE_BYTES]) {
      const answer = await sendEmail([address('img-bad')], 'Bad', {
        html: imageHtml,
        images: [logoImage('PNG', data)],
      });
      expect(expectError(answer, 400, 'invalid_request')).toContain('textContent.images[0].data');
      const grouped = await sendGroup(group, 'Bad', { html: imageHtml, images: [logoImage('PNG', data)] });
      expect(expectError(grouped, 400, 'invalid_request')).toContain('textContent.images[0].data');
    }
    expect(emu.messages()).toHaveLength(before);
  });

  it("answers 400 for an image named unsubscribe (the members' unsubscribe link keeps that name), sending nothing", async () => {
    const group = freshGroup('img-unsub');
    await addOk(group, [{ email: address('img-unsub-member') }]);
    const before = emu.messages().length;
    for (const name of ['unsubscribe', '{{unsubscribe}}']) {
      const image = { ...logoImage(), name };
      const grouped = await sendGroup(group, 'News', { html: '<a href="{{unsubscribe}}">Leave</a>', images: [image] });
      expect(expectError(grouped, 400, 'invalid_request')).toMatch(/"unsubscribe" is reserved/);
      const single = await sendEmail([address('img-unsub')], 'News', { html: '<p>Hi</p>', images: [image] });
      expect(expectError(single, 400, 'invalid_request')).toContain('textContent.images[0].name');
    }
    expect(emu.messages()).toHaveLength(before);
  });

  it('answers 400 for a lower-case mimeType such as "png"', async () => {
    const answer = await sendEmail([address('img-lower')], 'Lower', {
      html: imageHtml,
      images: [logoImage('png')],
    });
    expect(expectError(answer, 400, 'invalid_request')).toContain('mimeType');
  });

  it('answers 404 for an image that was never hosted, and refuses other methods', async () => {
    const missing = await fetchPublic(`${emu.url}/images/${'0'.repeat(64)}`);
    expect(missing.status).toBe(404);
    const notHex = await fetchPublic(`${emu.url}/images/${LOGO_SHA256.toUpperCase()}`);
    expect(notHex.status).toBe(404);
    const post = await fetchPublic(`${emu.url}/images/${LOGO_SHA256}`, 'POST', 'x', 'text/plain');
    expect(post.status).toBe(405);
  });

  describe('expiry, 180 days after the last use', () => {
    const start = new Date('2030-01-01T00:00:00Z');
    let clock = start;
    let timed: Emulator;
    const at = (days: number) => {
      clock = new Date(start.getTime() + days * DAY_MS);
    };

    beforeAll(async () => {
      timed = await startEmulator({ now: () => clock });
    });
    afterAll(() => timed.close());

    async function sendLogo(): Promise<string> {
      const to = address('img-clock');
      const answer = await api(
        'POST',
        '/v1/send/email',
        standardEmail([to], 'Logo', { html: imageHtml, images: [logoImage()] }),
        timed.apiKey,
        { base: timed.url },
      );
      expect(answer.status, answer.text).toBe(202);
      const [url] = imageUrls(copyOf(to, (answer.json as StandardAccepted).id, timed).html, timed.url);
      expect(url).toBe(`${timed.url}/images/${LOGO_SHA256}`);
      return url!;
    }

    it('serves the image at day 179 and answers 404 from day 180', async () => {
      timed.reset();
      at(0);
      const url = await sendLogo();
      at(179);
      expect((await fetchPublic(url)).status).toBe(200);
      expect((await fetchPublic(url, 'HEAD')).status).toBe(200);
      at(180);
      expect((await fetchPublic(url)).status).toBe(404);
      expect((await fetchPublic(url, 'HEAD')).status).toBe(404);
      at(181);
      expect((await fetchPublic(url)).status).toBe(404);
    });

    it('resets the expiry when the same image is sent again', async () => {
      timed.reset();
      at(0);
      const url = await sendLogo();
      at(100);
      expect(await sendLogo()).toBe(url);
      at(250);
      const served = await fetchPublic(url);
      expect(served.status).toBe(200);
      expect(served.body.equals(LOGO)).toBe(true);
      at(279);
      expect((await fetchPublic(url)).status).toBe(200);
      at(281);
      expect((await fetchPublic(url)).status).toBe(404);
    });

    it('hosts an expired image again when it is sent after expiry', async () => {
      timed.reset();
      at(0);
      const url = await sendLogo();
      at(200);
      expect((await fetchPublic(url)).status).toBe(404);
      expect(await sendLogo()).toBe(url);
      at(379);
      expect((await fetchPublic(url)).status).toBe(200);
      at(380);
      expect((await fetchPublic(url)).status).toBe(404);
    });
  });
});

describe('the plus plan for embedded images', () => {
  const group = 'plan';
  const member = 'plan-member@example.test';
  const withImage: Content = { html: '<p><img src="{{logo}}"></p>', images: [logoImage()] };
  const withoutImage: Content = { html: '<p>No image</p>' };

  beforeAll(async () => {
    emu.createGroup(group);
    await addOk(group, [{ email: member }]);
  });

  it('answers 403 plan_required for textContent.images with a free-plan key on /v1/send/email', async () => {
    const before = emu.messages().length;
    const answer = await sendEmail(['plan-std@example.test'], 'Logo', withImage, FREE_KEY);
    expect(expectError(answer, 403, 'plan_required')).toMatch(/plus/i);
    expect(emu.messages()).toHaveLength(before);
    expect(emu.mailbox('plan-std@example.test')).toHaveLength(0);
  });

  it('answers 403 plan_required for textContent.images with a free-plan key on a group send', async () => {
    const before = emu.messages().length;
    const answer = await sendGroup(group, 'Logo', withImage, FREE_KEY);
    expect(expectError(answer, 403, 'plan_required')).toMatch(/plus/i);
    expect(emu.messages()).toHaveLength(before);
    expect(emu.mailbox(member)).toHaveLength(0);
  });

  it('accepts the same bodies without images from the free-plan key', async () => {
    const standard = await sendEmail(['plan-std@example.test'], 'No logo', withoutImage, FREE_KEY);
    expect(standard.status, standard.text).toBe(202);
    const grouped = await sendGroup(group, 'No logo', withoutImage, FREE_KEY);
    expect(grouped.status, grouped.text).toBe(202);
  });

  it('accepts images from a plus-plan key on both endpoints', async () => {
    const standard = await sendEmail(['plan-std@example.test'], 'Logo', withImage, PLUS_KEY);
    expect(standard.status, standard.text).toBe(202);
    const grouped = await sendGroup(group, 'Logo', withImage, PLUS_KEY);
    expect(grouped.status, grouped.text).toBe(202);
    expect(imageUrls(copyOf(member, (grouped.json as GroupAccepted).id).html)).toHaveLength(1);
  });
});
