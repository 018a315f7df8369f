import { spawnSync } from 'node:child_process';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';

/**
 * Helpers of the observability tests: the real OpenTelemetry SDK with its
 * in-memory exporter, reading the Prometheus text format, and promtool.
 */

/** The OpenTelemetry SDK registered for a test file; `spans()` are the ended ones. */
export interface TestTracing {
  spans(): ReadableSpan[];
  reset(): void;
  shutdown(): Promise<void>;
}

/**
 * Registers the SDK as an app does (a tracer provider and the AsyncLocalStorage
 * context manager that every Node setup registers), exporting to memory.
 * @example
 * const tracing = installTracing();
 * afterAll(() => tracing.shutdown());
 */
export function installTracing(): TestTracing {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  return {
    spans: () => exporter.getFinishedSpans(),
    reset: () => exporter.reset(),
    async shutdown() {
      await provider.shutdown();
      trace.disable();
      context.disable();
    },
  };
}

/**
 * The value of one sample of the text format, 0 when it is not there.
 * @example
 * sample(text, 'eml_api_sends_total', { component: 'transport', outcome: 'sent' }); // sums the samples that match
 */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const have = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(match[3]);
  }
  return sum;
}

const onCi = Boolean(process.env.CI) && process.env.CI !== 'false';

/**
 * Why promtool cannot run here, or undefined. On CI (`.ci/run` installs
 * Debian's prometheus) a missing promtool fails the test instead of skipping it.
 */
export const promtoolMissing: string | undefined = (() => {
  if (spawnSync('promtool', ['--version']).status === 0) return undefined;
  const why = 'promtool is not installed: apt-get install -y prometheus';
  if (onCi) throw new Error(`The metrics tests need promtool on CI; ${why}`);
  console.warn(`\n\u001b[33mSKIPPING the promtool checks: ${why}\u001b[0m\n`);
  return why;
})();

/**
 * Runs `promtool check metrics` on an exposition: its problems (lint
 * included), or an empty string when it passes.
 * @example
 * expect(promtoolProblems(await scrape(url))).toBe('');
 */
export function promtoolProblems(text: string): string {
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  return run.status === 0 ? '' : `${run.stdout}${run.stderr}`.trim() || `promtool exited ${run.status}`;
}
