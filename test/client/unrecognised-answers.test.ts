import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiTransport } from '../../src/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';

/**
 * A 2xx that is not the service's answer (a single-page app or web server
 * behind a wrong baseUrl answering every path) means the message was probably
 * not sent: the send still resolves (the contract accepts any 2xx), but says
 * so in its result and logs a warning, instead of a silent `id: undefined`.
 */

let service: FakeService;
const logger = capturingLogger();
const warnings = () => logger.at('warn');

beforeAll(async () => {
  service = await startFakeService();
});
afterAll(() => service.close());
beforeEach(() => {
  logger.clear();
  service.clear();
});

const SPA_PAGE = {
  status: 200,
  text: '<!doctype html><html><body><div id="root"></div></body></html>',
  headers: { 'content-type': 'text/html; charset=utf-8' },
};

describe('a 2xx answer that is not the service JSON', () => {
  it('resolves a client send with a warning and logs it once', async () => {
    service.answer(SPA_PAGE);
    const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url, logger });
    const result = await client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n');
    expect(result.id).toBeUndefined();
    expect(result.warning).toMatch(/not the service's JSON.*may not have been sent.*baseUrl/);
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]!.message).toBe(result.warning);
    expect(warnings()[0]!.meta).toMatchObject({ command: 'POST /v1/send/eml', responseCode: 200 });
    await client.close();
  });

  it("says so in sendMail's info and logs it once through the transport's logger", async () => {
    service.answer(SPA_PAGE);
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url, logger });
    const info = await nodemailer.createTransport(transport).sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'hi' });
    expect(info.id).toBeUndefined();
    expect(info.warning).toMatch(/not the service's JSON/);
    expect(warnings().filter((w) => w.message === info.warning)).toHaveLength(1);
    await transport.close();
  });

  it('is not reported for the JSON answer of the contract or an empty 202', async () => {
    const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url, logger });
    expect((await client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n')).warning).toBeUndefined();
    service.answer({ status: 202 });
    expect((await client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n')).warning).toBeUndefined();
    expect(warnings()).toEqual([]);
    await client.close();
  });
});
