import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator, type EmulatorFaults } from '../../src/emulator/index.js';

const FAULTS: EmulatorFaults = {
  seed: 20261122,
  unavailable: 0.05,
  rateLimited: 0.05,
  retryAfterSeconds: 0,
  resetBeforeProcessing: 0.03,
  resetAfterProcessing: 0.03,
  latencyMs: [0, 4],
};

/**
 * Sends per run: 50 times the transport's 20 connections, and enough that every kind of fault happens dozens
 * of times (a resend without the first attempt's key is delivered twice at the first lost answer).
 */
const SENDS = 1000;

interface Tally {
  sent: number;
  resolved: number;
  rejected: Record<string, number>;
  rejectedMayHaveBeenAccepted: number;
  deliveredOnce: number;
  deliveredTwiceOrMore: number;
  resolvedButMissing: number;
  rejectedButDelivered: number;
  faults: Record<string, number> | undefined;
}

async function soak(emu: Emulator, count: number, label: string, retryAmbiguous: boolean): Promise<Tally> {
  const transport = new EmlApiTransport({
    apiKey: emu.apiKey,
    baseUrl: emu.url,
    maxConnections: 20,
    retry: { attempts: 9, delay: 5, maxDelay: 200, retryAmbiguous },
  });
  const transporter = nodemailer.createTransport(transport);
  const outcomes = await Promise.all(
    Array.from({ length: count }, (_, n) =>
      transporter
        .sendMail({
          from: 'soak@example.test',
          to: `inbox-${n % 50}@example.test`,
          subject: `${label} ${n}`,
          text: `message ${n}`,
          messageId: `<${label}-${n}@example.test>`,
        })
        .then(
          () => ({ n, ok: true as const }),
          (err: unknown) => ({ n, ok: false as const, err }),
        ),
    ),
  );
  await transport.close();
  const deliveries = new Map<string, number>();
  for (let box = 0; box < 50; box++) {
    for (const copy of emu.mailbox(`inbox-${box}@example.test`)) {
      deliveries.set(copy.messageId, (deliveries.get(copy.messageId) ?? 0) + 1);
    }
  }
  const tally: Tally = {
    sent: count,
    resolved: 0,
    rejected: {},
    rejectedMayHaveBeenAccepted: 0,
    deliveredOnce: 0,
    deliveredTwiceOrMore: 0,
    resolvedButMissing: 0,
    rejectedButDelivered: 0,
    faults: emu.faultStats(),
  };
  for (const outcome of outcomes) {
    const times = deliveries.get(`<${label}-${outcome.n}@example.test>`) ?? 0;
    if (times === 1) tally.deliveredOnce++;
    if (times > 1) tally.deliveredTwiceOrMore++;
    if (outcome.ok) {
      tally.resolved++;
      if (times !== 1) tally.resolvedButMissing++;
    } else {
      expect(outcome.err).toBeInstanceOf(EmlApiError);
      const code = (outcome.err as EmlApiError).code;
      tally.rejected[code] = (tally.rejected[code] ?? 0) + 1;
      if ((outcome.err as EmlApiError).mayHaveBeenAccepted) tally.rejectedMayHaveBeenAccepted++;
      if (times > 0) tally.rejectedButDelivered++;
    }
  }
  return tally;
}

describe('soak: sends through faults (503, 429, resets before and after processing, latency)', () => {
  let emu: Emulator;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  beforeAll(async () => {
    process.on('unhandledRejection', onUnhandled);
    emu = await startEmulator({ faults: FAULTS });
  });
  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled);
    await emu.close();
  });

  it('with retryAmbiguous and Idempotency-Key: 1,000 sends all resolve and each is delivered exactly once', async () => {
    emu.setFaults(FAULTS);
    const tally = await soak(emu, SENDS, 'idem', true);
    console.log('soak tally (retryAmbiguous: true)', JSON.stringify(tally, null, 2));
    // Every kind of fault really happened in this run.
    for (const kind of ['unavailable', 'rateLimited', 'resetBeforeProcessing', 'resetAfterProcessing'] as const) {
      expect(tally.faults![kind], kind).toBeGreaterThan(20);
    }
    expect(tally.resolved).toBe(SENDS);
    expect(tally.deliveredOnce).toBe(SENDS);
    expect(tally.deliveredTwiceOrMore).toBe(0);
    expect(tally.resolvedButMissing).toBe(0);
    expect(unhandled).toEqual([]);
  }, 120_000);

  it('with default retries: 1,000 sends each resolve once or reject typed; none is delivered twice', async () => {
    emu.setFaults({ ...FAULTS, seed: 7 });
    const tally = await soak(emu, SENDS, 'default', false);
    console.log('soak tally (retryAmbiguous: false)', JSON.stringify(tally, null, 2));
    expect(tally.resolved + Object.values(tally.rejected).reduce((a, b) => a + b, 0)).toBe(SENDS);
    expect(tally.deliveredTwiceOrMore).toBe(0);
    expect(tally.resolvedButMissing).toBe(0);
    // Rejections are only the ambiguous ones (the safe faults were retried), each flagged as such.
    expect(tally.rejectedMayHaveBeenAccepted).toBe(SENDS - tally.resolved);
    expect(tally.resolved).toBeGreaterThan(SENDS * 0.85);
    // A rejected send reached the mailboxes only when its answer was lost after processing.
    expect(tally.rejectedButDelivered).toBeLessThanOrEqual(tally.faults?.resetAfterProcessing ?? 0);
    expect(unhandled).toEqual([]);
  }, 120_000);
});
