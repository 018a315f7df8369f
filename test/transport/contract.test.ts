import nodemailer from 'nodemailer';
import { inspect } from 'node:util';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { VERSION } from '../../src/shared/version.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { eventually } from '../helpers/async.js';
import { startFakeService } from '../helpers/fake-service.js';
import pkg from '../../package.json' with { type: 'json' };

const message = (n: number) => ({
  from: 'shop@example.test',
  to: `user${n}@example.test`,
  subject: `Message ${n}`,
  text: `Body ${n}`,
});

describe('the Nodemailer transport contract', () => {
  let emu: Emulator;
  beforeAll(async () => {
    emu = await startEmulator();
  });
  afterAll(() => emu.close());

  it('has a name and the package version', () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    expect(transport.name).toBe('EmlApiTransport');
    expect(transport.version).toBe(pkg.version);
    expect(VERSION).toBe(pkg.version);
  });

  it('exposes send, verify, close and isIdle as own enumerable bound properties', () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    for (const key of ['send', 'verify', 'close', 'isIdle', 'name', 'version']) {
      expect(Object.keys(transport)).toContain(key);
    }
    const { isIdle } = transport;
    expect(isIdle()).toBe(true);
  });

  it('still works when a framework copies the transport with spread or for...in', async () => {
    const original = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    const spread = { ...original };
    const copied: Record<string, unknown> = {};
    for (const key in original) copied[key] = (original as unknown as Record<string, unknown>)[key];
    const before = emu.messages().length;
    for (const copy of [spread, copied]) {
      const transporter = nodemailer.createTransport(copy as unknown as EmlApiTransport);
      await expect(transporter.verify()).resolves.toBe(true);
      const info = await transporter.sendMail(message(1));
      expect(info.response).toBe('202 Accepted');
    }
    expect(emu.messages().length).toBe(before + 2);
    await original.close();
  });

  it('resolves sendMail with envelope, messageId, accepted, rejected, pending and response', async () => {
    const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
    const info = await transporter.sendMail({
      from: 'Shop <shop@example.test>',
      to: 'ann@example.test',
      cc: 'bob@example.test',
      bcc: 'eve@example.test',
      subject: 'Info',
      text: 'x',
    });
    expect(info.envelope).toEqual({
      from: 'shop@example.test',
      to: ['ann@example.test', 'bob@example.test', 'eve@example.test'],
    });
    expect(info.accepted).toEqual(['ann@example.test', 'bob@example.test', 'eve@example.test']);
    expect(info.rejected).toEqual([]);
    expect(info.pending).toEqual([]);
    expect(info.response).toBe('202 Accepted');
    expect(info.messageId).toMatch(/^<.+@example\.test>$/);
    const stored = emu.messages().at(-1)!;
    expect(stored.messageId).toBe(info.messageId);
    expect(info.id).toBe(stored.id);
    expect(info.apiResponse).toEqual({ id: stored.id, messageId: info.messageId, recipients: 3 });
    await transporter.close();
  });

  it('calls the send callback exactly once, also on failure', async () => {
    const transport = new EmlApiTransport({ apiKey: 'wrong-key', baseUrl: emu.url });
    const transporter = nodemailer.createTransport(transport);
    const calls: unknown[] = [];
    await new Promise<void>((resolve) => {
      transporter.sendMail(message(2), (err) => {
        calls.push(err);
        setTimeout(resolve, 50);
      });
    });
    expect(calls).toHaveLength(1);
    expect(calls[0]).toBeInstanceOf(EmlApiError);
    expect(calls[0]).toMatchObject({ code: 'EAUTH', responseCode: 401, command: 'POST /v1/send/eml' });
    await transport.close();
  });

  it('reports isIdle() false while maxConnections sends are in flight and emits idle when they end', async () => {
    const service = await startFakeService();
    service.answer('hold');
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url, maxConnections: 2 });
    const transporter = nodemailer.createTransport(transport);
    let idleEvents = 0;
    transporter.on('idle', () => idleEvents++);
    expect(transporter.isIdle()).toBe(true);
    const sends = [1, 2, 3].map((n) => transporter.sendMail(message(n)));
    await eventually(() => service.held >= 2);
    expect(transporter.isIdle()).toBe(false);
    expect(idleEvents).toBe(0);
    service.releaseAll();
    await eventually(() => service.held >= 1);
    // The third send took the freed slot: still at most two in flight.
    expect(service.maxHeld).toBe(2);
    service.releaseAll();
    await Promise.all(sends);
    expect(transporter.isIdle()).toBe(true);
    expect(idleEvents).toBeGreaterThan(0);
    await transport.close();
    await service.close();
  });

  it('rejects sends after close() with ECONNECTION and reports not idle', async () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    const transporter = nodemailer.createTransport(transport);
    await transporter.sendMail(message(4));
    await transport.close();
    expect(transport.isIdle()).toBe(false);
    await expect(transporter.sendMail(message(5))).rejects.toMatchObject({ code: 'ECONNECTION' });
  });

  it('accepts a callback in close() and calls it once', async () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    const calls: unknown[] = [];
    await new Promise<void>((resolve) =>
      transport.close((err) => {
        calls.push(err);
        resolve();
      }),
    );
    expect(calls).toEqual([null]);
  });

  it('never shows the API key in util.inspect or JSON.stringify of the transport', () => {
    const transport = new EmlApiTransport({ apiKey: 'sk_live_TOPSECRET42', baseUrl: emu.url });
    expect(inspect(transport, { depth: 10, showHidden: true })).not.toContain('TOPSECRET42');
    expect(JSON.stringify(transport)).not.toContain('TOPSECRET42');
    expect(inspect(transport.client, { depth: 10, showHidden: true })).not.toContain('TOPSECRET42');
  });

  it('sends a raw message given with the raw option, recipients taken from its headers', async () => {
    const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
    const raw = [
      'From: shop@example.test',
      'To: raw-ann@example.test',
      'Bcc: raw-eve@example.test',
      'Subject: Raw',
      'Message-ID: <raw-1@example.test>',
      '',
      'Raw body',
    ].join('\r\n');
    const info = await transporter.sendMail({ raw });
    expect(info.accepted).toEqual(['raw-ann@example.test', 'raw-eve@example.test']);
    expect(info.messageId).toBe('<raw-1@example.test>');
    expect(emu.mailbox('raw-eve@example.test')[0]!.raw.toString()).not.toMatch(/^bcc:/im);
    await transporter.close();
  });

  it('fails with EMESSAGE when the message cannot be built, sending nothing', async () => {
    const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
    const before = emu.messages().length;
    const err = await transporter
      .sendMail({ ...message(6), attachments: [{ filename: 'x', path: '/nonexistent/file.pdf' }] })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EMESSAGE' });
    expect((err as Error).message).toContain('/nonexistent/file.pdf');
    expect(emu.messages().length).toBe(before);
    await transporter.close();
  });

  it('reuses keep-alive connections: 30 sequential sends open one TCP connection', async () => {
    const service = await startFakeService();
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url });
    const transporter = nodemailer.createTransport(transport);
    for (let n = 0; n < 30; n++) await transporter.sendMail(message(n));
    expect(service.connections).toBe(1);
    await transport.close();
    await service.close();
  });

  it('sends through a dispatcher the user passed and leaves it open on close()', async () => {
    const agent = new Agent({ connections: 1 });
    let dispatched = 0;
    const counting = agent.compose((dispatch) => (opts, handler) => {
      dispatched++;
      return dispatch(opts, handler);
    });
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, dispatcher: counting });
    const transporter = nodemailer.createTransport(transport);
    await transporter.sendMail(message(7));
    expect(dispatched).toBe(1);
    await transport.close();
    expect(agent.closed).toBe(false);
    const res = await agent.request({ origin: emu.url, path: '/v1/send/eml', method: 'GET' });
    await res.body.text();
    expect(res.statusCode).toBe(405);
    await agent.close();
  });
});
