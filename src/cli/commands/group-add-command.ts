import { parseArgs } from 'node:util';
import type { EmlApiClient } from '../../client/eml-api-client.js';
import { DEFAULT_ADD_BATCH_SIZE, type MemberInput } from '../../client/client-types.js';
import type { OnFailure } from '../../protocol/api-types.js';
import type { CliIo } from '../cli-io.js';
import { membersFromCsv } from '../lib/csv-members.js';
import { membersFromArguments, type MemberRow, type MemberRows } from '../lib/member-rows.js';
import { canDrawProgress, ProgressBar } from '../lib/progress-bar.js';
import { readInput } from '../lib/read-input.js';
import { createServiceClient, SERVICE_ARG_OPTIONS, SERVICE_OPTIONS_HELP } from '../lib/service-config.js';
import { EXIT, UsageError, wholeFlag } from '../lib/usage-error.js';
import { terminalText } from '../lib/terminal-text.js';

/** Help of `eml-api group add`. */
export const GROUP_ADD_HELP = `Usage: eml-api group add <group> <file.csv | - | address...> [options]

Adds members to a group (POST /v1/group/{group}). Re-adding a member updates
its name and substitutions. Give one CSV file ("-" reads standard input), or
one or more addresses (ann@example.com or "Ann <ann@example.com>").

CSV: UTF-8 (a byte order mark is fine), comma-separated, a header row first.
  email        required
  name         optional
  any other    a substitution key: a column first_name fills {{first_name}}
Values containing commas, quotes or line breaks go in double quotes ("" for a
quote). Cells are trimmed; blank lines are skipped.

Options:
  --batch-size <n>        entries per request (default ${DEFAULT_ADD_BATCH_SIZE})
  --on-failure <mode>     abort (default): a bad row fails the import and nothing is added;
                          skip: add the valid rows and list the others
${SERVICE_OPTIONS_HELP}
Prints each skipped row on a line of its own, then a summary line. A progress
bar is drawn on standard error when it is a terminal and the import takes
several requests.
Exit codes: 0 done (also when rows were skipped), 1 failed, 2 wrong usage.
`;

/** `eml-api group add`: imports members from a CSV file, standard input or arguments. */
export async function groupAddCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      ...SERVICE_ARG_OPTIONS,
      'batch-size': { type: 'string' },
      'on-failure': { type: 'string' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(GROUP_ADD_HELP);
    return EXIT.ok;
  }
  const [groupId, ...inputs] = positionals;
  if (!groupId) throw new UsageError('group add needs a group id and a CSV file or addresses');
  if (inputs.length === 0) throw new UsageError('group add needs a CSV file ("-" for standard input) or addresses');
  const batchSize = parseBatchSize(values['batch-size']);
  const onFailure = parseOnFailure(values['on-failure']);
  const csvSource = csvInput(inputs);
  const client = createServiceClient(values, io.env);
  try {
    const rows =
      csvSource === undefined
        ? membersFromArguments(inputs)
        : membersFromCsv(await readInput(csvSource, io.stdin), csvSource === '-' ? 'stdin' : csvSource);
    return await importRows(client, groupId, rows, { batchSize, onFailure }, io);
  } finally {
    await client.close();
  }
}

async function importRows(
  client: EmlApiClient,
  groupId: string,
  rows: MemberRows,
  options: { batchSize: number; onFailure: OnFailure },
  io: CliIo,
): Promise<number> {
  const { members, rejected } = rows;
  if (rejected.length > 0 && options.onFailure === 'ABORT') {
    const more = rejected.length > 1 ? `, ${rejected.length} bad rows in all` : '';
    throw new Error(
      `${rejected[0]!.reason}; nothing was added (--on-failure abort${more}; --on-failure skip adds the valid rows)`,
    );
  }
  const skippedLines = rejected.map((r) => `skipped ${r.reason}`);
  const rowsByEmail = new Map<string, MemberRow>();
  for (const row of [...members].reverse()) rowsByEmail.set(row.email, row);
  const total = members.length;
  const bar = new ProgressBar(io.stderr, total, total > options.batchSize && canDrawProgress(io.stderr, io.env));
  let result;
  try {
    bar.update(0);
    result = await client.addToGroup(groupId, members.map(toMemberInput), {
      onFailure: options.onFailure,
      batchSize: options.batchSize,
      onBatch: (progress) => bar.update(progress.entriesDone),
    });
  } finally {
    bar.finish();
  }
  for (const skip of result.skipped) skippedLines.push(`skipped ${describeSkip(rowsByEmail, skip)}`);
  for (const line of skippedLines) io.stdout.write(`${terminalText(line)}\n`);
  const { batches } = result;
  io.stdout.write(
    `added ${result.added.length}, skipped ${skippedLines.length} (${batches} ${batches === 1 ? 'batch' : 'batches'}) to group ${JSON.stringify(groupId)}\n`,
  );
  return EXIT.ok;
}

function toMemberInput(row: MemberRow): MemberInput {
  return {
    email: row.email,
    ...(row.name ? { name: row.name } : {}),
    ...(row.substitutions ? { substitutions: row.substitutions } : {}),
  };
}

/** A skip the service reported, with the row it came from when the address is found among the rows. */
function describeSkip(rows: Map<string, MemberRow>, skip: { email: string; reason: string }): string {
  const row = rows.get(skip.email);
  const email = skip.email || '(no address)';
  return row ? `${row.where} (${email}): ${skip.reason}` : `${email}: ${skip.reason}`;
}

/** The CSV source when the inputs name one (a file or "-"), undefined for addresses. */
function csvInput(inputs: string[]): string | undefined {
  const isCsv = (arg: string) => arg === '-' || /\.csv$/i.test(arg) || !arg.includes('@');
  if (inputs.length === 1 && isCsv(inputs[0]!)) return inputs[0]!;
  const odd = inputs.find(isCsv);
  if (odd !== undefined) {
    throw new UsageError(
      `${JSON.stringify(odd)} is not an address; give either one CSV file ("-" for standard input) or addresses`,
    );
  }
  return undefined;
}

function parseBatchSize(value: string | undefined): number {
  return wholeFlag(value, '--batch-size', 1, Number.MAX_SAFE_INTEGER, DEFAULT_ADD_BATCH_SIZE);
}

function parseOnFailure(value: string | undefined): OnFailure {
  if (value === undefined) return 'ABORT';
  const mode = value.toLowerCase();
  if (mode === 'abort') return 'ABORT';
  if (mode === 'skip') return 'SKIP';
  throw new UsageError(`--on-failure: expected skip or abort, got ${JSON.stringify(value)}`);
}
