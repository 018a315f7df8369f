// The build threads of one transport (`buildThreads`): started when a send first needs one, reused, idle threads let
// the process exit, and close() ends them. A thread that dies fails its builds with `ESTREAM` and is replaced.
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { buildError } from '../../body/message-spool.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import type { EmlApiLogger } from '../../shared/options-kit.js';
import {
  type CheckedEnvelope,
  type Portable,
  fromThreadError,
  type BuildRequest,
  type FromThread,
  type ToThread,
} from './portable-mail.js';

export type ThreadBuilt =
  /** A message of up to one batch, whole, its envelope checked, with its upload body when no larger than `bodyUpTo`. */
  | { kind: 'whole'; eml: Buffer; checked: CheckedEnvelope | undefined; body: Buffer | undefined }
  /** A larger message, streaming from the thread as the reader takes it. */
  | { kind: 'stream'; stream: Readable }
  /** No thread can build it (Nodemailer did not load there, no thread starts): build it here. */
  | { kind: 'unmovable'; reason: string };

type MovableMail = Extract<Portable, { movable: true }>;

/** Builds a thread holds (one running, the rest waiting) before the pool starts another. */
const QUEUED_BEFORE_NEW_THREAD = 2;

/** Most threads a pool takes: more than any machine gives a transport. */
export const MAX_BUILD_THREADS = 256;

/** Threads for a `buildThreads` value: 0 for `undefined`, `false` or 0; the cores for `'auto'`. @throws {EmlApiError} `ECONFIG` */
export function resolveBuildThreads(value: unknown): number {
  if (value === undefined || value === false || value === 0) return 0;
  if (value === 'auto') return Math.min(availableParallelism(), MAX_BUILD_THREADS);
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_BUILD_THREADS) return value;
  const given = typeof value === 'string' ? JSON.stringify(value.slice(0, 20)) : String(value);
  throw new EmlApiError(
    'ECONFIG',
    `Invalid option buildThreads: expected a whole number from 0 to ${MAX_BUILD_THREADS}, 'auto' or false, got ${given}`,
    { permanent: true },
  );
}

interface Job {
  resolve(built: ThreadBuilt): void;
  reject(err: unknown): void;
  stream?: Readable;
  /** Bytes pushed to `stream` its reader has not taken yet (acknowledged when it does). */
  owed: number;
  done: boolean;
}

class BuildThread {
  readonly worker: Worker;
  readonly jobs = new Map<number, Job>();
  ready = false;
  error: Error | undefined;

  constructor(worker: Worker) {
    this.worker = worker;
  }

  send(message: ToThread, transfer: ArrayBuffer[] = []): void {
    this.worker.postMessage(message, transfer);
  }
}

export class BuildThreadPool {
  readonly #size: number;
  readonly #logger: EmlApiLogger;
  readonly #threads: BuildThread[] = [];
  #nextId = 1;
  #closed = false;
  /** Why threads cannot be used at all (the first did not start): every message is built here. */
  #unavailable: string | undefined;

  constructor(size: number, logger: EmlApiLogger) {
    this.#size = size;
    this.#logger = logger;
  }

  get threads(): number {
    return this.#threads.length;
  }

