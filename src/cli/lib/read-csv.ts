/** One record of a CSV text, with the line it starts on (1-based, for messages). */
export interface CsvRecord {
  line: number;
  fields: string[];
}

/** A CSV text that cannot be read; the message names the line. */
export class CsvSyntaxError extends Error {
  override readonly name = 'CsvSyntaxError';
}

/**
 * Decodes CSV bytes as UTF-8 (a leading byte order mark is dropped).
 *
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
 * Parses CSV text (RFC 4180): fields separated by commas, records by CRLF, LF
 * or CR. A field in double quotes may contain commas, line breaks and doubled
 * quotes (`""` for `"`). A quote inside an unquoted field is kept as it is.
 * Empty lines are skipped; a leading byte order mark is ignored.
 *
 * @returns the records in order, each with the line it starts on
 * @throws {CsvSyntaxError} for a quoted field that is never closed or is followed by other text
 * @example
 * parseCsv('email,name\r\nann@x.test,"Doe, Ann"\r\n');
 * // [{ line: 1, fields: ['email', 'name'] }, { line: 2, fields: ['ann@x.test', 'Doe, Ann'] }]
 */
export function parseCsv(text: string): CsvRecord[] {
  const records: CsvRecord[] = [];
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let line = 1;
  while (i < text.length) {
    const startLine = line;
    const fields: string[] = [];
    let lineEmpty = true;
    // One record: fields until a line break outside quotes, or the end.
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
    // At a line break or the end.
    if (text[i] === '\r') i += text[i + 1] === '\n' ? 2 : 1;
    else if (text[i] === '\n') i++;
    line++;
    if (!lineEmpty) records.push({ line: startLine, fields });
  }
  return records;
}
