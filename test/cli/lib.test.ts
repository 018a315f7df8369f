import { describe, expect, it } from 'vitest';
import { canDrawProgress, ProgressBar, renderProgressBar, parseCsv } from '../../src/cli/commands/group-command.js';

/** The CLI's building blocks on their own: the progress bar and the CSV parser. */

describe('progress bar', () => {
  it('renders done/total with a bar of the given width', () => {
    expect(renderProgressBar(1500, 3000, 10)).toBe('[#####.....] 1500/3000');
    expect(renderProgressBar(0, 3000, 10)).toBe('[..........] 0/3000');
    expect(renderProgressBar(3000, 3000, 10)).toBe('[##########] 3000/3000');
    expect(renderProgressBar(0, 0, 4)).toBe('[####] 0/0');
  });

  it('writes nothing to a stream that is not a terminal', () => {
    const written: string[] = [];
    const pipe = { write: (s: string) => written.push(s) };
    expect(canDrawProgress(pipe, {})).toBe(false);
    const bar = new ProgressBar(pipe, 10, canDrawProgress(pipe, {}));
    bar.update(5);
    bar.finish();
    expect(written).toEqual([]);
    expect(canDrawProgress({ ...pipe, isTTY: true }, {})).toBe(true);
    expect(canDrawProgress({ ...pipe, isTTY: true }, { CI: '1' })).toBe(false);
    expect(canDrawProgress({ ...pipe, isTTY: true }, { TERM: 'dumb' })).toBe(false);
  });
});

describe('CSV parsing', () => {
  it('handles quotes, doubled quotes, line breaks in quotes, CRLF, CR, a BOM and blank lines', () => {
    expect(parseCsv('\uFEFFa,b\r\n"x, y","say ""hi"""\r\n\r\n"multi\r\nline",z\rlast,\n')).toEqual([
      { line: 1, fields: ['a', 'b'] },
      { line: 2, fields: ['x, y', 'say "hi"'] },
      { line: 4, fields: ['multi\r\nline', 'z'] },
      { line: 6, fields: ['last', ''] },
    ]);
  });

  it('names the line of an unterminated or malformed quoted field', () => {
    expect(() => parseCsv('email\n"ann@example.test\n')).toThrow('line 2: a quoted field is never closed');
    expect(() => parseCsv('email,name\nann@example.test,"Ann" Doe\n')).toThrow(
      'line 2: unexpected text after a closing quote',
    );
  });
});
