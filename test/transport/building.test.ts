import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { BuildGate, SENDING_THREAD_BUILDS } from '../../src/transport/build-message.js';
import { rejectionOf, eventually } from '../helpers/async.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';

/**
 * Building a message is part of its send: it waits for a connection slot like
 * the upload (memory bounded by maxConnections, as Nodemailer's SMTP pool
 * does), and timeouts.total and close() cover it.
 */

let emu: Emulator;

beforeAll(async () => {
  emu = await startEmulator();
});

afterAll(() => emu.close());

/** An attachment stream that sends one chunk and then never ends (a stalled upload or URL); `onRead` when first read. */
function stalledStream(onRead?: () => void): Readable {
  let sent = false;
  return new Readable({
    read() {
      if (!sent) {
        onRead?.();
        this.push(Buffer.from('partial content '));
      }
      sent = true;
    },
  });
}

const message = (to: string, content: Readable | Buffer | string) => ({
  from: 'shop@example.test',
  to,
  subject: 'Report',
  text: 'See the attachment',
  attachments: [{ filename: 'report.txt', content }],
});

describe('a send whose attachment stalls', () => {
  it('fails with ETIMEDOUT after timeouts.total, naming the build, instead of hanging', async () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, timeouts: { total: 300 } });
    const transporter = nodemailer.createTransport(transport);
    const err = await rejectionOf(transporter.sendMail(message('stall-1@example.test', stalledStream())));
    expect(err.code).toBe('ETIMEDOUT');
    expect(err.message).toContain('timeouts.total, 300 ms');
    expect(err.message).toContain('while the message was being built');
    expect(emu.mailbox('stall-1@example.test')).toHaveLength(0);
    await transport.close();
  });

  it('keeps close() waiting until it ends, and close({ abort: true }) ends it with EABORT', async () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    const transporter = nodemailer.createTransport(transport);
    const sending = rejectionOf(transporter.sendMail(message('stall-2@example.test', stalledStream())));
    await eventually(() => transport.client.activeRequests === 1);
    let closed = false;
    const closing = transport.close().then(() => (closed = true));
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(closed).toBe(false);
    await transport.close({ abort: true });
    await closing;
    const err = await sending;
    expect(err.code).toBe('EABORT');
    expect(err.message).toContain('closed with { abort: true }');
  });
});

describe.each(NODEMAILERS)('with $label, queued sends', ({ nodemailer: mailer }) => {
  it('are built only once a connection slot is free: never more than maxConnections at once', async () => {
    emu.setFaults({ latencyMs: 40 });
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, maxConnections: 2 });
    const transporter = mailer.createTransport(transport);
    let started = 0;
    let finished = 0;
    let mostInMemory = 0;
    // Each attachment records, when Nodemailer starts reading it, how many messages are built but not yet sent.
    const tracked = () => {
      let read = false;
      return new Readable({
        read() {
          if (!read) {
            read = true;
            started++;
            mostInMemory = Math.max(mostInMemory, started - finished);
          }
          this.push(Buffer.alloc(64 * 1024, 'a'));
          this.push(null);
        },
      });
    };
    try {
      await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          transporter.sendMail(message(`slots-${i}@example.test`, tracked())).then(() => finished++),
        ),
      );
    } finally {
      emu.setFaults(undefined);
      await transport.close();
    }
    expect(started).toBe(12);
    expect(mostInMemory).toBeLessThanOrEqual(2);
  });
});

describe.each(NODEMAILERS)('with $label, many sends with free connection slots', ({ nodemailer: mailer }) => {
  it('are built a few at a time, not all together turn by turn (each build holding its slot meanwhile)', async () => {
    const sends = 40;
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, maxConnections: sends });
    const transporter = mailer.createTransport(transport);
    let building = 0;
    let mostAtOnce = 0;
    // A message's first attachment is read early in its build and its last one at the end: the builds between.
    const stream = (onRead: () => void) => {
      let read = false;
      return new Readable({
        read() {
          if (!read) {
            read = true;
            onRead();
          }
          this.push(Buffer.alloc(2048, 'a'));
          this.push(null);
        },
      });
    };
    const tracked = (i: number) => {
      const last = stream(() => undefined);
      last.once('end', () => building--);
      return {
        ...message(`turns-${i}@example.test`, ''),
        attachments: [
          { filename: 'first.txt', content: stream(() => (mostAtOnce = Math.max(mostAtOnce, ++building))) },
          { filename: 'second.txt', content: Buffer.alloc(2048, 'b') },
          { filename: 'last.txt', content: last },
        ],
      };
    };
    try {
      await Promise.all(Array.from({ length: sends }, (_, i) => transporter.sendMail(tracked(i))));
    } finally {
      await transport.close();
    }
    // All 40 used to be built together, turn by turn, each finishing about when the last did.
    expect(mostAtOnce).toBeGreaterThan(1);
    expect(mostAtOnce).toBeLessThanOrEqual(SENDING_THREAD_BUILDS);
  });
});

describe('a send queued behind hundreds of builds waiting for their content', () => {
  it('is not held back by them, even from another transport: it goes out within its own timeouts.total', async () => {
    const stalledSends = 400;
    const stalling = new EmlApiTransport({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      maxConnections: stalledSends,
      timeouts: { total: 60_000 },
    });
    const other = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, timeouts: { total: 1500 } });
    let building = 0;
    const stalledOutcomes = Array.from({ length: stalledSends }, (_, i) =>
      nodemailer
        .createTransport(stalling)
        .sendMail(
          message(
            `stalled-${i}@example.test`,
            stalledStream(() => building++),
          ),
        )
        .catch((err: { code?: string }) => err.code),
    );
    try {
      // The stalled builds take every turn of the sending thread first, the others queued behind them.
      await eventually(() => building >= SENDING_THREAD_BUILDS);
      // Handed over eight at a time, each taking a look or two to show it stalled, they held this for 2 s and more.
      const info = await nodemailer
        .createTransport(other)
        .sendMail({ from: 'shop@example.test', to: 'behind@example.test', text: 'Hi' });
      expect(info.accepted).toEqual(['behind@example.test']);
    } finally {
      await Promise.all([stalling.close({ abort: true }), other.close()]);
    }
    expect(new Set(await Promise.all(stalledOutcomes))).toEqual(new Set(['EABORT']));
  });
});

