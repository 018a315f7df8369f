/**
 * How the cost of parsing adversarial input grows with its size, for each
 * parser of user input that reads all of it (a list of addresses, a CSV
 * file, the header of a raw message). For each, the worst of a set of
 * adversarial shapes at 10 KB is timed again at 100 KB: linear parsing costs
 * about 10 times more, quadratic about 100 times, cubic 1,000 times.
 * Prints [{ parser, shape, smallMs, largeMs, ratio }] as JSON.
 */
import { membersFromCsv } from '../src/cli/commands/group-command.js';
import { toApiAddressList } from '../src/client/client-input.js';
import { readHeaderAddresses } from '../src/transport/message-envelope.js';

const SMALL = 10_000;
const LARGE = 100_000;

/** Repeated units that make backtracking parsers explode. */
const SHAPES: Record<string, (n: number) => string> = {
  spaces: (n) => ' '.repeat(n) + '<',
  tabs: (n) => '\t'.repeat(n) + 'x <a@b> x',
  braces: (n) => '{{' + ' '.repeat(n) + 'x',
  quotes: (n) => '"'.repeat(n),
  angles: (n) => '<'.repeat(n),
  'a@': (n) => 'a@'.repeat(n / 2),
  colons: (n) => 'a:'.repeat(n / 2),
  commas: (n) => 'a@b.c,'.repeat(n / 6),
  parens: (n) => '('.repeat(n),
};

const PARSERS: Record<string, (input: string) => unknown> = {
  'address list (client)': (input) => toApiAddressList(input.slice(0, 99_000), 'to'),
  'CSV (eml-api group add)': (input) => {
    const cell = `"${input.replace(/"/g, '""')}"`;
    membersFromCsv(Buffer.from(`email,name,${cell}\n${cell},x,y\n`), 'bench.csv');
  },
  'raw message headers (transport)': (input) =>
    readHeaderAddresses(Buffer.from(`From: a@b.test\r\nTo: ${input}\r\nCc: ${input}\r\n\r\nhi\r\n`)),
};

/** Median time of one parse, over enough runs to fill about 200 ms (single runs of a few ms are mostly noise). */
function time(parse: (input: string) => unknown, input: string): number {
  const runs: number[] = [];
  const until = performance.now() + 200;
  while (runs.length < 3 || (performance.now() < until && runs.length < 200)) {
    const started = performance.now();
    try {
      parse(input);
    } catch {
      // Refusing the input is a fine outcome; the time is what is measured.
    }
    runs.push(performance.now() - started);
  }
  return runs.sort((a, b) => a - b)[Math.floor(runs.length / 2)]!;
}

const results = [];
for (const [parser, parse] of Object.entries(PARSERS)) {
  time(parse, 'warm-up a@b.test');
  let worst = { shape: '', smallMs: -1 };
  for (const [shape, make] of Object.entries(SHAPES)) {
    const ms = time(parse, make(SMALL));
    if (ms > worst.smallMs) worst = { shape, smallMs: ms };
  }
  const largeMs = time(parse, SHAPES[worst.shape]!(LARGE));
  results.push({ parser, shape: worst.shape, smallMs: worst.smallMs, largeMs, ratio: largeMs / worst.smallMs });
}
console.log(JSON.stringify(results));
