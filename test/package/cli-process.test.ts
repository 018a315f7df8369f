import { describe, expect, it } from 'vitest';
import { binOf, installedProject, start } from './packed.js';

// The eml-api command as a process of the packed package, as orchestrators run it.

describe('eml-api serve and relay', () => {
  it('stop cleanly (exit 0) on a SIGTERM sent as soon as they say they listen', async () => {
    // Every command's peers: what docs/cli.md installs.
    const project = await installedProject(['mailparser', 'smtp-server', 'bullmq', 'ioredis']);
    // No key of its own: the relay then has none to check with the service before it listens.
    const env = { EML_API_URL: 'http://127.0.0.1:9', EML_API_KEY: '', REDIS_URL: '' };
    const ended: string[] = [];
    for (const command of ['serve', 'relay']) {
      // The window was between the first line and the handler: several tries, each at once.
      for (let i = 0; i < 3; i++) {
        const started = start(project, binOf(project), [command, '--port', '0'], { env });
        await started.line(/listening on/);
        const { code, signal } = await started.stop();
        ended.push(`${command} ${code ?? signal}`);
      }
    }
    expect(ended).toEqual([...Array(3).fill('serve 0'), ...Array(3).fill('relay 0')]);
  }, 120_000);
});
