import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { spoolWritten, type MessageSink, type SpooledMessage } from '../../src/body/message-spool.js';

const dirs: string[] = [];
const settings = (threshold: number) => {
  const directory = mkdtempSync(join(tmpdir(), 'message-sink-'));
  dirs.push(directory);
  return { threshold, directory };
};

afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function bytesOf(spooled: SpooledMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of spooled.open()) chunks.push(chunk as Buffer);
  await spooled.body.dispose();
  return Buffer.concat(chunks);
}

const parts = Array.from({ length: 200 }, (_, i) => randomBytes(100 + (i % 7) * 300));

describe('the sink a message is written into', () => {
  it('takes what a stream pipes into it past the spool threshold, in order, asking it to wait meanwhile', async () => {
    let refused = 0;
    let drains = 0;
    const spooled = await spoolWritten((sink, done) => {
      const write = sink.write.bind(sink);
      sink.write = ((...args: Parameters<MessageSink['write']>) => {
        const ok = write(...args);
        if (!ok) refused++;
        return ok;
      }) as MessageSink['write'];
      sink.on('drain', () => drains++);
      const source = Readable.from(parts, { objectMode: false });
      source.pipe(sink, { end: false });
      source.once('end', () => done());
    }, settings(1000));
    expect(spooled.size).toBe(Buffer.concat(parts).length);
    expect(await bytesOf(spooled)).toEqual(Buffer.concat(parts));
    expect(refused).toBeGreaterThan(0);
    expect(drains).toBeGreaterThan(0);
  });

  it('keeps every chunk, in order, from a writer that ignores its backpressure, strings included', async () => {
    const spooled = await spoolWritten((sink, done) => {
      for (const part of parts) {
        sink.write(part);
        sink.write('--é--');
      }
      done();
    }, settings(1000));
    const expected = Buffer.concat(parts.flatMap((part) => [part, Buffer.from('--é--')]));
    expect(await bytesOf(spooled)).toEqual(expected);
  });

  it('ends the build with the error of a failed write, and tells the writer the sink is gone', async () => {
    let closed = false;
    let lateWrite: boolean | undefined;
    const failure = spoolWritten(
      (sink, done) => {
        sink.once('close', () => {
          closed = true;
          lateWrite = sink.write('late');
          done();
        });
        for (const part of parts) sink.write(part);
      },
      settings(1000),
      undefined,
      { bytes: 5000, error: () => new Error('over the limit') },
    );
    await expect(failure).rejects.toThrow('over the limit');
    await new Promise((resolve) => setImmediate(resolve));
    expect(closed).toBe(true);
    expect(lateWrite).toBe(false);
  });
});
