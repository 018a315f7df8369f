import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { redisServerMissing, startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import {
  docBlocks,
  kindOf,
  runConsole,
  runShell,
  runTypeScript,
  writeFixtures,
  type DocBlock,
  type DocSession,
} from './docs-blocks.js';
import { ROOT, installedProject } from './packed.js';

// Every code block of README.md and docs/ runs against the packed package, in a project holding what
// its section says to install, or says in a marker why it does not (test/package/docs-blocks.ts).

const DOCUMENTS = ['README.md', ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`)].filter((f) =>
  f.endsWith('.md'),
);

/** Whether a block needs a Redis (the outbox, or the relay storing in it). */
function needsRedis(block: DocBlock): boolean {
  return /REDIS_URL|redis:\/\/|EmlApiQueueTransport|startOutboxWorker|eml-api (worker|queue)|--outbox/.test(block.code);
}

describe.concurrent('the code blocks of the docs, against the packed package', () => {
  for (const file of DOCUMENTS) {
    const blocks = docBlocks(file, readFileSync(join(ROOT, file), 'utf8'));
    const files = new Map(
      blocks.flatMap((b) => (b.marker?.kind === 'file' ? [[b.marker.name, `${b.code}\n`] as const] : [])),
    );

    describe.sequential(file, () => {
      let emu: Emulator | undefined;
      let redis: RedisServer | undefined;
      const session: DocSession = { project: '', service: { url: '', apiKey: '' }, env: {} };
      beforeAll(async () => {
        emu = await startEmulator({ groups: ['newsletter'] });
        session.service = { url: emu.url, apiKey: emu.apiKey };
        if (!redisServerMissing && blocks.some((b) => !b.marker && needsRedis(b))) {
          redis = await startRedisServer();
          session.redisUrl = redis.url;
        }
      });
      afterAll(async () => {
        await emu?.close();
        await redis?.stop();
      });

      it('has every block run, or marked with the reason it is not', () => {
        const unmarked = blocks.filter((b) => !b.marker && !kindOf(b)).map((b) => `${b.file}:${b.line} (${b.lang})`);
        expect(unmarked).toEqual([]);
      });

      for (const block of blocks) {
        const kind = kindOf(block);
        if (block.marker || !kind) continue;
        const title = `${file}:${block.line} (${kind}${block.installs.length ? `; npm install ${block.installs.join(' ')}` : ''})`;
        it.skipIf(redisServerMissing !== undefined && needsRedis(block))(
          title,
          async () => {
            session.project = await installedProject(block.installs);
            await writeFixtures(session.project, files);
            const run = { ts: runTypeScript, sh: runShell, console: runConsole }[kind];
            expect(await run(block, session)).toBe('');
          },
          120_000,
        );
      }
    });
  }
});
