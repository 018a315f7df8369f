import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import { wholeFlag } from '../cli-io.js';
import { EmlApiMetrics, loadPromClient, type MetricsRegistry } from '../../observability/metrics.js';
import {
  HealthMonitor,
  startOpsEndpoint,
  type HealthReport,
  type OpsEndpoint,
  type ReadinessCheck,
} from '../../observability/ops-server.js';
import type { PrimaryLink } from '../../relay/shared-limits.js';

/** Set by the primary when it forks: the process's role in the group (`relay`, `worker`). */
const ROLE_VARIABLE = 'EML_API_PROCESS_ROLE';
/** The port every relay process listens with (cluster shares it). */
const PORT_VARIABLE = 'EML_API_PROCESS_PORT';
/** Set when the primary serves `/metrics`. */
const METRICS_VARIABLE = 'EML_API_PROCESS_METRICS';

/** Help line of `--processes`. */
export const PROCESSES_HELP = `  --processes <n|auto>    run n processes (auto: one per core) under one primary, which restarts
                          any that dies; see "Several processes" in the docs
`;

/**
 * Reads `--processes`: a number, or `auto` for `os.availableParallelism()` (which follows a container's CPU affinity).
 * @throws {UsageError} for anything else
 */
export function processesFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (value.trim() === 'auto') return availableParallelism();
  return wholeFlag(value, '--processes', 1, 1024);
}

/** Its role when a primary forked it, else undefined. */
export function groupRole(env: Readonly<Record<string, string | undefined>>): string | undefined {
  return cluster.isWorker ? env[ROLE_VARIABLE] : undefined;
}

/** What a process keeps for its primary's `/metrics` (prom-client's `Registry`). */
export type MemberRegistry = MetricsRegistry & { getMetricsAsJSON(): Promise<unknown> };

/**
 * The port a group's relay process listens on, and the `metrics` option of a process whose primary
 * serves `/metrics`: a registry of its own with the process metrics.
 */
export function memberSettings(env: Readonly<Record<string, string | undefined>>): {
  port: number;
  metrics: { registry: MemberRegistry } | undefined;
} {
  const metrics =
    env[METRICS_VARIABLE] === '1'
      ? (EmlApiMetrics.defaultWithHttp(undefined, true, 'eml-api --processes (for /metrics)') as {
          registry: MemberRegistry;
        })
      : undefined;
  return { port: Number(env[PORT_VARIABLE] ?? 0), metrics };
}

/** Cluster IPC between the primary and its processes. */
type GroupMessage =
  | { group: 'ask'; id: number; what: string; args?: unknown }
  | { group: 'answer'; id: number; value: unknown }
  | { group: 'tell'; what: string; args?: unknown }
  | { group: 'started'; port?: number }
  | { group: 'stopped'; code: number; givenUp: number; metrics?: Snapshot }
  | { group: 'stop' }
  | { group: 'hurry' };

function isGroupMessage(message: unknown): message is GroupMessage {
  return typeof message === 'object' && message !== null && typeof (message as { group?: unknown }).group === 'string';
}

/** As prom-client's `getMetricsAsJSON()` gives them and `AggregatorRegistry.aggregate()` takes them. */
type Snapshot = {
  name: string;
  help: string;
  type: string;
  aggregator: string;
  values: { value: number; labels: Record<string, string | number>; metricName?: string }[];
}[];

/** Settings of a {@link ProcessGroup}. */
export interface ProcessGroupSettings {
  /** Also the metrics' `component` label. */
  role: 'relay' | 'worker';
  processes: number;
  /** Milliseconds a process has to finish after a stop; 5 s past it, it is killed. */
  grace: number;
  /** 0: the one the first process was given. */
  port?: number;
  /** Served by the primary for all. */
  http?: { port: number; host: string } | undefined;
  /** Needs prom-client. */
  metrics: boolean;
  /** Never shown in a `/readyz` reason. */
  secrets: (string | undefined)[];
  /** Answers what a process asks that the group does not (the relay's shared limits). */
  serve?: (process: number, what: string, args: unknown) => { value: unknown } | undefined;
  /** What a gone process held is given back. */
  exited?: (process: number) => void;
  /** Writes a line about the group (a process that died, its replacement) to stderr. */
  log: (line: string) => void;
}

interface Member {
  readonly worker: Worker;
  readonly pid: number;
  /** If one of the first cannot start, the group does not. */
  readonly initial: boolean;
  started: boolean;
  gone: boolean;
  stopCode?: number;
  givenUp: number;
  /** As last seen (a scrape, or its last words): counted on when it is gone. */
  last?: Snapshot;
  readonly exit: Promise<{ code: number | null; signal: string | null }>;
  /** False when it exited before saying it started. */
  readonly ready: Promise<boolean>;
  settle: (started: boolean) => void;
}