describe('the gate of builds on the sending thread', () => {
  const held = () => {
    let done!: () => void;
    const promise = new Promise<void>((resolve) => (done = resolve));
    return { promise, done };
  };

  it('runs its width at once and lets the others in, in the order they came, as builds end', async () => {
    const gate = new BuildGate(2, 10_000);
    const signal = new AbortController().signal;
    const builds = Array.from({ length: 4 }, held);
    const order: number[] = [];
    const runs = builds.map((b, i) =>
      gate.run(signal, async () => {
        order.push(i);
        await b.promise;
        return i;
      }),
    );
    await eventually(() => order.length === 2);
    expect(gate.load).toEqual({ running: 2, waiting: 2 });
    builds[1]!.done();
    await eventually(() => order.length === 3);
    expect(order).toEqual([0, 1, 2]);
    for (const b of builds) b.done();
    expect(await Promise.all(runs)).toEqual([0, 1, 2, 3]);
    expect(order).toEqual([0, 1, 2, 3]);
    expect(gate.load).toEqual({ running: 0, waiting: 0 });
  });

  it('lets every waiting build start while the thread is idle (the builds running wait for their content)', async () => {
    const gate = new BuildGate(1, 30);
    const signal = new AbortController().signal;
    const stalled = held();
    let ran = 0;
    const first = gate.run(signal, () => stalled.promise);
    const others = Array.from({ length: 3 }, () =>
      gate.run(signal, async () => {
        ran++;
      }),
    );
    expect(gate.load).toEqual({ running: 1, waiting: 3 });
    await Promise.all(others);
    expect(ran).toBe(3);
    stalled.done();
    await first;
    // Every turn was given back once.
    expect(gate.load).toEqual({ running: 0, waiting: 0 });
  });

  it('while the thread is busy, stops counting a build that writes nothing after a few looks, one that writes only after its last', async () => {
    const signal = new AbortController().signal;
    const stalledGate = new BuildGate(1, 20, 8);
    const writingGate = new BuildGate(1, 20, 8);
    const stalled = held();
    const writing = held();
    let writes = 0;
    const firsts = [
      stalledGate.run(signal, async (turn) => {
        turn.watch(() => 0);
        await stalled.promise;
      }),
      writingGate.run(signal, async (turn) => {
        turn.watch(() => ++writes);
        await writing.promise;
      }),
    ];
    const order: string[] = [];
    const seconds = [
      stalledGate.run(signal, async () => void order.push('behind the stalled build')),
      writingGate.run(signal, async () => void order.push('behind the writing build')),
    ];
    // Busy: the thread spins, with a turn of the event loop every 5 ms for the gates' looks.
    while (order.length < 2) {
      const until = performance.now() + 5;
      while (performance.now() < until);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(order).toEqual(['behind the stalled build', 'behind the writing build']);
    expect(writes).toBeGreaterThanOrEqual(8);
    stalled.done();
    writing.done();
    await Promise.all([...firsts, ...seconds]);
    expect([stalledGate.load, writingGate.load]).toEqual([
      { running: 0, waiting: 0 },
      { running: 0, waiting: 0 },
    ]);
  });

  it("ends a wait with the signal's reason when it aborts, and the turn goes to the next in line", async () => {
    const gate = new BuildGate(1, 10_000);
    const running = held();
    const first = gate.run(new AbortController().signal, () => running.promise);
    const controller = new AbortController();
    let abortedRan = false;
    const aborted = gate.run(controller.signal, async () => {
      abortedRan = true;
    });
    let thirdRan = false;
    const third = gate.run(new AbortController().signal, async () => {
      thirdRan = true;
    });
    const reason = new Error('caller gave up');
    controller.abort(reason);
    await expect(aborted).rejects.toBe(reason);
    expect(gate.load).toEqual({ running: 1, waiting: 1 });
    running.done();
    await first;
    await third;
    expect({ abortedRan, thirdRan }).toEqual({ abortedRan: false, thirdRan: true });
    expect(gate.load).toEqual({ running: 0, waiting: 0 });
  });
});

describe.each(NODEMAILERS)('with $label, a signal that is already aborted', ({ label, nodemailer: mailer }) => {
  it('ends the send with code EABORT before anything is built or sent', async () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    const controller = new AbortController();
    controller.abort();
    let built = false;
    const content = new Readable({
      read() {
        built = true;
        this.push(null);
      },
    });
    const err = await mailer
      .createTransport(transport)
      .sendMail({ ...message('pre-aborted@example.test', content), signal: controller.signal } as never)
      .catch((e: unknown) => e as Error & { code?: string });
    await transport.close();
    expect(err).toMatchObject({ code: 'EABORT' });
    expect(built).toBe(false);
    expect(emu.mailbox('pre-aborted@example.test')).toHaveLength(0);
    // Nodemailer 10 answers a pre-aborted signal itself, before it calls any transport;
    // with older majors the transport gets the send and answers with its own error.
    if (label === 'nodemailer 6.9') expect(err).toBeInstanceOf(EmlApiError);
  });
});
