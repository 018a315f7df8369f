import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * When Redis refuses a write (here: out of memory), the error sendMail
 * rejects with used to carry, in its cause (ioredis's ReplyError), the
 * command's arguments: the chunk of the message being written. An app that
 * logs the error (pino and winston serialise causes; util.inspect shows them)
 * wrote mail content, a password-reset link here, into its logs (review F12,
 * attack/18-error-carries-mail.ts). Real redis-server with a small maxmemory.
 */

let redis: RedisServer;
let transport: EmlApiQueueTransport;

beforeAll(async () => {
  redis = await startRedisServer({ args: ['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'] });
  transport = new EmlApiQueueTransport({ connection: redis.url });
});

afterAll(async () => {
  await transport?.close();
  await redis?.stop();
});

describe('an error of a write Redis refused', () => {
  it('names the command, never its arguments: no byte of the message in the error or its causes', async () => {
    const mailer = nodemailer.createTransport(transport);
    let err: (Error & { cause?: unknown }) | undefined;
    for (let i = 0; i < 50 && !err; i++) {
      err = await mailer
        .sendMail({
          from: 'a@example.test',
          to: 'b@example.test',
          subject: 'reset',
          text: `https://example.test/reset?token=TOPSECRET-${i} ${'p'.repeat(300_000)}`,
        })
        .then(
          () => undefined,
          (e: Error) => e,
        );
    }
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err!.message).toMatch(/OOM/);
    const shown = inspect(err, { depth: 10, maxStringLength: 1_000_000, maxArrayLength: 10_000 });
    expect(shown).toMatch(/ReplyError/); // the cause is kept...
    expect(shown).toMatch(/name: '(evalsha|eval)'/); // ...with the command's name
    // ...but neither the reset token nor the message's bytes, in any form.
    expect(shown).not.toMatch(/TOPSECRET|VE9QU0VDUkVU|pppppppp|<Buffer/);
    expect(JSON.stringify(err)).not.toMatch(/TOPSECRET|pppppppp/);
    const cause = err!.cause as { command?: { args?: unknown } };
    expect(cause.command).toBeDefined();
    expect(cause.command!.args).toBeUndefined();
  });
});
