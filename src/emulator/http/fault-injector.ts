import { configError, refuseUnknownKeys } from '../../shared/options-kit.js';
/**
 * Faults the emulator injects into API requests, for testing how clients cope. Shares are probabilities from 0 to 1,
 * drawn per request from a seeded generator, so a run with the same seed and request order sees the same faults.
 * @example await startEmulator({ faults: { seed: 7, unavailable: 0.05, rateLimited: 0.05, resetAfterProcessing: 0.02, latencyMs: [0, 20] } });
 */
export interface EmulatorFaults {
  /**
   * Seed of the random generator.
   * @default 1
   */
  seed?: number;
  /** Share of requests answered `503 unavailable` without being processed. @default 0 */
  unavailable?: number;
  /** Share of requests answered `429 rate_limited` with `Retry-After`, without being processed. @default 0 */
  rateLimited?: number;
  /** `Retry-After` of injected 429 and 503 answers, in seconds. @default 1 */
  retryAfterSeconds?: number;
  /** Share of requests whose connection is reset as soon as they arrive, before processing. @default 0 */
  resetBeforeProcessing?: number;
  /** Share of requests processed (mail delivered) whose connection is then reset instead of answered. @default 0 */
  resetAfterProcessing?: number;
  /** Added latency per request in ms: a number, or `[min, max]` drawn uniformly. @default 0 */
  latencyMs?: number | [number, number];
}

/** What happens to one request. */
export type FaultKind = 'none' | 'unavailable' | 'rateLimited' | 'resetBeforeProcessing' | 'resetAfterProcessing';

/** Counts of injected faults since the faults were set. */
export type EmulatorFaultStats = Record<FaultKind, number>;

/** A fault drawn for one request. */
export interface FaultDraw {
  kind: FaultKind;
  latencyMs: number;
  retryAfterSeconds: number;
}

const SHARES = ['unavailable', 'rateLimited', 'resetBeforeProcessing', 'resetAfterProcessing'] as const;

/** Every field of {@link EmulatorFaults}. */
const FAULT_FIELDS = [
  ...SHARES,
  'seed',
  'retryAfterSeconds',
  'latencyMs',
] as const satisfies readonly (keyof EmulatorFaults)[];

/** Draws faults from a seeded generator (mulberry32). */
export class FaultInjector {
  readonly #faults: Required<Omit<EmulatorFaults, 'latencyMs'>> & { latency: [number, number] };
  #state: number;
  readonly stats: EmulatorFaultStats = {
    none: 0,
    unavailable: 0,
    rateLimited: 0,
    resetBeforeProcessing: 0,
    resetAfterProcessing: 0,
  };

  /** @throws {EmlApiError} `ECONFIG` naming a bad field */
  constructor(faults: EmulatorFaults) {
    if (typeof faults !== 'object' || faults === null) throw configError('faults', 'expected an object');
    refuseUnknownKeys(faults, FAULT_FIELDS, 'faults.');
    let total = 0;
    for (const key of SHARES) {
      const share = faults[key] ?? 0;
      if (typeof share !== 'number' || !(share >= 0 && share <= 1)) {
        throw configError(`faults.${key}`, `expected a share from 0 to 1, got ${String(share)}`);
      }
      total += share;
    }
    if (total > 1) throw configError(`faults`, `the shares add up to ${total}, more than 1`);
    const latency: [number, number] =
      faults.latencyMs === undefined
        ? [0, 0]
        : typeof faults.latencyMs === 'number'
          ? [faults.latencyMs, faults.latencyMs]
          : // Object(null) is {}: refused below, as any value that is not a pair.
            [Object(faults.latencyMs)[0], Object(faults.latencyMs)[1]];
    if (!latency.every((v) => Number.isFinite(v) && v >= 0) || latency[0] > latency[1]) {
      throw configError('faults.latencyMs', 'expected a number of ms or [min, max] with 0 <= min <= max');
    }
    const retryAfterSeconds = faults.retryAfterSeconds ?? 1;
    if (!Number.isInteger(retryAfterSeconds) || retryAfterSeconds < 0) {
      throw configError('faults.retryAfterSeconds', 'expected a whole number of seconds');
    }
    this.#faults = {
      seed: faults.seed ?? 1,
      unavailable: faults.unavailable ?? 0,
      rateLimited: faults.rateLimited ?? 0,
      resetBeforeProcessing: faults.resetBeforeProcessing ?? 0,
      resetAfterProcessing: faults.resetAfterProcessing ?? 0,
      retryAfterSeconds,
      latency,
    };
    this.#state = this.#faults.seed >>> 0;
  }

  /** Draws the fate of the next request. */
  draw(): FaultDraw {
    const [min, max] = this.#faults.latency;
    const latencyMs = min === max ? min : min + this.#random() * (max - min);
    const r = this.#random();
    let kind: FaultKind = 'none';
    let edge = 0;
    for (const key of SHARES) {
      edge += this.#faults[key];
      if (r < edge) {
        kind = key;
        break;
      }
    }
    this.stats[kind]++;
    return { kind, latencyMs, retryAfterSeconds: this.#faults.retryAfterSeconds };
  }

  /** mulberry32: small, fast, and good enough to spread faults evenly. */
  #random(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}
