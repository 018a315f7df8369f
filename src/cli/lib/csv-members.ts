import { bracedKey, isPlaceholderKey, stripBraces } from '../../protocol/placeholder-key.js';
import { checkMember, isRejected, type MemberRows } from './member-rows.js';
import { CsvSyntaxError, decodeCsv, parseCsv } from './read-csv.js';

/**
 * Reads members from CSV bytes. The first record is the header: an `email`
 * column is required, `name` is optional (both case-insensitive), and every
 * other column is a substitution key (`first_name` or `{{first_name}}`).
 * Cells are trimmed; an empty cell gives an empty substitution value; missing
 * trailing cells are empty. Rows whose cells are all empty are skipped.
 * A row with more cells than the header, or with an invalid address, is
 * rejected with its line.
 *
 * @param source names the input in messages, e.g. `people.csv` or `stdin`
 * @throws {CsvSyntaxError} when the text cannot be parsed or the header is unusable
 * @example
 * membersFromCsv(Buffer.from('email,name,first_name\nann@x.test,"Doe, Ann",Ann\n'), 'people.csv');
 * // { members: [{ where: 'people.csv line 2', email: 'ann@x.test', name: 'Doe, Ann', substitutions: { first_name: 'Ann' } }], rejected: [] }
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
