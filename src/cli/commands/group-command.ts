import { parseArgs } from 'node:util';
import {
  type CliIo,
  EXIT,
  UsageError,
  readInput,
  wholeFlag,
  terminalText,
  type CliOutput,
  untilStopped,
} from '../cli-io.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import type { EmlApiClient } from '../../client/eml-api-client.js';
import { DEFAULT_ADD_BATCH_SIZE, type MemberInput } from '../../client/client-types.js';
import { type OnFailure, bracedKey, isPlaceholderKey, stripBraces } from '../../protocol/api-types.js';
import { createServiceClient, SERVICE_ARG_OPTIONS, SERVICE_OPTIONS_HELP, type ServiceFlags } from '../lib/ops-flags.js';
import { toApiAddress } from '../../client/client-input.js';
import { isValidAddress } from '../../protocol/message-format.js';

/** Help of `eml-api group`. */
export const GROUP_HELP = `Usage: eml-api group <subcommand> <group> ... [options]

Manages the members of a group (groups themselves are created in the
service's dashboard, or with "eml-api serve --group <id>" for the emulator).

Subcommands:
  add <group> <file.csv | - | address...>   add or update members (CSV with email, name, substitutions)
  remove <group> <address...>               remove members
  check <group> <address...>                check membership (exit code 3 when any is not a member)

Run "eml-api group <subcommand> --help" for its options.
Environment: EML_API_URL (base URL), EML_API_KEY (API key).
`;

/** The subcommands of `eml-api group`. */
export const GROUP_SUBCOMMANDS = {
  add: groupAddCommand,
  remove: groupRemoveCommand,
  check: groupCheckCommand,
} as const;

