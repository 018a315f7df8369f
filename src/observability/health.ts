import { redact } from '../http/redact.js';

/**
 * One thing a service needs to do its job now (Redis, the email service, its
 * key), checked for `/readyz`.
 * @example
 * const redis: ReadinessCheck = { name: 'redis', check: () => redisClient.ping().then(() => undefined) };
 */
export interface ReadinessCheck {
  /** Names the check in the answer, e.g. `redis`. */
  readonly name: string;
  /** Resolves when ready; rejects with why not (its message is shown, secrets taken out). */
  check(): Promise<void>;
}

/**
 * What `/healthz` and `/readyz` answer, as JSON: `status` and each check's.
 * @example
 * { "status": "fail", "checks": { "redis": { "status": "ok" }, "service": { "status": "fail", "reason": "..." } } }
 */
export interface HealthReport {
  status: 'ok' | 'fail';
  checks: Record<string, { status: 'ok' | 'fail'; reason?: string }>;
}

/**
 * Settings of a {@link HealthMonitor}.
 * @example
 * new HealthMonitor({ checks: [redisCheck], secrets: [apiKey] });
 */
export interface HealthMonitorSettings {
  /** What `/readyz` checks. */
  checks: ReadinessCheck[];
  /** Liveness beyond the event loop: returns why the process is stuck, or undefined. */
  stuck?: () => string | undefined;
  /** Strings never shown in a reason (the API key, a Redis password). */
  secrets?: (string | undefined)[];
  /** How long a readiness result is reused, in ms: a probe every second costs the service no request a second. @default 10000 */
  cacheMs?: number;
  /** How long a check may take before it counts as failed, in ms. @default 5000 */
  timeoutMs?: number;
  /** How late the event loop may run before the process counts as stuck, in ms. @default 10000 */
  maxLagMs?: number;
}

/** How often the event loop's heartbeat beats, in ms. */
const BEAT = 500;

/**
 * Liveness and readiness of a long-running part (the relay, a worker):
 * - alive: its event loop turns (a heartbeat timer ran within `maxLagMs`), and
 *   nothing it watches says it is stuck. A process whose loop is blocked does
 *   not answer at all, which a probe's timeout counts as a failure too.
 * - ready: every check passed, within `timeoutMs`, at most `cacheMs` ago; and
 *   it is not stopping (from {@link HealthMonitor.stopping} on, `/readyz` fails,
 *   so that a load balancer sends it no more work while it finishes).
 *
 * @example
 * const health = new HealthMonitor({ checks: [redisCheck] });
 * const { status } = await health.readiness();
 */
export class HealthMonitor {
  readonly #settings: Required<Omit<HealthMonitorSettings, 'stuck'>> & Pick<HealthMonitorSettings, 'stuck'>;
  readonly #results = new Map<string, { at: number; reason: string | undefined }>();
  readonly #running = new Map<string, Promise<void>>();
  readonly #heartbeat: NodeJS.Timeout;
  #lastBeat = Date.now();
  #stopping = false;
  #stop!: (value: 'stopping') => void;
  readonly #stopped = new Promise<'stopping'>((resolve) => (this.#stop = resolve));

  constructor(settings: HealthMonitorSettings) {
    this.#settings = { cacheMs: 10_000, timeoutMs: 5_000, maxLagMs: 10_000, secrets: [], ...settings };
    this.#heartbeat = setInterval(() => (this.#lastBeat = Date.now()), BEAT);
    // The heartbeat must never keep a process alive that has nothing else to do.
    this.#heartbeat.unref();
  }

  /**
   * Whether the process is alive and not stuck (`/healthz`).
   * @example
   * if (health.liveness().status === 'fail') process.exitCode = 1;
   */
  liveness(): HealthReport {
    const late = Date.now() - this.#lastBeat;
    const loop =
      late > this.#settings.maxLagMs + BEAT
        ? `the event loop was blocked: its last turn was ${Math.round(late / 1000)} s ago`
        : undefined;
    const stuck = this.#settings.stuck?.();
    const checks: HealthReport['checks'] = {
      'event-loop': loop ? { status: 'fail', reason: loop } : { status: 'ok' },
      ...(this.#settings.stuck ? { running: stuck ? { status: 'fail', reason: stuck } : { status: 'ok' } } : {}),
    };
    return { status: loop || stuck ? 'fail' : 'ok', checks };
  }

  /**
   * Whether the part can do its job now (`/readyz`): each check's last result
   * when it is recent, or a new run of it.
   * @example
   * const report = await health.readiness(); // { status: 'ok', checks: { redis: { status: 'ok' } } }
   */
  async readiness(): Promise<HealthReport> {
    if (!this.#stopping) {
      const checks: HealthReport['checks'] = {};
      const ran = Promise.all(
        this.#settings.checks.map(async ({ name }) => {
          const cached = this.#results.get(name);
          if (!cached || Date.now() - cached.at >= this.#settings.cacheMs) await this.#run(name);
          const { reason } = this.#results.get(name)!;
          checks[name] = reason === undefined ? { status: 'ok' } : { status: 'fail', reason };
        }),
      );
      // A probe that arrived just before a SIGTERM gets its answer when the stop begins, not after a
      // check of a slow service that could outlast the process.
      if ((await Promise.race([ran.then(() => 'ran' as const), this.#stopped])) === 'ran') {
        return { status: Object.values(checks).every((c) => c.status === 'ok') ? 'ok' : 'fail', checks };
      }
    }
    // The answer is "no" whatever the checks say: it is given at once, with the last results seen.
    const checks: HealthReport['checks'] = {
      stopping: { status: 'fail', reason: 'shutting down: finishing the work in flight' },
    };
    for (const [name, { reason }] of this.#results) {
      checks[name] = reason === undefined ? { status: 'ok' } : { status: 'fail', reason };
    }
    return { status: 'fail', checks };
  }

  /**
   * From now on `/readyz` fails with "shutting down".
   * @example
   * process.once('SIGTERM', () => health.stopping());
   */
  stopping(): void {
    this.#stopping = true;
    this.#stop('stopping');
  }

  /**
   * Stops the heartbeat.
   * @example
   * health.close();
   */
  close(): void {
    clearInterval(this.#heartbeat);
  }

  /** Runs a check once, however many probes ask at the same time. */
  #run(name: string): Promise<void> {
    let running = this.#running.get(name);
    if (running) return running;
    const { check } = this.#settings.checks.find((c) => c.name === name)!;
    running = (async () => {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${this.#settings.timeoutMs} ms`)),
          this.#settings.timeoutMs,
        );
      });
      let reason: string | undefined;
      try {
        await Promise.race([check(), timeout]);
      } catch (err) {
        const text = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim();
        const secrets = this.#settings.secrets.filter((secret): secret is string => Boolean(secret));
        reason = secrets.reduce((said, secret) => redact(said, secret), text).slice(0, 500) || 'failed';
      } finally {
        clearTimeout(timer);
      }
      this.#results.set(name, { at: Date.now(), reason });
    })().finally(() => this.#running.delete(name));
    this.#running.set(name, running);
    return running;
  }
}
