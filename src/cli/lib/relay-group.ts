import type { CliIo } from '../cli-io.js';
import { startRelay, type EmlApiRelay } from '../../relay/start-smtp-relay.js';
import type { EmlApiRelayOptions } from '../../relay/relay-options.js';
import { ClientLimitsKeeper, SharedClientCounts } from '../../relay/shared-limits.js';
import { MessageIdentities, type RememberedTry } from '../../relay/message-identities.js';
import { GroupMember, memberSettings, ProcessGroup } from './process-group.js';

/**
 * `eml-api relay --processes`, in the primary: starts processes that share the relay's port, its
 * per-client limits and one health and metrics port, and stands for them as one relay.
 * @throws {GroupStartError} when a process could not start (it said why on standard error)
 */
export async function startRelayGroup(
  options: EmlApiRelayOptions,
  processes: number,
  grace: number,
  io: CliIo,
  secrets: (string | undefined)[],
): Promise<EmlApiRelay> {
  const limits = new ClientLimitsKeeper();
  // A retry after a 451 may reach another process: each one's tries of unknown outcome go to all.
  const tries = new MessageIdentities();
  const shareTries = (process: number, what: string, args: unknown): { value: unknown } | undefined => {
    if (what === 'identities.remembered') return { value: tries.remembered() };
    if (what !== 'identities.settle') return undefined;
    const { fingerprint, remembered } = args as SettledTry;
    tries.learn(fingerprint, remembered);
    group.tell(what, args, process);
    return { value: undefined };
  };
  const group = new ProcessGroup({
    role: 'relay',
    processes,
    grace,
    port: options.port ?? 2525,
    http: options.http && { port: options.http.port, host: options.http.host ?? '127.0.0.1' },
    metrics: options.metrics !== false,
    secrets,
    serve: (process, what, args) => limits.handle(process, what, args) ?? shareTries(process, what, args),
    exited: (process) => limits.forget(process),
    log: (line) => io.stderr.write(`${new Date().toISOString()} ${line}\n`),
  });
  const { port } = await group.start();
  const endpoint = group.endpoint;
  return {
    port: port ?? 0,
    host: options.host ?? '127.0.0.1',
    ...(endpoint ? { http: { port: endpoint.port, host: endpoint.host } } : {}),
    async close(closeOptions) {
      // A second signal: every process gives up its messages in flight now.
      if (closeOptions?.abort) group.hurry();
      const code = await group.stop();
      return { givenUp: code === 0 ? 0 : Math.max(1, group.givenUp) };
    },
  };
}

/**
 * One process of `eml-api relay --processes`: runs the relay with the port and per-client limits of
 * its primary, answers its `/metrics` and `/readyz`, and stops within `grace` when told (or on SIGTERM).
 * @returns the exit code: 4 when the grace period ran out on messages in flight
 */
export async function runRelayProcess(
  options: EmlApiRelayOptions,
  grace: number,
  io: CliIo,
  secrets: (string | undefined)[],
): Promise<number> {
  const member = new GroupMember();
  const settings = memberSettings(io.env);
  const { http: _http, ...rest } = options;
  const { metrics } = settings;
  let relay: EmlApiRelay;
  let serving = false;
  // Stopped while it starts (its key check may wait on the service): it has no client yet.
  void member.stopRequested.then(() => {
    if (!serving) process.exit(0);
  });
  const counts = new SharedClientCounts(member);
  const identities = new MessageIdentities({
    settled: (fingerprint, remembered) =>
      member.tell('identities.settle', { fingerprint, remembered } satisfies SettledTry),
  });
  member.hear('identities.settle', (args) => {
    const { fingerprint, remembered } = args as SettledTry;
    identities.learn(fingerprint, remembered);
  });
  try {
    await counts.join();
    const known = await member.ask('identities.remembered', undefined);
    for (const [fingerprint, remembered] of (known ?? []) as [string, RememberedTry][]) {
      identities.learn(fingerprint, remembered);
    }
    relay = await startRelay(
      { ...rest, port: settings.port, metrics: metrics ?? false },
      {
        counts,
        identities,
        readiness: (checks) => member.serveReadiness(checks, secrets),
      },
    );
    serving = true;
  } catch (err) {
    member.close();
    throw err;
  }
  member.serveMetrics(metrics?.registry);
  // A fault inside the relay ends the process (its primary starts another), clients told first: 421
  // between messages, 451 for a message being handed on, never a 250.
  process.once('uncaughtException', (err) => {
    io.stderr.write(`${new Date().toISOString()} ERROR relay process ${process.pid}: ${err.stack ?? err.message}\n`);
    setTimeout(() => process.exit(70), 2_000).unref();
    void relay.close({ abort: true }).finally(() => process.exit(70));
  });
  member.started(relay.port);
  void member.hurryRequested.then(() => relay.close({ abort: true }));
  await member.stopRequested;
  const { givenUp } = await relay.close({ grace });
  await member.stopped(givenUp > 0 ? 4 : 0, givenUp);
  member.close();
  return givenUp > 0 ? 4 : 0;
}

/** What a process tells of a try it settled (see {@link MessageIdentities.settle}). */
interface SettledTry {
  fingerprint: string;
  remembered: RememberedTry | undefined;
}
