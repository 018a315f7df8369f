import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, openOutboxQueue, purgeOutbox, startOutboxWorker } from '../../src/queue/index.js';
import { newContentKey, resolveQueueLocation } from '../../src/queue/queue-location.js';
import { runCli } from '../../src/cli/run-cli.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';
import { freePort } from '../helpers/redis-server.js';

/**
 * The outbox on a Redis Cluster (issue 21): what it refuses (a prefix whose
 * keys would spread over the slots, a node of a cluster reached as a single
 * server), how it names a cluster in errors, its sweeper and the whole
 * queue's purge on every master.
 * The crash and exactly-once tests run on a cluster too (crash.test.ts,
 * delivery.test.ts), and so do the failovers (failover.test.ts). A real
 * six-node cluster on loopback (test/helpers/redis-cluster.ts).
 */

let cluster: RedisCluster;
let emu: Emulator;
const prefix = '{eml-api}';
const location = resolveQueueLocation(undefined, prefix);

beforeAll(async () => {
  [cluster, emu] = await Promise.all([startRedisCluster(), startEmulator()]);
});

afterAll(async () => {
  await emu?.close();
  await cluster?.stop();
});

const caught = async (run: () => unknown): Promise<EmlApiError> => {
  try {
    await run();
  } catch (err) {
    return err as EmlApiError;
  }
  throw new Error('expected an error');
};

describe('a queue on a Redis Cluster', () => {
  it('needs a hash-tagged prefix: ECONFIG naming prefix for producers, workers and the CLI’s queue, nothing opened', async () => {
    const connection = { cluster: [...cluster.urls] };
    const before = await clientCount();
    for (const err of [
      await caught(() => new EmlApiQueueTransport({ connection })),
      await caught(() => new EmlApiQueueTransport({ connection, prefix: 'mail' })),
      await caught(() => startOutboxWorker({ connection, apiKey: emu.apiKey, baseUrl: emu.url })),
      await caught(() => openOutboxQueue({ connection, prefix: '{}' })),
    ]) {
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err).toMatchObject({ code: 'ECONFIG', permanent: true });
      expect(err.message).toContain('Invalid option prefix');
      expect(err.message).toContain("'{eml-api}'");
    }
    expect(await clientCount()).toBe(before);
    // A hash tag in the queue name does as well: every key of the queue starts with prefix:name.
    const tagged = new EmlApiQueueTransport({ connection, queueName: '{mail}' });
    await tagged.close();
  });

  it('is refused, saying to connect as a cluster, when one of its nodes is reached as a single server', async () => {
    const producer = new EmlApiQueueTransport({ connection: cluster.urls[0]!, prefix });
    try {
      const err = await caught(() => producer.verify());
      expect(err).toMatchObject({ code: 'ECONFIG', permanent: true, command: 'CONFIG GET cluster-enabled' });
      expect(err.message).toContain(`Redis at 127.0.0.1:${cluster.nodes[0]!.port} is a node of a Redis Cluster`);
      const sent = await caught(() =>
        nodemailer.createTransport(producer).sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' }),
      );
      expect(sent).toMatchObject({ code: 'ECONFIG' });
    } finally {
      await producer.close();
    }
    const worker = await caught(() =>
      startOutboxWorker({ connection: cluster.urls[1]!, prefix, apiKey: emu.apiKey, baseUrl: emu.url }),
    );
    expect(worker).toMatchObject({ code: 'ECONFIG' });
    expect(worker.message).toContain('is a node of a Redis Cluster');
  });

  it('names the cluster by the nodes it was given in errors, never their password', async () => {
    const [a, b] = [await freePort(), await freePort()];
    const producer = new EmlApiQueueTransport({
      connection: { cluster: [`redis://:s3cret-pw@127.0.0.1:${a}`, `redis://:s3cret-pw@127.0.0.1:${b}`] },
      prefix,
      timeouts: { store: 300 },
    });
    try {
      const err = await caught(() =>
        nodemailer.createTransport(producer).sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' }),
      );
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err.message).toContain(`Redis Cluster 127.0.0.1:${a}, 127.0.0.1:${b}`);
      expect(JSON.stringify({ ...err, message: err.message, stack: err.stack })).not.toContain('s3cret');
      const verify = await caught(() => producer.verify());
      expect(verify.message).toContain(`Redis Cluster 127.0.0.1:${a}, 127.0.0.1:${b}`);
      expect(verify.message).not.toContain('s3cret');
    } finally {
      await producer.close();
    }
    const bad = await caught(
      () => new EmlApiQueueTransport({ connection: { cluster: ['https://:s3cret@example.test'] }, prefix }),
    );
    expect(bad).toMatchObject({ code: 'ECONFIG' });
    expect(bad.message).toContain('connection.cluster[0]');
    expect(bad.message).not.toContain('s3cret');
    // One URL given as a string instead of a list: the message says so without echoing it.
    const notAList = await caught(
      () => new EmlApiQueueTransport({ connection: { cluster: 'redis://:s3cret@127.0.0.1:7000' as never }, prefix }),
    );
    expect(notAList).toMatchObject({ code: 'ECONFIG' });
    expect(notAList.message).toContain('connection.cluster');
    expect(notAList.message).not.toContain('s3cret');
  });
});

