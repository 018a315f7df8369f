import { findForbiddenCharacter, isValidAddress } from '../protocol/address-rules.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * The relay's strict grammar of a To, Cc or Bcc value (see
 * {@link readAddressList}): the subset of RFC 5322 address lists on which
 * MIME parsers agree. What it cannot read for certain is refused, never
 * skipped. One pass over the value: linear in its length.
 */

/** Characters of a value quoted in an error. */
const SHOWN = 60;

/** Characters that end an atom (RFC 5322 specials and white space). */
const SPECIALS = '()<>[]:;@\\,."\t ';

/** A dot-atom (RFC 5322 3.2.3) of ASCII atext: a local part that reads the same with or without quotes. */
const DOT_ATOM = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;

/** Characters a comment in a To, Cc or Bcc field may not hold (it ends at the first `)`). */
const COMMENT_SPECIALS = '()\\<>,;:@"[]';

/** Characters that end a domain written as labels: the specials but the dot. */
const DOMAIN_END = SPECIALS.replace('.', '');

/**
 * Reads one address list (a To, Cc or Bcc value) as the relay trusts it:
 * addresses (`a@x`), display names with an address in angle brackets
 * (`Ann <a@x>`, `"Doe, Ann" <a@x>`, `=?utf-8?B?...?= <a@x>`), groups
 * (`Team: a@x, b@x;`, `undisclosed-recipients:;`), comments of plain text
 * beside an address (`a@x (Sales)`), and `,` or `;` between entries.
 * Refused, because parsers read them differently: an entry without an
 * address (a name alone, a comment alone, `<>`), an encoded word (RFC 2047)
 * anywhere but in a display name before an address (mailparser reads a
 * Base64 word standing alone as the addresses it holds), a comment holding
 * any of `( ) \ < > , ; : @ " [ ]` (Nodemailer 10.0 ends a comment at the
 * first `)` and takes no escape in it, 10.6 counts nesting; an address or a
 * separator in one is read as a recipient by some), inside a group a quoted
 * string holding `;` (which ends the group for some), a group in a group, a
 * source route, an `xn--` prefix written in capitals (mailparser decodes
 * only the lower-case one, so `XN--` and `xn--` would be two mailboxes), a
 * quoted local part that needs no quotes (`"ann"@x`, which mailparser reads
 * as `ann@x` or `"ann"@x` by where it stands), and an address that is not
 * valid.
 *
 * @param value the unfolded field value
 * @param field the field's name, for the error
 * @returns the addresses, in order
 * @throws {EmlApiError} `EMESSAGE` (permanent) naming the field and the entry
 * @example
 * readAddressList('"Doe, Ann" <ann@x.test>, Team: bob@x.test;', 'To'); // ['ann@x.test', 'bob@x.test']
 */
export function readAddressList(value: string, field: string): string[] {
  return new AddressListReader(value, field).read();
}

class AddressListReader {
  readonly #text: string;
  readonly #field: string;
  #at = 0;
  #inGroup = false;
  readonly #out: string[] = [];

  constructor(text: string, field: string) {
    this.#text = text;
    this.#field = field;
  }