  /**
   * Builds a message on a thread, starting one when needed and fewer than the pool's size run.
   * @param bodyUpTo the largest message whose upload body the thread makes too (0: none)
   * @throws {EmlApiError} `EMESSAGE` when Nodemailer fails to build it, `ESTREAM` when its thread dies;
   *   the signal's reason when it aborts
   */
  build(mail: MovableMail, signal: AbortSignal, bodyUpTo = 0): Promise<ThreadBuilt> {
    if (this.#unavailable !== undefined) return Promise.resolve({ kind: 'unmovable', reason: this.#unavailable });
    if (this.#closed) return Promise.resolve({ kind: 'unmovable', reason: 'the build threads are closed' });
    signal.throwIfAborted();
    const thread = this.#pick();
    const id = this.#nextId++;
    return new Promise<ThreadBuilt>((resolve, reject) => {
      const onAbort = () => {
        const job = thread.jobs.get(id);
        if (!job) return;
        this.#finish(thread, id);
        thread.send({ type: 'cancel', id });
        if (job.stream) job.stream.destroy(signal.reason as Error);
        else reject(signal.reason);
      };
      const job: Job = {
        resolve: (built) => {
          signal.removeEventListener('abort', onAbort);
          resolve(built);
        },
        reject: (err) => {
          signal.removeEventListener('abort', onAbort);
          reject(err);
        },
        owed: 0,
        done: false,
      };
      if (thread.jobs.size === 0) thread.worker.ref();
      thread.jobs.set(id, job);
      signal.addEventListener('abort', onAbort, { once: true });
      const request: BuildRequest = { type: 'build', id, bodyUpTo, ...mail.request };
      try {
        thread.send(request, mail.transfer);
      } catch (err) {
        // Not cloneable after all: nothing reached the thread.
        this.#finish(thread, id);
        job.resolve({ kind: 'unmovable', reason: `its data cannot be copied to a thread (${(err as Error).message})` });
      }
    });
  }

  /** Ends every thread; builds still running fail (the transport's close() waits for its sends first). */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#threads.map((thread) => thread.worker.terminate()));
  }

  /**
   * The first thread with room (fewer than QUEUED_BEFORE_NEW_THREAD builds); a new one only once every thread has a
   * build waiting; past the pool's size, the least busy. On a machine with few cores a thread more than the work needs
   * costs CPU (switching, cold caches, its own garbage collection) instead of adding any.
   */
  #pick(): BuildThread {
    for (const thread of this.#threads) if (thread.jobs.size < QUEUED_BEFORE_NEW_THREAD) return thread;
    if (this.#threads.length < this.#size) return this.#start();
    let best = this.#threads[0]!;
    for (const thread of this.#threads) if (thread.jobs.size < best.jobs.size) best = thread;
    return best;
  }

  #start(): BuildThread {
    const { entry, source } = threadEntry();
    const worker = source
      ? new Worker(sourceLoader(entry), { eval: true, env: {}, execArgv: [] })
      : new Worker(entry, { env: {}, execArgv: [] });
    const thread = new BuildThread(worker);
    this.#threads.push(thread);
    worker.on('message', (message: FromThread) => this.#receive(thread, message));
    worker.on('error', (err) => {
      thread.error = err;
    });
    worker.on('messageerror', (err) => {
      thread.error = err;
    });
    worker.once('exit', (code) => this.#exited(thread, code));
    return thread;
  }

  #receive(thread: BuildThread, message: FromThread): void {
    if (message.type === 'ready') {
      thread.ready = true;
      return;
    }
    const job = thread.jobs.get(message.id);
    if (!job) return; // cancelled
    switch (message.type) {
      case 'chunk':
        this.#push(thread, message.id, job, toBuffer(message.bytes));
        return;
      case 'done': {
        this.#finish(thread, message.id);
        const last = toBuffer(message.bytes);
        if (!job.stream) {
          const body = message.body ? toBuffer(message.body) : undefined;
          job.resolve({ kind: 'whole', eml: last, checked: message.checked, body });
        } else {
          if (last.length > 0) job.stream.push(last);
          job.stream.push(null);
        }
        return;
      }
      case 'failed': {
        this.#finish(thread, message.id);
        const err = buildError(fromThreadError(message.error));
        if (job.stream) job.stream.destroy(err);
        else job.reject(err);
        return;
      }
      case 'unmovable':
        this.#finish(thread, message.id);
        job.resolve({ kind: 'unmovable', reason: message.reason });
        return;
    }
  }

  #push(thread: BuildThread, id: number, job: Job, bytes: Buffer): void {
    if (!job.stream) {
      const ack = () => {
        if (job.owed === 0 || job.done) return;
        thread.send({ type: 'ack', id, bytes: job.owed });
        job.owed = 0;
      };
      job.stream = new Readable({
        read: ack,
        // The reader gave up (an abort, a spool file that failed): the thread stops building.
        destroy: (err, callback) => {
          if (!job.done) {
            this.#finish(thread, id);
            thread.send({ type: 'cancel', id });
          }
          callback(err);
        },
      });
      job.resolve({ kind: 'stream', stream: job.stream });
    }
    if (job.stream.push(bytes)) thread.send({ type: 'ack', id, bytes: bytes.length });
    else job.owed += bytes.length;
  }

  /** A job ends; a thread with none no longer keeps the process alive. */
  #finish(thread: BuildThread, id: number): void {
    const job = thread.jobs.get(id);
    if (job) job.done = true;
    thread.jobs.delete(id);
    if (thread.jobs.size === 0) thread.worker.unref();
  }

  #exited(thread: BuildThread, code: number): void {
    const at = this.#threads.indexOf(thread);
    if (at !== -1) this.#threads.splice(at, 1);
    const jobs = [...thread.jobs.values()];
    thread.jobs.clear();
    if (jobs.length === 0 && (this.#closed || thread.ready)) return;
    if (!thread.ready) {
      // It never started (its file is missing from a bundle...): build on the sending thread from now on.
      const why = thread.error?.message ?? `exit code ${code}`;
      this.#unavailable ??= `the build thread did not start (${why})`;
      this.#logger.warn({ error: why }, 'Build threads are not available; messages are built on the sending thread');
      for (const job of jobs) job.resolve({ kind: 'unmovable', reason: this.#unavailable });
      return;
    }
    const err = new EmlApiError(
      'ESTREAM',
      `The build thread stopped while building the message (${thread.error ? thread.error.message : `exit code ${code}`}); nothing was sent, and the next message gets a new thread`,
      { cause: thread.error, permanent: false },
    );
    this.#logger.warn({ error: err.message }, 'A build thread stopped');
    for (const job of jobs) {
      job.done = true;
      if (job.stream) job.stream.destroy(err);
      else job.reject(err);
    }
  }
}

function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The thread's script beside this module: dist/build-thread.js or .cjs when built, ./thread.ts from source. */
function threadEntry(): { entry: URL; source: boolean } {
  const here = import.meta.url;
  if (/\.[cm]?ts$/.test(here)) return { entry: new URL('./thread.ts', here), source: true };
  return { entry: new URL(here.endsWith('.cjs') ? './build-thread.cjs' : './build-thread.js', here), source: false };
}

/** From source, the thread registers tsx (a development dependency) before it loads its TypeScript. */
function sourceLoader(entry: URL): string {
  // The ES module of tsx's API (what an `import` of it resolves to; require.resolve would give the CommonJS one).
  const manifest = createRequire(import.meta.url).resolve('tsx/package.json');
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as {
    exports: Record<string, { import: { default: string } }>;
  };
  const api = new URL(exports['./esm/api']!.import.default, pathToFileURL(manifest)).href;
  return `import(${JSON.stringify(api)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`;
}