describe('purgeOutbox on a cluster', () => {
  it('removes the whole queue: every job, every stored message, every key of the outbox, on whichever master', async () => {
    const transport = new EmlApiQueueTransport({ connection: { cluster: [...cluster.urls] }, prefix });
    try {
      const mailer = nodemailer.createTransport(transport);
      // One stored in its job, one beside it (over 64 KiB), and content no job points at.
      await mailer.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'small', idempotencyKey: 'p-1' });
      const text = 'x'.repeat(100_000);
      await mailer.sendMail({ from: 'a@example.test', to: 'b@example.test', text, idempotencyKey: 'p-2' });
      await cluster.client.set(newContentKey(location.contentKeyPrefix, 'gone'), 'orphaned message');
      expect(await cluster.keys(`${prefix}:eml-api:content:*`)).toHaveLength(2);
      const result = await purgeOutbox(transport.queue);
      expect(result).toMatchObject({ jobs: 2, busy: [], notFound: [] });
      expect(await cluster.keys(`${prefix}:eml-api:*`)).toEqual([]);
    } finally {
      await transport.close();
    }
  });
});

describe('the CLI on a cluster', () => {
  const queued = async (n: number) => {
    const producer = new EmlApiQueueTransport({ connection: { cluster: [...cluster.urls] }, prefix });
    try {
      for (let i = 0; i < n; i++) {
        await nodemailer
          .createTransport(producer)
          .sendMail({ from: 'shop@example.test', to: `cli${i}@example.test`, text: `n${i}` });
      }
    } finally {
      await producer.close();
    }
  };
  const env = () => ({ EML_API_URL: emu.url, EML_API_KEY: emu.apiKey });

  it('eml-api worker takes several --redis URLs, queue status --redis-cluster one; a prefix without a tag is wrong usage', async () => {
    emu.reset();
    await queued(2);
    const stop = new AbortController();
    const running = runCliCapturing(
      ['worker', '--redis', cluster.urls[0]!, '--redis', cluster.urls[3]!, '--prefix', prefix],
      { env: env(), signal: stop.signal },
    );
    await eventually(() => emu.messages().length === 2, { what: 'the queued messages sent' });
    stop.abort();
    expect(await running).toMatchObject({
      code: 0,
      stdout: expect.stringContaining('Worker stopped: 2 sent, 0 failed'),
    });
    const status = await runCliCapturing(
      ['queue', 'status', '--redis-cluster', '--redis', cluster.urls[2]!, '--prefix', prefix, '--json'],
      { env: {} },
    );
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ counts: { completed: 2 } });
    const untagged = await runCliCapturing(
      ['queue', 'status', '--redis', cluster.urls[0]!, '--redis', cluster.urls[1]!],
      {
        env: {},
      },
    );
    expect(untagged).toMatchObject({
      code: 2,
      stderr: expect.stringContaining("the prefix needs a hash tag, e.g. '{eml-api}'"),
    });
    // REDIS_URL with the nodes, REDIS_CLUSTER for one.
    const fromEnv = await runCliCapturing(['queue', 'status', '--prefix', prefix], {
      env: { REDIS_URL: cluster.urls[4]!, REDIS_CLUSTER: '1' },
    });
    expect(fromEnv).toMatchObject({ code: 0, stdout: expect.stringContaining('completed 2') });
  }, 60_000);

  it('eml-api relay --redis <node> --redis-cluster --replicas 1 stores on the cluster, confirmed by a replica', async () => {
    emu.reset();
    const stop = new AbortController();
    let out = '';
    let listening!: (port: number) => void;
    const port = new Promise<number>((resolve) => (listening = resolve));
    const running = runCli(
      ['relay', '--port', '0', '--redis', cluster.urls[1]!, '--redis-cluster', '--prefix', prefix, '--replicas', '1'],
      {
        stdout: {
          write: (text: string) => {
            out += text;
            const found = /listening on 127\.0\.0\.1:(\d+)/.exec(out);
            if (found) listening(Number(found[1]));
          },
        },
        stderr: { write: (text: string) => (out += text) },
        stdin: Readable.from([]),
        env: env(),
        signal: stop.signal,
      },
    );
    const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: await port, secure: false, ignoreTLS: true });
    const info = await smtp.sendMail({
      from: 'cron@example.test',
      to: 'ops@example.test',
      subject: 'Nightly',
      text: 'ok',
    });
    expect(info.response).toMatch(/^250 /);
    stop.abort();
    expect(await running).toBe(0);
    const admin = await openOutboxQueue({ connection: { cluster: [...cluster.urls] }, prefix });
    try {
      expect(await admin.queue.getJobCounts('prioritized')).toMatchObject({ prioritized: 1 });
    } finally {
      await admin.close();
    }
  }, 60_000);
});

/** Connections to the cluster's nodes now. */
async function clientCount(): Promise<number> {
  let count = 0;
  for (const node of cluster.client.nodes('all')) {
    count += String(await node.client('LIST'))
      .trim()
      .split('\n').length;
  }
  return count;
}