  read(): string[] {
    const bad = findForbiddenCharacter(this.#text, { allowTab: true });
    if (bad) throw this.#refuse(`holds ${bad.what}`);
    for (;;) {
      this.#skipSpace();
      if (this.#at >= this.#text.length) break;
      const ch = this.#text[this.#at]!;
      if (ch === ',' || (ch === ';' && !this.#inGroup)) {
        this.#at++;
        continue;
      }
      if (ch === ';') {
        this.#at++;
        this.#inGroup = false;
        continue;
      }
      const group = this.#entry(this.#inGroup);
      if (group) this.#inGroup = true;
    }
    return this.#out;
  }

  /** Reads one entry; @returns true when it opened a group. */
  #entry(inGroup: boolean): boolean {
    const start = this.#at;
    const { phrase, comments } = this.#phrase();
    const ch = this.#text[this.#at];
    if (ch === '<') {
      this.#angleAddress(start);
    } else if (ch === '@') {
      this.#addrSpec(start, phrase);
    } else if (ch === ':') {
      if (inGroup) throw this.#refuse(`has a group inside a group: ${this.#shownFrom(start)}`);
      if (phrase.encoded) throw this.#encoded(start);
      if (phrase.text === '') throw this.#refuse(`has a group without a name: ${this.#shownFrom(start)}`);
      this.#at++;
      return true;
    } else if (phrase.text !== '' || comments) {
      // A name (or a comment) and no address: some parsers take it for one, mailparser decodes a Base64 word into several.
      if (phrase.encoded || comments) throw this.#encoded(start);
      throw this.#refuse(`has an entry with no address: ${this.#shownFrom(start)}`);
    } else {
      throw this.#refuse(`has ${shown(ch ?? '')} where an entry should start: ${this.#shownFrom(start)}`);
    }
    this.#trailer(start);
    return false;
  }

  /** Words before `<`, `@` or `:` (atoms, dots, quoted strings, encoded words; comments skipped), and what they held. */
  #phrase(): { phrase: { text: string; encoded: boolean }; comments: boolean } {
    const words: string[] = [];
    let encoded = false;
    let comments = false;
    for (;;) {
      this.#skipSpace();
      const ch = this.#text[this.#at];
      if (ch === undefined || ch === '<' || ch === '@' || ch === ':' || ch === ',' || ch === ';') break;
      if (ch === '(') {
        this.#comment();
        comments = true;
      } else if (ch === '"') {
        const quoted = this.#quoted();
        if (quoted.includes('=?')) encoded = true;
        words.push(quoted);
      } else if (ch === '.') {
        this.#at++;
        words.push('.');
      } else if (SPECIALS.includes(ch)) {
        throw this.#refuse(`has ${shown(ch)} out of place: ${this.#shownFrom(this.#at)}`);
      } else {
        const atom = this.#atom();
        if (atom.includes('=?')) encoded = true;
        words.push(atom);
      }
    }
    return { phrase: { text: words.join(' '), encoded }, comments };
  }

  /** `<addr-spec>`, white space allowed inside the brackets. */
  #angleAddress(start: number): void {
    this.#at++;
    this.#skipSpace();
    const from = this.#at;
    const close = this.#text.indexOf('>', from);
    if (close === -1) throw this.#refuse(`has an unclosed <: ${this.#shownFrom(start)}`);
    const inner = this.#text.slice(from, close).trim();
    if (inner === '') throw this.#refuse(`has an entry with no address: ${this.#shownFrom(start)}`);
    if (inner.startsWith('@')) throw this.#refuse(`has a source route (obsolete): ${this.#shownFrom(start)}`);
    this.#push(inner, start);
    this.#at = close + 1;
  }

  /** `local@domain` where the phrase just read is the local part. */
  #addrSpec(start: number, local: { encoded: boolean }): void {
    const written = this.#text.slice(start, this.#at).trimStart();
    // The local part: one atom (dots allowed) or one quoted string, written without white space (a fold
    // inside an address leaves one, which parsers keep or drop) or comments.
    if (written === '' || /[\s()]/.test(written.replace(/"(?:[^"\\]|\\.)*"/g, '""'))) {
      throw this.#refuse(`has an address that is not one addr-spec: ${this.#shownFrom(start)}`);
    }
    if (local.encoded) throw this.#encoded(start);
    this.#at++;
    const from = this.#at;
    if (this.#text[this.#at] === '[') {
      const close = this.#text.indexOf(']', this.#at);
      if (close === -1) throw this.#refuse(`has an unclosed [: ${this.#shownFrom(start)}`);
      this.#at = close + 1;
    } else {
      while (this.#at < this.#text.length && !DOMAIN_END.includes(this.#text[this.#at]!)) this.#at++;
    }
    this.#push(`${written}@${this.#text.slice(from, this.#at)}`, start);
  }

