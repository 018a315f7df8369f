import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { redisServerMissing, startRedisServer } from '../helpers/redis-server.js';
import { nodeArgs } from '../helpers/compiled.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const tsx = (args: string[], env: Record<string, string> = {}) =>
  run(process.execPath, nodeArgs(['--import', 'tsx', ...args]), {
    cwd: ROOT,
    timeout: 60_000,
    env: { ...process.env, ...env },
  });

// Each example is a process of its own on port 0 (a Redis of its own where it needs one): they run at once.
describe.concurrent('the examples run as documented', () => {
  it('node:test example passes under node --test', async () => {
    const { stdout } = await tsx(['--test', 'examples/emulator-node-test.test.ts']);
    expect(stdout).toMatch(/^# pass 1$/m);
    expect(stdout).toMatch(/^# fail 0$/m);
  });

  it('newsletter example sends one personalised copy per member', async () => {
    const { stdout } = await tsx(['examples/newsletter.ts']);
    expect(stdout).toContain('ann@customer.example got: Ann, our autumn news');
    expect(stdout).toContain('bob@customer.example got: Bob, our autumn news');
  });

  it('SMTP relay example delivers through the relay, Bcc hidden', async () => {
    const { stdout } = await tsx(['examples/smtp-relay.ts']);
    expect(stdout).toMatch(/^SMTP reply: 250 2\.0\.0 Ok: msg_/m);
    expect(stdout).toContain('audit@shop.example got "Your invoice" (Bcc header visible: false)');
  });

  it.skipIf(redisServerMissing)(
    'outbox example queues once under an idempotency key, and a worker sends it',
    async () => {
      const redis = await startRedisServer();
      try {
        const { stdout } = await tsx(['examples/outbox.ts'], { REDIS_URL: redis.url });
        expect(stdout).toContain('Queued: 250 Queued as order-1042-confirmation');
        expect(stdout).toContain('Queued again: already queued, stored once');
        expect(stdout).toContain('ann@customer.example got: Your order #1042');
        expect(stdout).toContain('Queue: 1 sent, 0 failed, 0 waiting');
        // It cleans up after itself: only its own queue, removed.
        expect(await redis.client.keys('*')).toEqual([]);
      } finally {
        await redis.stop();
      }
    },
  );

  it.skipIf(redisServerMissing)(
    'operations example runs a relay and a worker with health and metrics on, and scrapes them',
    async () => {
      const redis = await startRedisServer();
      try {
        const { stdout } = await tsx(['examples/operations.ts'], { REDIS_URL: redis.url });
        expect(stdout).toContain('relay /readyz:  200 {"status":"ok","checks":{"redis":{"status":"ok"}}}');
        expect(stdout).toMatch(/worker \/readyz: 200 .*"service":\{"status":"ok"\}/);
        expect(stdout).toContain('ops@acme.example got 3 messages');
        expect(stdout).toContain('eml_api_relay_messages_total{outcome="accepted",code="250"} 3');
        expect(stdout).toContain('eml_api_sends_total{component="worker",outcome="sent",code="none",status="202"} 3');
        expect(stdout).toContain('stopped: 0 message(s) given up, 0 job(s) handed back');
      } finally {
        await redis.stop();
      }
    },
  );

  it('DKIM example uploads a signed message', async () => {
    const { stdout } = await tsx(['examples/dkim.ts']);
    expect(stdout).toMatch(/^DKIM-Signature: v=1; a=rsa-sha256;.*d=acme\.example/m);
  });
});
