/**
 * The relay where the optional peer mailparser is not installed (its own install: smtp-server, and the
 * nodemailer peer): under store-and-forward, a From the relay cannot read for certain is refused at
 * DATA, since the service, reading it with mailparser, may find no address in it after the 250. The
 * direct relay leaves such a From to the service, whose answer it passes on.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEml } from '../../src/emulator/operations/send-operations.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { nodeArgs } from '../helpers/compiled.js';

const run = promisify(execFile);
const FIXTURE = fileURLToPath(new URL('./fixtures/from-without-mailparser.ts', import.meta.url));
const HIDE = fileURLToPath(new URL('./fixtures/hide-mailparser.mjs', import.meta.url));

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

/** From shapes the emulator (mailparser) finds an address in, and shapes it finds none in. */
const READABLE = ['Shop <shop@example.test>', '=?utf-8?Q?Caf=C3=A9?= <shop@example.test>', 'shop@example.test (Shop)'];
const UNREADABLE_HERE = [
  '<@route.example:shop@example.test>',
  '=?utf-8?B?c2hvcEBleGFtcGxlLnRlc3Q=?=',
  '[[<shop@example.test',
  'Shop<@route.example:shop@example.test>',
];

async function emulatorFinds(from: string): Promise<boolean> {
  return parseEml(Buffer.from(`From: ${from}\r\nTo: ann@example.test\r\n\r\nhi\r\n`)).then(
    () => true,
    () => false,
  );
}

describe('without mailparser', () => {
  it('under --outbox, a From the service would find no address in is refused (554) before it is stored; direct, the service decides', async () => {
    // What the service's parser reads, asked here where mailparser is installed.
    expect(await Promise.all(READABLE.map(emulatorFinds))).toEqual(READABLE.map(() => true));
    expect(await Promise.all(UNREADABLE_HERE.map(emulatorFinds))).toEqual(UNREADABLE_HERE.map(() => false));
    const { stdout } = await run(
      process.execPath,
      nodeArgs([
        '--import',
        HIDE,
        '--import',
        'tsx',
        FIXTURE,
        redis.url,
        JSON.stringify([...READABLE, ...UNREADABLE_HERE]),
      ]),
      { timeout: 60_000 },
    );
    const { stored, direct } = JSON.parse(stdout.trim().split('\n').pop()!) as { stored: string[]; direct: string[] };
    expect(stored.slice(0, READABLE.length)).toEqual(READABLE.map(() => expect.stringMatching(/^250 2\.0\.0 Ok: /)));
    expect(stored.slice(READABLE.length)).toEqual(
      UNREADABLE_HERE.map(() => expect.stringMatching(/^554 5\.6\.0 .*From header/)),
    );
    // The direct relay hands them to the service, here one that cannot be reached: 451, for all of them.
    expect(direct).toEqual([...READABLE, ...UNREADABLE_HERE].map(() => expect.stringMatching(/^451 4\.4\.1 /)));
  }, 60_000);
});
