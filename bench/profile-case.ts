/**
 * Where the sender's CPU goes: the throughput case (transport, concurrency 5)
 * under V8's sampling profiler, in a fresh process. Usage:
 *   profile-case.ts <sinkUrl>
 * Each sample is charged to the nearest library frame on its stack, walking
 * from the leaf up: Node internals called by Nodemailer (random bytes for
 * boundaries, stream plumbing) count as Nodemailer; the native socket writes
 * count apart (the kernel's work, whoever asked for it: the request's one
 * write went through this package's connector, which made it look like its own). Prints { messages, shares: { [category]: fraction } } as JSON.
 */
import { Session } from 'node:inspector/promises';
import nodemailer from 'nodemailer';
import type * as Package from '../src/index.js';
import { benchMessage } from './bench-message.js';

// The built package, as the throughput section measures it (loaded by path: no build needed to type-check).
const { EmlApiTransport } = (await import(new URL('../dist/index.js', import.meta.url).href)) as typeof Package;

const [sinkUrl] = process.argv.slice(2) as [string];
const CONCURRENCY = 5;
const COUNT = 3000;

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: sinkUrl, maxConnections: CONCURRENCY, retry: false });
const transporter = nodemailer.createTransport(transport);
const sendAll = async (count: number) => {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) await transporter.sendMail(benchMessage(next++));
    }),
  );
};
await sendAll(600);

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 200 });
await session.post('Profiler.start');
await sendAll(COUNT);
const { profile } = (await session.post('Profiler.stop')) as {
  profile: { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };
};
session.disconnect();
await transport.close();

const parent = new Map<number, number>();
const byId = new Map<number, ProfileNode>();
for (const node of profile.nodes) {
  byId.set(node.id, node);
  for (const child of node.children ?? []) parent.set(child, node.id);
}

/** Node's native socket writes: the kernel's loopback work, whoever called them. */
const SOCKET_WRITES = new Set(['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String', 'writeAsciiString']);

function categoryOf(frame: ProfileNode['callFrame']): string | undefined {
  if (frame.functionName === '(idle)') return 'idle (waiting for the sink)';
  if (frame.url === '' && SOCKET_WRITES.has(frame.functionName)) return 'socket writes (kernel)';
  // The connector's pass-through of undici's writes (exchange.ts, which keeps reading after a refused write).
  if (/^socket\._writev?$/.test(frame.functionName) && /\/(src\/http\/exchange\.ts|dist\/[^/]+\.js)$/.test(frame.url)) {
    return undefined;
  }
  if (frame.functionName === '(garbage collector)') return 'garbage collector';
  if (frame.url.includes('/node_modules/nodemailer/')) return 'Nodemailer (compile)';
  if (frame.url.includes('/node_modules/undici/')) return 'undici (HTTP)';
  // The built package's modules (dist/), or the sources under src/ when run from them.
  if (/\/(dist\/[^/]+\.js|src\/.+\.ts)$/.test(frame.url)) return 'nodemailer-eml-api';
  return undefined;
}

const cache = new Map<number, string>();
function categorize(id: number): string {
  const known = cache.get(id);
  if (known) return known;
  let at: number | undefined = id;
  let category = 'Node core (event loop, streams, sockets)';
  while (at !== undefined) {
    const found = categoryOf(byId.get(at)!.callFrame);
    if (found) {
      category = found;
      break;
    }
    at = parent.get(at);
  }
  cache.set(id, category);
  return category;
}

const totals = new Map<string, number>();
let all = 0;
profile.samples.forEach((id, i) => {
  const delta = profile.timeDeltas[i] ?? 0;
  all += delta;
  const category = categorize(id);
  totals.set(category, (totals.get(category) ?? 0) + delta);
});
const shares = Object.fromEntries([...totals].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, v / all]));
console.log(JSON.stringify({ messages: COUNT, cpuMsPerMessage: all / 1000 / COUNT, shares }));