/** Less than a probe's 5 s. */
const ASK_TIMEOUT = 3_000;

const MAX_RESTART_DELAY = 30_000;

/**
 * The primary of `eml-api relay|worker --processes`: forks the processes (`node:cluster` shares the
 * relay's port), replaces any that dies, serves one health and metrics port for all (`/metrics`
 * summed with prom-client's AggregatorRegistry, `/readyz` ready only when every process is), and
 * stops them all on SIGTERM within the grace period.
 */
export class ProcessGroup {
  readonly #settings: ProcessGroupSettings;
  readonly #members = new Set<Member>();
  readonly #pending = new Map<number, { member: Member; resolve: (value: unknown) => void }>();
  #nextAsk = 1;
  #stopping = false;
  #restarts = 0;
  #recentDeaths: number[] = [];
  /** Held, not unref'd: with every process gone they are all that keeps the primary running. */
  readonly #restartTimers = new Set<NodeJS.Timeout>();
  /** 0 until one reported the port it got. */
  #listenPort: number;
  #boundPort: number | undefined;
  /** Summed over the processes gone, so the totals never go down. */
  #retired: Promise<Snapshot> = Promise.resolve([]);
  #endpoint: OpsEndpoint | undefined;
  #stopped: Promise<number> | undefined;
  #givenUp = 0;
  readonly #onMessage = (worker: Worker, message: unknown) => {
    try {
      this.#message(worker, message);
    } catch (err) {
      this.#settings.log(`a message of process ${worker.process.pid} failed: ${(err as Error).message}`);
    }
  };

  constructor(settings: ProcessGroupSettings) {
    this.#settings = settings;
    this.#listenPort = settings.port ?? 0;
    cluster.on('message', this.#onMessage);
  }

  /** Started, not stopping. */
  get running(): number {
    return [...this.#members].filter((m) => m.started && !m.gone).length;
  }

  /** The relay's messages in flight the processes gave up when they stopped. */
  get givenUp(): number {
    return this.#givenUp;
  }

  get endpoint(): OpsEndpoint | undefined {
    return this.#endpoint;
  }

  /**
   * Starts one process first (a setting that stops it, such as a port in use, is said once), then the others.
   * @returns the port they listen on (relay), once all are started
   * @throws {GroupStartError} with the exit code of a process that could not start (the others are stopped)
   */
  async start(): Promise<{ port: number | undefined }> {
    await this.#await([this.#fork(true)]);
    if (!this.#stopping) {
      await this.#await(Array.from({ length: this.#settings.processes - 1 }, () => this.#fork(true)));
    }
    const { http, metrics } = this.#settings;
    if (http && !this.#stopping) {
      this.#endpoint = await startOpsEndpoint(
        { ...http, readyCacheMs: 0 },
        {
          checks: [{ name: 'processes', check: () => this.#readiness() }],
          secrets: this.#settings.secrets,
        },
        metrics
          ? { registry: { metrics: () => this.metrics(), contentType: loadPromClient('metrics').register.contentType } }
          : undefined,
      );
    }
    return { port: this.#boundPort };
  }

  /**
   * Stops every process, each within the grace period, and the health port.
   * @returns the exit code: 4 when a process gave up work (or was killed), 1 when one failed, else 0
   */
  stop(): Promise<number> {
    this.#stopped ??= (async () => {
      this.#stopping = true;
      for (const timer of this.#restartTimers) clearTimeout(timer);
      this.#restartTimers.clear();
      this.#endpoint?.stopping();
      const members = [...this.#members].filter((m) => !m.gone);
      // Said, not signalled: systemd and a terminal signal the whole group already, and a worker takes
      // a second signal as "at once". One still starting has nothing to finish.
      for (const member of members) {
        if (member.started) send(member.worker, { group: 'stop' });
        else member.worker.process.kill('SIGTERM');
      }
      const kill = setTimeout(() => {
        for (const member of members) if (!member.gone) member.worker.process.kill('SIGKILL');
      }, this.#settings.grace + 5_000);
      const exits = await Promise.all(members.map((m) => m.exit));
      this.#givenUp = members.reduce((sum, m) => sum + m.givenUp, 0);
      clearTimeout(kill);
      await this.#endpoint?.close();
      cluster.off('message', this.#onMessage);
      const codes = members.map((member, i) => {
        const { code, signal } = exits[i]!;
        // One that said how it stopped gave up only what it said, whatever signal then ended it.
        if (member.stopCode !== undefined) return member.stopCode;
        // One signalled while it started had nothing in flight to give up.
        if (signal !== null) return member.started ? 4 : 0;
        return code ?? 4;
      });
      return codes.some((code) => code !== 0 && code !== 4) ? 1 : codes.includes(4) ? 4 : 0;
    })();
    return this.#stopped;
  }

  /** Tells every process but `except` (the one it came from). */
  tell(what: string, args: unknown, except?: number): void {
    for (const member of this.#members) {
      if (!member.gone && member.worker.id !== except) send(member.worker, { group: 'tell', what, args });
    }
  }

  /** A worker hands its jobs in flight back, as on a second signal. */
  hurry(): void {
    for (const member of this.#members) if (!member.gone) send(member.worker, { group: 'hurry' });
  }

  /** Summed over every process, those gone included. */
  async metrics(): Promise<string> {
    const { AggregatorRegistry } = loadPromClient('metrics');
    const live = [...this.#members].filter((m) => m.started && !m.gone);
    const snapshots = await Promise.all(
      live.map(async (member) => {
        const snapshot = (await this.#ask(member, 'metrics')) as Snapshot | undefined;
        if (snapshot && !member.gone) member.last = snapshot;
        return member.last ?? [];
      }),
    );
    // A process gone meanwhile is counted once: in the retired sums.
    const current = snapshots.filter((_, i) => !live[i]!.gone);
    const own: Snapshot = [
      {
        name: 'eml_api_processes',
        help: 'Processes running (--processes), by component',
        type: 'gauge',
        values: [{ value: this.running, labels: { component: this.#settings.role } }],
        aggregator: 'sum',
      },
      {
        name: 'eml_api_process_restarts_total',
        help: 'Processes started again after one died, by component',
        type: 'counter',
        values: [{ value: this.#restarts, labels: { component: this.#settings.role } }],
        aggregator: 'sum',
      },
    ];
    return AggregatorRegistry.aggregate([...current, await this.#retired, own] as never).metrics();
  }

  #fork(initial: boolean): Member {
    const { role } = this.#settings;
    // cluster keys the shared handle by the port argument: every process passes the same one, and once
    // none is left, the port the first one got, so that the port stays.
    const alive = [...this.#members].some((m) => !m.gone);
    if (!alive && this.#boundPort !== undefined) this.#listenPort = this.#boundPort;
    const worker = cluster.fork({
      [ROLE_VARIABLE]: role,
      [PORT_VARIABLE]: String(this.#listenPort),
      [METRICS_VARIABLE]: this.#settings.http && this.#settings.metrics ? '1' : '0',
    });
    const exit = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
      worker.once('exit', (code, signal) => resolve({ code, signal })),
    );
    let settle!: (started: boolean) => void;
    const member: Member = {
      worker,
      pid: worker.process.pid ?? 0,
      initial,
      started: false,
      gone: false,
      givenUp: 0,
      exit,
      ready: new Promise<boolean>((resolve) => (settle = resolve)),
      settle: (started) => settle(started),
    };
    this.#members.add(member);
    void exit.then((how) => {
      member.settle(false);
      this.#gone(member, how);
    });
    return member;
  }

  /** One that exits first stops them all. */
  async #await(members: Member[]): Promise<void> {
    const member = await new Promise<Member | undefined>((resolve) => {
      let left = members.length;
      if (left === 0) resolve(undefined);
      for (const m of members) {
        void this.#startedOrExit(m).then((started) => {
          if (started !== true) resolve(started);
          else if (--left === 0) resolve(undefined);
        });
      }
    });
    if (member === undefined || this.#stopping) return;
    const { code } = await member.exit;
    await this.stop();
    throw new GroupStartError(member.stopCode ?? code ?? 1);
  }

  async #startedOrExit(member: Member): Promise<true | Member> {
    return (await member.ready) ? true : member;
  }

  #gone(member: Member, how: { code: number | null; signal: string | null }): void {
    member.gone = true;
    this.#members.delete(member);
    this.#settings.exited?.(member.worker.id);
    for (const [id, ask] of this.#pending) {
      if (ask.member !== member) continue;
      this.#pending.delete(id);
      ask.resolve(undefined);
    }
    const last = member.last;
    if (last) {
      const counted = last.filter((metric) => metric.type === 'counter' || metric.type === 'histogram');
      const { AggregatorRegistry } = loadPromClient('metrics');
      this.#retired = this.#retired.then(
        async (retired) =>
          (await AggregatorRegistry.aggregate([retired, counted] as never).getMetricsAsJSON()) as unknown as Snapshot,
      );
    }
    if (this.#stopping || (member.initial && !member.started)) return;
    const reason = how.signal ? `signal ${how.signal}` : `exit code ${how.code}`;
    const now = Date.now();
    this.#recentDeaths = [...this.#recentDeaths.filter((at) => now - at < 60_000), now];
    // 0.1 s, 0.2 s... up to 30 s for a process that keeps dying.
    const delay = Math.min(MAX_RESTART_DELAY, 100 * 2 ** (this.#recentDeaths.length - 1));
    this.#settings.log(
      `${this.#settings.role} process ${member.pid} died (${reason}); starting another in ${delay / 1000} s`,
    );
    const timer = setTimeout(() => {
      this.#restartTimers.delete(timer);
      this.#replace();
    }, delay);
    this.#restartTimers.add(timer);
  }

  /** One that cannot start (Redis down) is replaced in turn. */
  #replace(): void {
    if (this.#stopping) return;
    this.#restarts++;
    this.#fork(false);
  }

  async #readiness(): Promise<void> {
    const live = [...this.#members].filter((m) => m.started && !m.gone);
    const { processes } = this.#settings;
    if (live.length < processes) throw new Error(`${live.length} of ${processes} processes running`);
    const reports = await Promise.all(
      live.map(async (m) => [m, (await this.#ask(m, 'readiness')) as HealthReport | undefined] as const),
    );
    const failing = reports
      .filter(([, report]) => report?.status !== 'ok')
      .map(([member, report]) => {
        const why = Object.entries(
          report?.checks ?? { answer: { status: 'fail', reason: `no answer within ${ASK_TIMEOUT / 1000} s` } },
        )
          .filter(([, check]) => check.status !== 'ok')
          .map(([name, check]) => `${name}: ${check.reason ?? 'fail'}`)
          .join(', ');
        return `process ${member.pid}: ${why}`;
      });
    if (failing.length > 0)
      throw new Error(`${live.length - failing.length} of ${processes} processes ready; ${failing.join('; ')}`);
  }

  /** Undefined when the process is gone or silent for {@link ASK_TIMEOUT} ms. */
  #ask(member: Member, what: string): Promise<unknown> {
    return new Promise((resolve) => {
      const id = this.#nextAsk++;
      const done = (value: unknown) => {
        clearTimeout(timer);
        this.#pending.delete(id);
        resolve(value);
      };
      const timer = setTimeout(() => done(undefined), ASK_TIMEOUT);
      this.#pending.set(id, { member, resolve: done });
      send(member.worker, { group: 'ask', id, what }, () => done(undefined));
    });
  }

  #message(worker: Worker, message: unknown): void {
    if (!isGroupMessage(message)) return;
    const member = [...this.#members].find((m) => m.worker === worker);
    switch (message.group) {
      case 'started':
        if (member) member.started = true;
        member?.settle(true);
        if (member && !member.initial) this.#settings.log(`${this.#settings.role} process ${member.pid} started`);
        if (message.port !== undefined) this.#boundPort ??= message.port;
        return;
      case 'stopped':
        if (!member) return;
        member.stopCode = message.code;
        member.givenUp = message.givenUp;
        if (message.metrics) member.last = message.metrics;
        return;
      case 'answer': {
        const ask = this.#pending.get(message.id);
        this.#pending.delete(message.id);
        ask?.resolve(message.value);
        return;
      }
      case 'ask': {
        const answer = this.#settings.serve?.(worker.id, message.what, message.args);
        send(worker, { group: 'answer', id: message.id, value: answer?.value });
        return;
      }
      case 'tell':
        this.#settings.serve?.(worker.id, message.what, message.args);
        return;
      default:
        return;
    }
  }
}

/** A process of the group could not start: the group stopped, with its exit code. */
export class GroupStartError extends Error {
  override readonly name = 'GroupStartError';
  constructor(readonly exitCode: number) {
    super(`a process could not start (exit code ${exitCode})`);
  }
}

function send(worker: Worker, message: GroupMessage, failed?: () => void): void {
  if (!worker.isConnected()) {
    failed?.();
    return;
  }
  worker.send(message, (err: Error | null) => {
    if (err) failed?.();
  });
}

/** A process of a {@link ProcessGroup}: asks and tells its primary, answers its questions, and hears when to stop. */
export class GroupMember implements PrimaryLink {
  readonly #pending = new Map<number, (value: unknown) => void>();
  readonly #heard = new Map<string, (args: unknown) => void>();
  #nextAsk = 1;
  #registry: MemberRegistry | undefined;
  #health: HealthMonitor | undefined;
  #stop!: () => void;
  #hurry!: () => void;
  /** Resolves when its primary says to stop, or on SIGTERM or SIGINT. */
  readonly stopRequested = new Promise<void>((resolve) => (this.#stop = resolve));
  /** Resolves when its primary says to stop at once (a second signal to it), or on a second SIGTERM or SIGINT. */
  readonly hurryRequested = new Promise<void>((resolve) => (this.#hurry = resolve));
  readonly #onMessage = (message: unknown) => this.#message(message);
  #signals = 0;
  /** A second one stops at once, as a second signal to a process alone does. */
  readonly #onSignal = () => (++this.#signals === 1 ? this.#stop() : this.#hurry());
  readonly #onDisconnect = () => {
    for (const resolve of this.#pending.values()) resolve(undefined);
    this.#pending.clear();
  };

  constructor() {
    process.on('message', this.#onMessage);
    process.on('disconnect', this.#onDisconnect);
    // systemd and a terminal's Ctrl-C signal every process of the group, not only the primary.
    process.on('SIGTERM', this.#onSignal);
    process.on('SIGINT', this.#onSignal);
  }

  ask(what: string, args: unknown): Promise<unknown> {
    return new Promise((resolve) => {
      const id = this.#nextAsk++;
      this.#pending.set(id, resolve);
      this.#send({ group: 'ask', id, what, args }, () => {
        this.#pending.delete(id);
        resolve(undefined);
      });
    });
  }

  tell(what: string, args: unknown): void {
    this.#send({ group: 'tell', what, args });
  }

  /** Handles what the primary tells every process. */
  hear(what: string, handle: (args: unknown) => void): void {
    this.#heard.set(what, handle);
  }

  serveMetrics(registry: MemberRegistry | undefined): void {
    this.#registry = registry;
  }

  /** Each result reused for 10 s, as on a port of its own. */
  serveReadiness(checks: ReadinessCheck[], secrets: (string | undefined)[]): void {
    this.#health?.close();
    this.#health = new HealthMonitor({ checks, secrets });
  }

  /** Tells the primary the process runs (on `port`, for a relay). */
  started(port?: number): void {
    this.#send({ group: 'started', ...(port === undefined ? {} : { port }) });
  }

  /** Tells the primary how the process stopped, with its last metrics; resolves once sent. */
  async stopped(code: number, givenUp = 0): Promise<void> {
    this.#health?.stopping();
    const metrics = (await this.#registry?.getMetricsAsJSON().catch(() => undefined)) as Snapshot | undefined;
    await new Promise<void>((resolve) =>
      this.#send({ group: 'stopped', code, givenUp, ...(metrics ? { metrics } : {}) }, resolve, resolve),
    );
  }

  /** Leaves the group: the process then exits with the code it sets (cluster's disconnect would exit at once, with 0). */
  close(): void {
    this.#health?.close();
    process.off('message', this.#onMessage);
    process.off('disconnect', this.#onDisconnect);
    process.off('SIGTERM', this.#onSignal);
    process.off('SIGINT', this.#onSignal);
    if (cluster.worker?.isConnected()) cluster.worker.disconnect();
  }

  #message(message: unknown): void {
    if (!isGroupMessage(message)) return;
    if (message.group === 'stop') return this.#stop();
    if (message.group === 'hurry') return this.#hurry();
    if (message.group === 'tell') return this.#heard.get(message.what)?.(message.args);
    if (message.group === 'answer') {
      const resolve = this.#pending.get(message.id);
      this.#pending.delete(message.id);
      resolve?.(message.value);
      return;
    }
    if (message.group !== 'ask') return;
    const { id } = message;
    const answer = async (): Promise<unknown> => {
      if (message.what === 'metrics') return this.#registry?.getMetricsAsJSON();
      if (message.what === 'readiness') {
        return this.#health
          ? this.#health.readiness()
          : ({ status: 'fail', checks: { starting: { status: 'fail', reason: 'starting' } } } satisfies HealthReport);
      }
      return undefined;
    };
    void answer()
      .catch(() => undefined)
      .then((value) => this.#send({ group: 'answer', id, value }));
  }

  #send(message: GroupMessage, failed?: () => void, sent?: () => void): void {
    if (!process.connected || !process.send) {
      failed?.();
      return;
    }
    process.send(message, undefined, {}, (err: Error | null) => (err ? failed?.() : sent?.()));
  }
}