/** `eml-api group`: dispatches to add, remove or check. */
export async function groupCommand(args: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === '--help' || sub === '-h' || sub === 'help') {
    io.stdout.write(GROUP_HELP);
    return EXIT.ok;
  }
  if (sub === undefined) throw new UsageError('group needs a subcommand: add, remove or check');
  if (!Object.hasOwn(GROUP_SUBCOMMANDS, sub))
    throw new UsageError(`unknown group subcommand "${sub}"; expected add, remove or check`);
  return GROUP_SUBCOMMANDS[sub as keyof typeof GROUP_SUBCOMMANDS](rest, io);
}

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
quote). Cells are trimmed; blank lines are skipped. An address on several
rows is sent once, with its last row, and each duplicate row is listed.

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
        : membersFromCsv(await readInput(csvSource, io, 'the CSV'), csvSource === '-' ? 'stdin' : csvSource);
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
  // The service keeps the last row of a member (it updates); sending it once counts members truly.
  const latest = new Map<string, MemberRow>();
  const duplicateLines: string[] = [];
  for (const row of members) {
    const key = row.email.toLowerCase();
    const earlier = latest.get(key);
    if (earlier) {
      duplicateLines.push(`duplicate ${row.where} (${row.email}) replaces ${earlier.where}`);
      latest.delete(key);
    }
    latest.set(key, row);
  }
  const unique = [...latest.values()];
  const rowsByEmail = new Map(unique.map((row) => [row.email, row]));
  const total = unique.length;
  const bar = new ProgressBar(io.stderr, total, total > options.batchSize && canDrawProgress(io.stderr, io.env));
  // Ctrl-C ends the import between requests' bytes, saying what was added.
  const interrupt = new AbortController();
  void untilStopped(io.signal).then(() => interrupt.abort());
  const batches = Math.ceil(total / options.batchSize);
  let result;
  try {
    bar.update(0);
    result = await client.addToGroup(groupId, unique.map(toMemberInput), {
      onFailure: options.onFailure,
      batchSize: options.batchSize,
      onBatch: (progress) => bar.update(progress.entriesDone),
      signal: interrupt.signal,
    });
  } catch (err) {
    if (!interrupt.signal.aborted || !(err instanceof EmlApiError) || err.code !== 'EABORT') throw err;
    const partial = err.partial as { batches?: number; added?: unknown[] } | undefined;
    const done = partial?.batches ?? 0;
    const earlier = done > 0 ? `the ${partial?.added?.length ?? 0} entries of earlier batches were added, ` : '';
    throw new Error(
      `interrupted during batch ${done + 1} of ${batches}: ${earlier}those of batch ${done + 1} may have been, the others were not; running the same import again adds the rest (re-adding a member updates it)`,
    );
  } finally {
    bar.finish();
  }
  for (const skip of result.skipped) skippedLines.push(`skipped ${describeSkip(rowsByEmail, skip)}`);
  for (const line of [...duplicateLines, ...skippedLines]) io.stdout.write(`${terminalText(line)}\n`);
  io.stdout.write(
    `added ${result.added.length}, skipped ${skippedLines.length} (${result.batches} ${result.batches === 1 ? 'batch' : 'batches'}) to group ${JSON.stringify(groupId)}\n`,
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

/** With the row it came from when the address is found among the rows. */
function describeSkip(rows: Map<string, MemberRow>, skip: { email: string; reason: string }): string {
  const row = rows.get(skip.email);
  const email = skip.email || '(no address)';
  return row ? `${row.where} (${email}): ${skip.reason}` : `${email}: ${skip.reason}`;
}

/** A file or "-"; undefined for addresses. */
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

/** Help of `eml-api group check`. */
export const GROUP_CHECK_HELP = `Usage: eml-api group check <group> <address...> [options]

Checks whether each address is a member of a group
(GET /v1/group/{group}/check/{address}) and prints one line per address:
"<address>: member" or "<address>: not a member".

Options:
${SERVICE_OPTIONS_HELP}
Exit codes: 0 every address is a member, 3 at least one is not,
1 the check failed, 2 wrong usage.
`;

/** `eml-api group check`: membership of each address; exit code 3 when any is not a member. */
export async function groupCheckCommand(args: string[], io: CliIo): Promise<number> {
  const parsed = parseGroupAddressArguments('check', args, GROUP_CHECK_HELP, io);
  if (parsed.help) return EXIT.ok;
  const client = createServiceClient(parsed.flags, io.env);
  try {
    let allMembers = true;
    for (const email of parsed.emails) {
      const member = await client.isInGroup(parsed.groupId, email);
      if (!member) allMembers = false;
      io.stdout.write(`${email}: ${member ? 'member' : 'not a member'}\n`);
    }
    return allMembers ? EXIT.ok : EXIT.notMember;
  } finally {
    await client.close();
  }
}

/** Help of `eml-api group remove`. */
export const GROUP_REMOVE_HELP = `Usage: eml-api group remove <group> <address...> [options]

Removes each address from a group (DELETE /v1/group/{group}) and prints one
line per address: "<address>: removed" or "<address>: not a member".

Options:
${SERVICE_OPTIONS_HELP}
Exit codes: 0 done (also for addresses that were not members), 1 failed, 2 wrong usage.
`;

/** `eml-api group remove`: removes addresses from a group, one request each. */
export async function groupRemoveCommand(args: string[], io: CliIo): Promise<number> {
  const parsed = parseGroupAddressArguments('remove', args, GROUP_REMOVE_HELP, io);
  if (parsed.help) return EXIT.ok;
  const client = createServiceClient(parsed.flags, io.env);
  try {
    for (const email of parsed.emails) {
      const removed = await client.removeFromGroup(parsed.groupId, email);
      io.stdout.write(`${email}: ${removed ? 'removed' : 'not a member'}\n`);
    }
    return EXIT.ok;
  } finally {
    await client.close();
  }
}

/** A member ready to add, with where it came from (for messages). */
export interface MemberRow {
  /** E.g. `people.csv line 4` or `argument 2`. */
  where: string;
  email: string;
  name?: string;
  /** Keys without braces; the client writes them `{{key}}`. */
  substitutions?: Record<string, string>;
}

/** An input row that cannot be added, with the reason. */
export interface RejectedRow {
  where: string;
  /** As written (may be empty or invalid). */
  email: string;
  reason: string;
}

/** The valid rows and the rejected ones, in input order. */
export interface MemberRows {
  members: MemberRow[];
  rejected: RejectedRow[];
}

/**
 * Checks one member with the client's rules, so a bad row is reported with its line before anything is sent.
 * @returns the member, or the reason it cannot be added
 */
export function checkMember(
  where: string,
  input: string | { email: string; name?: string | undefined },
  substitutions?: Record<string, string>,
): MemberRow | RejectedRow {
  const written = typeof input === 'string' ? input : input.email;
  if (typeof input !== 'string' && !isValidAddress(input.email)) {
    const reason =
      input.email === ''
        ? 'the email cell is empty'
        : `${JSON.stringify(input.email.slice(0, 100))} is not a valid email address`;
    return { where, email: written, reason: `${where}: ${reason}` };
  }
  try {
    const address = toApiAddress(input, where);
    return {
      where,
      email: address.email,
      ...(address.name ? { name: address.name } : {}),
      ...(substitutions ? { substitutions } : {}),
    };
  } catch (err) {
    return { where, email: written, reason: (err as Error).message };
  }
}

/** Whether {@link checkMember} rejected the row. */
export function isRejected(row: MemberRow | RejectedRow): row is RejectedRow {
  return 'reason' in row;
}

/** Members given as command-line arguments, in any Nodemailer form (`ann@x.test`, `Ann <ann@x.test>`). */
export function membersFromArguments(args: readonly string[]): MemberRows {
  const rows: MemberRows = { members: [], rejected: [] };
  args.forEach((arg, i) => {
    const row = checkMember(`argument ${i + 1}`, arg);
    if (isRejected(row)) rows.rejected.push(row);
    else rows.members.push(row);
  });
  return rows;
}

/**
 * Reads members from CSV bytes. The header needs an `email` column; `name` is optional (both case-insensitive); every
 * other column is a substitution key. Cells are trimmed, missing trailing cells empty, all-empty rows skipped; a row
 * with more cells than the header, or an invalid address, is rejected with its line.
 * @param source names the input in messages, e.g. `people.csv` or `stdin`
 * @throws {CsvSyntaxError} when the text cannot be parsed or the header is unusable
 */
export function membersFromCsv(bytes: Uint8Array, source: string): MemberRows {
  let records;
  try {
    records = parseCsv(decodeCsv(bytes));
  } catch (err) {
    if (err instanceof CsvSyntaxError) throw new CsvSyntaxError(`${source}: ${err.message}`);
    throw err;
  }
  const [header, ...rows] = records;
  if (!header)
    throw new CsvSyntaxError(`${source}: no header row; the first line must name the columns, e.g. email,name`);
  const columns = readHeader(header.fields, source);
  const result: MemberRows = { members: [], rejected: [] };
  for (const { line, fields } of rows) {
    const cells = fields.map((f) => f.trim());
    if (cells.every((c) => c === '')) continue;
    const where = `${source} line ${line}`;
    const email = cells[columns.email] ?? '';
    if (cells.length > columns.count) {
      result.rejected.push({
        where,
        email,
        reason: `${where}: ${cells.length} cells but the header has ${columns.count} (put a value that contains commas in double quotes)`,
      });
      continue;
    }
    const name = columns.name === undefined ? undefined : cells[columns.name] || undefined;
    let substitutions: Record<string, string> | undefined;
    if (columns.substitutions.length > 0) {
      substitutions = {};
      for (const { key, index } of columns.substitutions) substitutions[key] = cells[index] ?? '';
    }
    const row = checkMember(where, { email, name }, substitutions);
    if (isRejected(row)) result.rejected.push(row);
    else result.members.push(row);
  }
  return result;
}

interface Columns {
  count: number;
  email: number;
  name: number | undefined;
  substitutions: { key: string; index: number }[];
}

function readHeader(fields: string[], source: string): Columns {
  const names = fields.map((f) => f.trim());
  const seen = new Set<string>();
  const columns: Columns = { count: names.length, email: -1, name: undefined, substitutions: [] };
  if (!names.some((n) => n.toLowerCase() === 'email')) {
    const hint = names.length === 1 && /[;\t]/.test(names[0]!) ? '; columns must be separated by commas' : '';
    throw new CsvSyntaxError(
      `${source}: no "email" column in the header row (found ${names.map((n) => JSON.stringify(n)).join(', ')})${hint}`,
    );
  }
  names.forEach((raw, index) => {
    if (raw === '') throw new CsvSyntaxError(`${source}: column ${index + 1} of the header row has no name`);
    const lower = raw.toLowerCase();
    const builtIn = lower === 'email' || lower === 'name';
    const key = builtIn ? lower : stripBraces(raw);
    const id = builtIn ? key : bracedKey(key);
    if (seen.has(id))
      throw new CsvSyntaxError(`${source}: column ${JSON.stringify(raw)} appears twice in the header row`);
    seen.add(id);
    if (id === 'email') columns.email = index;
    else if (id === 'name') columns.name = index;
    else if (!isPlaceholderKey(key)) {
      throw new CsvSyntaxError(
        `${source}: column ${JSON.stringify(raw.slice(0, 80))} is not a valid substitution key (letters, digits, "_", "-" or "." only)`,
      );
    } else if (key === 'unsubscribe') {
      throw new CsvSyntaxError(`${source}: column "unsubscribe" is reserved for the unsubscribe link`);
    } else columns.substitutions.push({ key, index });
  });
  return columns;
}

/** One CSV record, with the line it starts on (1-based). */
export interface CsvRecord {
  line: number;
  fields: string[];
}

/** A CSV text that cannot be read; the message names the line. */
export class CsvSyntaxError extends Error {
  override readonly name = 'CsvSyntaxError';
}

/**
 * Decodes CSV bytes as UTF-8, dropping a byte order mark.
 * @throws {CsvSyntaxError} when the bytes are not UTF-8
 */
export function decodeCsv(bytes: Uint8Array): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new CsvSyntaxError('the file is not UTF-8 text; save it as "CSV UTF-8"');
  }
}