  /** After an address: comments and white space, then a separator or the end. */
  #trailer(start: number): void {
    for (;;) {
      this.#skipSpace();
      const ch = this.#text[this.#at];
      if (ch === undefined || ch === ',' || ch === ';') return;
      if (ch !== '(') throw this.#refuse(`has more after an address: ${this.#shownFrom(start)}`);
      this.#comment();
    }
  }

  #push(address: string, start: number): void {
    if (address.includes('=?')) throw this.#encoded(start);
    if (address.includes('\uFFFD'))
      throw this.#refuse(`has an address that is not valid UTF-8: ${this.#shownFrom(start)}`);
    if (!isValidAddress(address)) throw this.#refuse(`has an address that is not valid: ${shown(address)}`);
    if (/(?:@|\.)(?!xn--)[Xx][Nn]--/.test(address.slice(address.lastIndexOf('@')))) {
      throw this.#refuse(
        `has a domain with its xn-- prefix in capitals, which parsers decode or not: ${shown(address)}`,
      );
    }
    // Parsers trim a quoted local part, or drop its quotes, when it starts or ends with white space.
    if (address.startsWith('"') && /^"[ \t]|[ \t]"@|\t/.test(address)) {
      throw this.#refuse(`has a quoted local part with white space at its ends or a tab: ${shown(address)}`);
    }
    // Quotes a local part does not need are dropped by mailparser in some places and kept in others
    // ("ann"@x is ann@x alone, "ann"@x in <>): two mailboxes to the service for one spelling.
    if (address.startsWith('"') && DOT_ATOM.test(address.slice(1, address.lastIndexOf('"')).replace(/\\(.)/g, '$1'))) {
      throw this.#refuse(`has a quoted local part that needs no quotes, which parsers keep or drop: ${shown(address)}`);
    }
    this.#out.push(address);
  }

  #atom(): string {
    const from = this.#at;
    while (this.#at < this.#text.length && !SPECIALS.includes(this.#text[this.#at]!)) this.#at++;
    return this.#text.slice(from, this.#at);
  }

  /**
   * A quoted string, quotes included; a backslash escapes the next character.
   * Inside a group one holding `;` is refused: Nodemailer before 10.6 ends the
   * group at it, and reads what follows as recipients outside the group.
   */
  #quoted(): string {
    const from = this.#at++;
    while (this.#at < this.#text.length) {
      const ch = this.#text[this.#at++];
      if (ch === '\\') this.#at++;
      else if (ch === ';' && this.#inGroup) {
        throw this.#refuse(`has a quoted string holding ; inside a group: ${this.#shownFrom(from)}`);
      } else if (ch === '"') return this.#text.slice(from, this.#at);
    }
    throw this.#refuse(`has an unclosed quoted string: ${this.#shownFrom(from)}`);
  }

  /**
   * Skips a comment of plain text. A comment is read only beside an address:
   * an entry that is a comment alone is refused, as parsers read one as a
   * name or as an address. So is one holding a character in
   * {@link COMMENT_SPECIALS}: parsers disagree on where such a comment ends
   * (nested parentheses, a backslash) and on whether an address, a
   * separator or a quote inside it is a recipient, and `a@x (c (d) <e@y>)`
   * was delivered to `e@y` alone.
   */
  #comment(): void {
    const from = this.#at++;
    while (this.#at < this.#text.length) {
      const ch = this.#text[this.#at++]!;
      if (ch === ')') return;
      if (COMMENT_SPECIALS.includes(ch)) {
        throw this.#refuse(
          `has a comment holding ${shown(ch)}, which parsers read differently: ${this.#shownFrom(from)}`,
        );
      }
    }
    throw this.#refuse(`has an unclosed comment: ${this.#shownFrom(from)}`);
  }

  #skipSpace(): void {
    while (this.#text[this.#at] === ' ' || this.#text[this.#at] === '\t') this.#at++;
  }

  #shownFrom(start: number): string {
    return shown(this.#text.slice(start));
  }

  #encoded(start: number): EmlApiError {
    return this.#refuse(
      `has an encoded word (RFC 2047) or a comment where an address must be, which the service may read as addresses: ${this.#shownFrom(start)}`,
    );
  }

  #refuse(problem: string): EmlApiError {
    return unreadable(`the ${this.#field} header ${problem}`);
  }
}

/** A value as quoted in an error: JSON, cut to {@link SHOWN} characters. */
export function shown(text: string): string {
  return JSON.stringify(text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text);
}

/** The error for a header section the relay cannot read for certain (permanent `EMESSAGE`, `554 5.6.0`). */
export function unreadable(problem: string): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The relay cannot read the message's recipients for certain (${problem}); the service might read others from it`,
    { command: 'DATA', permanent: true },
  );
}