/**
 * Parses CSV text (RFC 4180; records end at CRLF, LF or CR). A quote inside an unquoted field is kept;
 * empty lines are skipped; a leading byte order mark is ignored.
 * @returns the records in order, each with the line it starts on
 * @throws {CsvSyntaxError} for a quoted field that is never closed or is followed by other text
 */
export function parseCsv(text: string): CsvRecord[] {
  const records: CsvRecord[] = [];
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let line = 1;
  while (i < text.length) {
    const startLine = line;
    const fields: string[] = [];
    let lineEmpty = true;
    for (;;) {
      let field = '';
      if (text[i] === '"') {
        lineEmpty = false;
        const quoteLine = line;
        i++;
        for (;;) {
          if (i >= text.length) throw new CsvSyntaxError(`line ${quoteLine}: a quoted field is never closed`);
          const ch = text[i]!;
          if (ch === '"') {
            if (text[i + 1] === '"') {
              field += '"';
              i += 2;
              continue;
            }
            i++;
            break;
          }
          if (ch === '\n' || (ch === '\r' && text[i + 1] !== '\n')) line++;
          field += ch;
          i++;
        }
        const next = text[i];
        if (next !== undefined && next !== ',' && next !== '\r' && next !== '\n') {
          throw new CsvSyntaxError(
            `line ${line}: unexpected text after a closing quote (write a quote inside a quoted field as "")`,
          );
        }
      } else {
        const start = i;
        while (i < text.length && text[i] !== ',' && text[i] !== '\r' && text[i] !== '\n') i++;
        field = text.slice(start, i);
        if (field.length > 0) lineEmpty = false;
      }
      fields.push(field);
      if (text[i] === ',') {
        lineEmpty = false;
        i++;
        continue;
      }
      break;
    }
    if (text[i] === '\r') i += text[i + 1] === '\n' ? 2 : 1;
    else if (text[i] === '\n') i++;
    line++;
    if (!lineEmpty) records.push({ line: startLine, fields });
  }
  return records;
}

/** The parsed `<group> <address...>` of `group remove` and `group check`. */
export interface GroupAddressArguments {
  /** `--help` was given and the help written. */
  help: boolean;
  groupId: string;
  /** In the order given. */
  emails: string[];
  flags: ServiceFlags;
}

/**
 * Parses `<group> <address...>` plus the service options, writing `help` on `--help`; every address
 * is checked before any request.
 * @param command `remove` or `check`, for messages
 * @throws {UsageError} for a missing group or address, or an invalid address
 */
export function parseGroupAddressArguments(
  command: string,
  args: string[],
  help: string,
  io: CliIo,
): GroupAddressArguments {
  const { values, positionals } = parseArgs({
    args,
    options: SERVICE_ARG_OPTIONS,
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(help);
    return { help: true, groupId: '', emails: [], flags: values };
  }
  const [groupId, ...addresses] = positionals;
  if (!groupId || addresses.length === 0)
    throw new UsageError(`group ${command} needs a group id and at least one address`);
  const { members, rejected } = membersFromArguments(addresses);
  if (rejected.length > 0) throw new UsageError(rejected[0]!.reason);
  return { help: false, groupId, emails: members.map((m) => m.email), flags: values };
}

/**
 * Renders a progress bar line, e.g. `[#####.....] 1500/3000`.
 * @param width number of cells between the brackets
 */
export function renderProgressBar(done: number, total: number, width = 30): string {
  const ratio = total <= 0 ? 1 : Math.min(1, Math.max(0, done / total));
  const filled = Math.floor(ratio * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}`;
}

/** Only on a terminal, never in CI (`CI` set) or on a dumb terminal, so pipes and logs stay clean. */
export function canDrawProgress(stream: CliOutput, env: Readonly<Record<string, string | undefined>>): boolean {
  if (stream.isTTY !== true) return false;
  const ci = env.CI;
  if (ci !== undefined && ci !== '' && ci !== '0' && ci.toLowerCase() !== 'false') return false;
  return env.TERM !== 'dumb';
}

/** A progress bar redrawn in place (carriage return) on a terminal stream; when disabled it writes nothing. */
export class ProgressBar {
  readonly #stream: CliOutput;
  readonly #total: number;
  readonly #enabled: boolean;
  #drawn = false;

  constructor(stream: CliOutput, total: number, enabled: boolean) {
    this.#stream = stream;
    this.#total = total;
    this.#enabled = enabled;
  }

  get enabled(): boolean {
    return this.#enabled;
  }

  update(done: number): void {
    if (!this.#enabled) return;
    this.#stream.write(`\r${renderProgressBar(done, this.#total)}`);
    this.#drawn = true;
  }

  /** Later output then starts on a line of its own. */
  finish(): void {
    if (!this.#drawn) return;
    this.#stream.write('\n');
    this.#drawn = false;
  }
}
