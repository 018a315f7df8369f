import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { findForbiddenCharacter, isValidAddress } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * The relay reads a header section strictly because the service reads it leniently: anything it cannot read for
 * certain is refused (`554 5.6.0`), never skipped, so the service cannot find recipients that were never in
 * `RCPT TO`. Address fields are capped ({@link HeaderLimits}) before a service-side parser runs, and the reading runs
 * in event-loop slices ({@link runInSlices}) so a large header section does not hold up others.
 */

/** One header field as the relay read it. */
export interface RelayHeaderField {
  /** The name as written, without the white space some senders put before the colon. */
  name: string;
  /** The value unfolded as MIME parsers unfold it (each line break and the white space after it one space), trimmed, as UTF-8. */
  value: string;
  /** Byte offset of the field's first line. */
  start: number;
  /** Byte offset just past the field's last line break. */
  end: number;
  /** The addresses of a To, Cc or Bcc field, as the relay read them. */
  addresses?: string[];
}

/** What the relay reads from a header section. */
export interface RelayHeaders {
  fields: RelayHeaderField[];
  /** The To, Cc and Bcc recipients, in order, each once (as {@link addressKey} compares them). */
  recipients: string[];
  /**
   * Distinct spellings of the To, Cc and Bcc addresses (`Ann@x` and `ann@x` are two): the service may
   * compare more strictly than {@link addressKey}, so this bounds the copies it might make.
   */
  spellings: number;
  froms: RelayHeaderField[];
  senders: RelayHeaderField[];
  /** The first address of the first From field, or false. */
  from: string | false;
  /** The first non-empty Message-ID field, or undefined. */
  messageId: string | undefined;
  hasDate: boolean;
}

/** How much of the address fields the relay reads at most. */
export interface HeaderLimits {
  /** Entries (addresses and groups, empty ones included) the To, Cc and Bcc fields hold in all. @default Infinity */
  maxEntries?: number;
  /**
   * Words, quoted strings, comments and separators the To, Cc and Bcc fields hold in all (Postfix's
   * `header_address_token_limit`). @default Infinity
   */
  maxTokens?: number;
  /** Characters the To, Cc, Bcc, From and Sender fields hold in all, unfolded. @default Infinity */
  maxAddressText?: number;
}

const RECIPIENT_FIELDS = new Set(['to', 'cc', 'bcc']);

/** Fields the service reads addresses from besides To, Cc and Bcc, and refuses with a control character in. */
const OTHER_ADDRESS_FIELDS = new Set(['from', 'sender', 'reply-to']);

/** Each From or Sender field may cost a run of mailparser; RFC 5322 allows one. */
const MAX_FROM_FIELDS = 10;

const FIELDS_PER_STEP = 256;

/** Work done in steps: each `yield` lets the event loop serve others ({@link runInSlices}). */
export type Steps<T> = Generator<void, T, void>;

const SLICE_MS = 4;

/** Caps the steps per turn, so the turns grow with the work whatever the machine's speed. */
const SLICE_STEPS = 64;

/** Runs work in slices of the event loop, so other clients are answered while a large header section is read. */
export async function runInSlices<T>(steps: Steps<T>): Promise<T> {
  let until = performance.now() + SLICE_MS;
  for (let taken = 1; ; taken++) {
    const step = steps.next();
    if (step.done) return step.value;
    if (taken % SLICE_STEPS === 0 || performance.now() >= until) {
      await new Promise((resolve) => setImmediate(resolve));
      until = performance.now() + SLICE_MS;
    }
  }
}

export function runWhole<T>(steps: Steps<T>): T {
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * Reads a header section the way the relay trusts: every line is a field or its folded continuation, and every To, Cc
 * and Bcc field an address list read for certain (see {@link readAddressList}).
 * @throws {EmlApiError} `EMESSAGE` (permanent) naming the line or the field that cannot be read, or the limit passed
 */
export function readRelayHeaders(head: Buffer, limits: HeaderLimits = {}): RelayHeaders {
  return runWhole(readingRelayHeaders(head, limits));
}

/** {@link readRelayHeaders} in steps. */
export function* readingRelayHeaders(head: Buffer, limits: HeaderLimits = {}): Steps<RelayHeaders> {
  const fields = yield* splittingFields(head);
  const maxText = limits.maxAddressText ?? Infinity;
  const budget = new ReadingBudget(limits);
  const recipients: string[] = [];
  const seen = new Set<string>();
  const spellings = new Set<string>();
  const froms: RelayHeaderField[] = [];
  const senders: RelayHeaderField[] = [];
  let text = 0;
  let messageId: string | undefined;
  let hasDate = false;
  for (let i = 0; i < fields.length; i++) {
    if (i % FIELDS_PER_STEP === FIELDS_PER_STEP - 1) yield;
    const field = fields[i]!;
    const name = field.name.toLowerCase();
    if (RECIPIENT_FIELDS.has(name) || name === 'from' || name === 'sender') {
      // Counted before any parser runs over the field: the parsers of the service's side are linear but slow.
      text += field.value.length;
      if (text > maxText) {
        throw tooMuch(`the To, Cc, Bcc, From and Sender headers hold more than ${maxText} characters in all`);
      }
    }
    if (OTHER_ADDRESS_FIELDS.has(name)) {
      const bad = findForbiddenCharacter(field.value, { allowTab: true });
      if (bad) throw badAddressField(field, `holds ${bad.what}`);
    }
    if (RECIPIENT_FIELDS.has(name)) {
      const addresses = new AddressListReader(field.value, field.name, budget).read();
      field.addresses = addresses;
      yield;
      yield* crossChecking(field, addresses);
      for (const address of addresses) {
        spellings.add(address);
        const key = addressKey(address);
        if (!seen.has(key)) {
          seen.add(key);
          recipients.push(address);
        }
      }
    } else if (name === 'from' || name === 'sender') {
      const list = name === 'from' ? froms : senders;
      if (list.push(field) > MAX_FROM_FIELDS) {
        throw tooMuch(`the message has more than ${MAX_FROM_FIELDS} ${field.name} fields (RFC 5322 allows one)`);
      }
    } else if (name === 'message-id' && messageId === undefined) {
      messageId = field.value || undefined;
    } else if (name === 'date') {
      hasDate = true;
    }
  }
  const from = froms.length === 0 ? false : firstAddress(froms[0]!.value);
  return { fields, recipients, spellings: spellings.size, froms, senders, from, messageId, hasDate };
}

/** Counted while reading, so a long list stops before any service-side parser runs over it. */
class ReadingBudget {
  readonly #maxEntries: number;
  readonly #maxTokens: number;
  #entries = 0;
  #tokens = 0;

  constructor(limits: HeaderLimits) {
    this.#maxEntries = limits.maxEntries ?? Infinity;
    this.#maxTokens = limits.maxTokens ?? Infinity;
  }

  entry(): void {
    if (++this.#entries > this.#maxEntries) {
      throw tooMuch(
        `the To, Cc and Bcc headers hold more than ${this.#maxEntries} entries (addresses and groups) in all`,
      );
    }
  }

  token(): void {
    if (++this.#tokens > this.#maxTokens) {
      throw tooMuch(
        `the To, Cc and Bcc headers hold more than ${this.#maxTokens} words, separators and comments in all`,
      );
    }
  }
}

/** Refuses a To, Cc or Bcc field that a service-side parser reads otherwise than the relay. */
function* crossChecking(field: RelayHeaderField, addresses: readonly string[]): Steps<void> {
  for (const reader of serviceAddressReaders()) {
    const read = reader.read(field.value);
    yield;
    if (sameAddresses(read, addresses)) continue;
    const theirs = read.map((a) => a || '(no address)').join(', ');
    throw unreadable(
      `the ${field.name} header reads otherwise to ${reader.name}: ${shown(theirs)} where the relay reads ${shown(addresses.join(', '))}`,
    );
  }
}

/**
 * Why the service is certain to refuse a message for its From fields, or undefined: it has none, or one holds no
 * address as mailparser reads it. A From the relay cannot read for certain is left to the service unless `certain`
 * (the outbox stores the message, and nobody would hear of the service's refusal).
 */
export async function fromRefusal(
  froms: readonly RelayHeaderField[],
  { certain = false }: { certain?: boolean } = {},
): Promise<EmlApiError | undefined> {
  if (froms.length === 0) {
    return new EmlApiError('EMESSAGE', 'The message has no From header, which the email service requires', {
      command: 'DATA',
      permanent: true,
    });
  }
  for (const field of froms) {
    const reading = await fromReading(field.value);
    if (reading === 'none') {
      return badAddressField(field, `has no address the email service can read: ${shown(field.value)}`);
    }
    if (reading === 'uncertain' && certain) {
      return new EmlApiError(
        'EMESSAGE',
        `The relay cannot read the ${field.name} header for certain (${shown(field.value)}), and the email service may find no address in it once the message is stored; write it as Name <address> (or install mailparser beside the relay, to have it read as the service reads it)`,
        { command: 'DATA', permanent: true },
      );
    }
  }
  return undefined;
}

async function fromReading(value: string): Promise<'address' | 'none' | 'uncertain'> {
  const readers = serviceAddressReaders();
  const first = readers[0]?.read(value)[0] ?? '';
  const mime = loadMimeParser();
  if (mime) {
    // mailparser changes an address only for encoded words and xn-- domains; a name alone may become one.
    if (isValidAddress(first) && !first.includes('=?') && !first.includes('@xn--')) return 'address';
    const parsed = await mime(Buffer.from(`From: ${value}\r\n\r\n`, 'utf8'), FROM_ONLY).catch(() => undefined);
    return isValidAddress(firstOf(parsed?.from) ?? '') ? 'address' : 'none';
  }
  const strict = strictFirstAddress(value);
  if (
    strict !== undefined &&
    readers.every((reader) => addressKey(reader.read(value)[0] ?? '') === addressKey(strict))
  ) {
    return 'address';
  }
  if (readers.length > 0 && !value.includes('=?') && !value.includes('xn--')) {
    return isValidAddress(first) ? 'uncertain' : 'none';
  }
  return value.includes('@') || decodedWords(value).includes('@') ? 'uncertain' : 'none';
}

function strictFirstAddress(value: string): string | undefined {
  try {
    return new AddressListReader(value, 'From', new ReadingBudget({})).read()[0];
  } catch {
    return undefined;
  }
}

/**
 * Every address a reader could take a From or Sender value to name: each parser's reading, and every address-shaped
 * text once encoded words are decoded and NFKC folds compatibility forms, as a shown display name may hold one.
 */
export async function identityAddresses(value: string): Promise<string[]> {
  const found = new Set<string>();
  const add = (address: string | undefined) => {
    if (address) found.add(address);
  };
  try {
    readAddressList(value, 'From').forEach(add);
  } catch {
    // A value the strict grammar does not read: the other readers and the scan below still do.
  }
  for (const reader of serviceAddressReaders()) reader.read(value).forEach(add);
  let names = '';
  const mime = loadMimeParser();
  if (mime) {
    const parsed = await mime(Buffer.from(`From: ${value}\r\n\r\n`, 'utf8'), FROM_ONLY).catch(() => undefined);
    const walk = (list: MimeAddress[]): void => {
      for (const entry of list) {
        add(entry.address);
        names += ` ${entry.name ?? ''}`;
        if (entry.group) walk(entry.group);
      }
    };
    walk(parsed?.from?.value ?? []);
  }
  // As a mail program shows it: adjacent encoded words joined (RFC 2047 6.2), and once more without comments.
  const shown = decodedWords(value.replace(/(\?=)\s+(?==\?)/g, '$1')).replace(/\\(.)/g, '$1');
  const texts = `${shown} ${withoutComments(shown)} ${names}`.normalize('NFKC');
  for (const word of texts.split(ADDRESS_SEPARATORS)) {
    const parts = word.split('@');
    for (let i = 1; i < parts.length; i++) if (parts[i - 1] && parts[i]) add(`${parts[i - 1]}@${parts[i]}`);
  }
  return [...found];
}

function withoutComments(text: string): string {
  let depth = 0;
  let out = '';
  for (const c of text) {
    if (c === '(') depth++;
    else if (c === ')' && depth > 0) depth--;
    else if (depth === 0) out += c;
  }
  return out;
}

/** Split on, never backtracked over. */
const ADDRESS_SEPARATORS = /[\s<>"(),;:[\]\\]+/;

const FROM_ONLY = { skipHtmlToText: true, skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true };

type MimeAddress = { address?: string; name?: string; group?: MimeAddress[] };
type MimeParser = (source: Buffer, options?: object) => Promise<{ from?: { value: MimeAddress[] } }>;

let mimeParser: MimeParser | null | undefined;

function loadMimeParser(): MimeParser | null {
  if (mimeParser === undefined) {
    try {
      mimeParser = (createRequire(import.meta.url)('mailparser') as { simpleParser: MimeParser }).simpleParser;
    } catch {
      mimeParser = null;
    }
  }
  return mimeParser;
}

function firstOf(from: { value: MimeAddress[] } | undefined): string | undefined {
  const walk = (list: MimeAddress[]): string | undefined => {
    for (const entry of list) {
      if (!entry.group) return entry.address ?? '';
      const found = walk(entry.group);
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return from ? walk(from.value) : undefined;
}

const ENCODED_WORD = /=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g;

/** Charsets decoded as mailparser decodes them, by lower-case label; libmime reads `us-ascii` as UTF-8. */
const READ_CHARSETS = new Map<string, string>([
  ...['utf-8', 'utf8', 'us-ascii', 'ascii'].map((label) => [label, 'utf-8'] as const),
  ...['utf-7', 'utf7', 'unicode-1-1-utf-7'].map((label) => [label, 'utf-7'] as const),
  ...['utf-16le', 'utf-16be', 'utf-32le', 'utf-32be'].map((label) => [label, label] as const),
  ...Array.from({ length: 16 }, (_, i) => [`iso-8859-${i + 1}`, `iso-8859-${i + 1}`] as const),
  ...Array.from({ length: 9 }, (_, i) => [`windows-125${i}`, `windows-125${i}`] as const),
  ...['iso-2022-jp', 'shift_jis', 'euc-jp', 'gb2312', 'gbk', 'gb18030', 'big5', 'euc-kr', 'koi8-r', 'koi8-u'].map(
    (label) => [label, label] as const,
  ),
]);

function charsetOf(word: string): string | undefined {
  return READ_CHARSETS.get(word.split('*')[0]!.toLowerCase());
}

/** The charset of the first encoded word the relay cannot decode; undefined where mailparser is installed. */
export function unreadCharset(text: string): string | undefined {
  if (loadMimeParser()) return undefined;
  for (const [, charset] of text.matchAll(ENCODED_WORD)) if (!charsetOf(charset!)) return charset;
  return undefined;
}

function decodedWords(text: string): string {
  return text.replace(ENCODED_WORD, (_word, charset: string, kind: string, data: string) => {
    const bytes =
      kind.toUpperCase() === 'B'
        ? Buffer.from(data, 'base64')
        : Buffer.from(
            data
              .replace(/_/g, ' ')
              .replace(/=([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))),
            'latin1',
          );
    const name = charsetOf(charset);
    if (name === 'utf-7') return utf7(bytes.toString('latin1'));
    if (name === 'utf-32be' || name === 'utf-32le') return utf32(bytes, name === 'utf-32be');
    // Another charset (see unreadCharset): its ASCII still shows.
    return name ? new TextDecoder(name).decode(bytes) : bytes.toString('latin1').replace(/\0/g, '');
  });
}

/** TextDecoder lacks UTF-32 and UTF-7. */
function utf32(bytes: Buffer, bigEndian: boolean): string {
  let out = '';
  for (let i = 0; i + 4 <= bytes.length; i += 4) {
    const code = bigEndian ? bytes.readUInt32BE(i) : bytes.readUInt32LE(i);
    out += code <= 0x10ffff ? String.fromCodePoint(code) : '\uFFFD';
  }
  return out;
}

function utf7(text: string): string {
  return text.replace(/\+([A-Za-z0-9+/]*)-?/g, (_run, data: string) => {
    if (data === '') return '+';
    const bytes = Buffer.from(data, 'base64');
    return bytes
      .subarray(0, bytes.length - (bytes.length % 2))
      .swap16()
      .toString('utf16le');
  });
}

function* splittingFields(head: Buffer): Steps<RelayHeaderField[]> {
  const fields: RelayHeaderField[] = [];
  let current: { field: RelayHeaderField; parts: string[] } | undefined;
  const close = () => {
    if (!current) return;
    const value = current.parts.join(' ').trim();
    current.field.value = Buffer.from(value, 'latin1').toString('utf8');
    current = undefined;
  };
  let pos = 0;
  for (let number = 1; pos < head.length; number++) {
    if (number % FIELDS_PER_STEP === 0) yield;
    const lf = head.indexOf(0x0a, pos);
    const next = lf === -1 ? head.length : lf + 1;
    const lineEnd = lf === -1 ? head.length : lf > pos && head[lf - 1] === 0x0d ? lf - 1 : lf;
    if (lineEnd === pos) break;
    const line = head.toString('latin1', pos, lineEnd);
    if (line.includes('\r')) throw unreadable(`header line ${number} holds a bare CR`);
    if (line[0] === ' ' || line[0] === '\t') {
      if (!current) {
        throw unreadable(
          `header line ${number} starts with white space (a folded continuation) but no field precedes it: ${shown(line)}`,
        );
      }
      current.parts.push(line.replace(/^[ \t]+/, ''));
      current.field.end = next;
    } else {
      close();
      const colon = fieldColon(line);
      if (colon === undefined) {
        throw unreadable(
          `header line ${number} is neither a header field nor the folded continuation of one: ${shown(line)}`,
        );
      }
      // mailsplit (mailparser's splitter) takes a first line starting so for an mbox or HTTP preamble, and skips it.
      if (number === 1 && /^(?:From|POST) /i.test(line)) {
        throw unreadable(
          `header line 1 is an mbox separator or HTTP preamble to MIME parsers, not a field: ${shown(line)}`,
        );
      }
      const field = { name: line.slice(0, colon).trimEnd(), value: '', start: pos, end: next };
      fields.push(field);
      current = { field, parts: [line.slice(colon + 1)] };
    }
    pos = next;
  }
  close();
  return fields;
}

function fieldColon(line: string): number | undefined {
  let i = 0;
  for (; i < line.length; i++) {
    const code = line.charCodeAt(i);
    if (code < 0x21 || code > 0x7e || code === 0x3a) break;
  }
  if (i === 0) return undefined;
  while (line[i] === ' ' || line[i] === '\t') i++;
  return line[i] === ':' ? i : undefined;
}

/** Read leniently: the service checks From itself. */
function firstAddress(value: string): string | false {
  try {
    return new AddressListReader(value, 'From', new ReadingBudget({})).read()[0] ?? false;
  } catch {
    return false;
  }
}

const SHOWN = 60;

const SPECIALS = '()<>[]:;@\\,."\t ';

/** A local part that reads the same with or without quotes. */
const DOT_ATOM = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;

/** A comment may end at the first `)` or count nesting, by parser, so these are refused in one. */
const COMMENT_SPECIALS = '()\\<>,;:@"[]';

const DOMAIN_END = SPECIALS.replace('.', '');

/**
 * Reads one To, Cc or Bcc value as the relay trusts it, in one linear pass: the subset of RFC 5322 address lists on
 * which MIME parsers agree (addresses, named addresses, groups, plain comments beside an address). What parsers read
 * differently is refused: an entry without an address, an encoded word but in a display name, a comment holding a
 * {@link COMMENT_SPECIALS} character, `;` quoted inside a group, a nested group, a source route, `XN--` in capitals, a
 * quoted local part that needs no quotes, an invalid address.
 * @throws {EmlApiError} `EMESSAGE` (permanent) naming the field and the entry
 */
export function readAddressList(value: string, field: string): string[] {
  return new AddressListReader(value, field, new ReadingBudget({})).read();
}

class AddressListReader {
  readonly #text: string;
  readonly #field: string;
  readonly #budget: ReadingBudget;
  #at = 0;
  #inGroup = false;
  readonly #out: string[] = [];

  constructor(text: string, field: string, budget: ReadingBudget) {
    this.#text = text;
    this.#field = field;
    this.#budget = budget;
  }

  read(): string[] {
    const bad = findForbiddenCharacter(this.#text, { allowTab: true });
    if (bad) throw this.#refuse(`holds ${bad.what}`);
    for (;;) {
      this.#skipSpace();
      if (this.#at >= this.#text.length) break;
      this.#budget.token();
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
      this.#budget.entry();
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

  #addrSpec(start: number, local: { encoded: boolean }): void {
    const written = this.#text.slice(start, this.#at).trimStart();
    // A fold inside an address leaves white space, which parsers keep or drop.
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
    if (address.startsWith('"') && /^"[ \t]|[ \t]"@|\t/.test(address)) {
      throw this.#refuse(`has a quoted local part with white space at its ends or a tab: ${shown(address)}`);
    }
    // mailparser drops unneeded quotes in some places and keeps them in others: two mailboxes for one spelling.
    if (address.startsWith('"') && DOT_ATOM.test(address.slice(1, address.lastIndexOf('"')).replace(/\\(.)/g, '$1'))) {
      throw this.#refuse(`has a quoted local part that needs no quotes, which parsers keep or drop: ${shown(address)}`);
    }
    // mailparser decodes xn-- before the service checks the address, and would refuse it after our 250.
    const decoded = asMailparserReads(address);
    if (decoded !== address && !isValidAddress(decoded)) {
      throw this.#refuse(`has an address the email service reads as ${shown(decoded)}, which it refuses`);
    }
    this.#budget.entry();
    this.#out.push(address);
  }

  #atom(): string {
    this.#budget.token();
    const from = this.#at;
    while (this.#at < this.#text.length && !SPECIALS.includes(this.#text[this.#at]!)) this.#at++;
    return this.#text.slice(from, this.#at);
  }

  /** Inside a group, `;` in a quoted string ends the group for some Nodemailer releases. */
  #quoted(): string {
    this.#budget.token();
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
   * A comment is read only beside an address, and without {@link COMMENT_SPECIALS}:
   * parsers disagree on where such a comment ends and whether an address in it is a recipient.
   */
  #comment(): void {
    this.#budget.token();
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

/** An address as mailparser hands it on: an `xn--` domain decoded label by label as punycode.js does. */
export function asMailparserReads(address: string): string {
  if (!address.includes('@xn--')) return address;
  const at = address.lastIndexOf('@');
  try {
    const labels = address
      .slice(at + 1)
      .replace(/[\x2E\u3002\uFF0E\uFF61]/g, '.')
      .split('.')
      .map((label) => (label.startsWith('xn--') ? decodePunycode(label.slice(4).toLowerCase()) : label));
    return `${address.slice(0, at + 1)}${labels.join('.')}`;
  } catch {
    return address;
  }
}

/** RFC 3492. @throws {RangeError} when it is not Punycode */
function decodePunycode(input: string): string {
  const [base, tMin, tMax, skew, damp] = [36, 1, 26, 38, 700];
  const adapt = (delta: number, points: number, first: boolean) => {
    let k = 0;
    delta = first ? Math.floor(delta / damp) : delta >> 1;
    delta += Math.floor(delta / points);
    for (; delta > ((base - tMin) * tMax) >> 1; k += base) delta = Math.floor(delta / (base - tMin));
    return Math.floor(k + ((base - tMin + 1) * delta) / (delta + skew));
  };
  const digit = (code: number) =>
    code >= 0x30 && code < 0x3a
      ? code - 22
      : code >= 0x41 && code < 0x5b
        ? code - 0x41
        : code >= 0x61 && code < 0x7b
          ? code - 0x61
          : base;
  const output: number[] = [];
  const basic = Math.max(0, input.lastIndexOf('-'));
  for (let j = 0; j < basic; j++) {
    if (input.charCodeAt(j) >= 0x80) throw new RangeError('not basic');
    output.push(input.charCodeAt(j));
  }
  let [n, i, bias] = [128, 0, 72];
  for (let index = basic > 0 ? basic + 1 : 0; index < input.length;) {
    const oldi = i;
    for (let w = 1, k = base; ; k += base) {
      if (index >= input.length) throw new RangeError('invalid input');
      const d = digit(input.charCodeAt(index++));
      if (d >= base || d > Math.floor((0x7fffffff - i) / w)) throw new RangeError('invalid input');
      i += d * w;
      const t = k <= bias ? tMin : k >= bias + tMax ? tMax : k - bias;
      if (d < t) break;
      if (w > Math.floor(0x7fffffff / (base - t))) throw new RangeError('overflow');
      w *= base - t;
    }
    const out = output.length + 1;
    bias = adapt(i - oldi, out, oldi === 0);
    if (Math.floor(i / out) > 0x7fffffff - n) throw new RangeError('overflow');
    n += Math.floor(i / out);
    i %= out;
    output.splice(i++, 0, n);
  }
  return String.fromCodePoint(...output);
}

/** A value as quoted in an error: JSON, cut to 60 characters. */
export function shown(text: string): string {
  return JSON.stringify(text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text);
}

function tooMuch(problem: string): EmlApiError {
  return new EmlApiError('EMESSAGE', `The relay does not read this header section: ${problem}`, {
    command: 'DATA',
    permanent: true,
  });
}

function badAddressField(field: RelayHeaderField, problem: string): EmlApiError {
  return new EmlApiError('EMESSAGE', `The ${field.name} header ${problem}; the email service refuses it`, {
    command: 'DATA',
    permanent: true,
  });
}

/** The error for a header section the relay cannot read for certain (`554 5.6.0`). */
export function unreadable(problem: string): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The relay cannot read the message's recipients for certain (${problem}); the service might read others from it`,
    { command: 'DATA', permanent: true },
  );
}

interface ParsedEntry {
  name?: string;
  address?: string;
  group?: ParsedEntry[];
}

type AddressParser = (text: string) => ParsedEntry[];

interface ServiceAddressReader {
  /** Where it was loaded from, e.g. `nodemailer 10.0.12 (mailparser's)`. */
  readonly name: string;
  /** The addresses of an address list, groups flattened, in order; '' for an entry without one. */
  read(value: string): string[];
}

/** Earlier Nodemailer parsers take quadratic time on a long address list. */
const FIRST_LINEAR_MAJOR = 7;

let loaded: readonly ServiceAddressReader[] | undefined;

/**
 * The address parsers the service's side reads To, Cc and Bcc with, as far as this machine has them: the Nodemailer
 * copy mailparser loads (it may differ from the peer's) and the `nodemailer` peer's.
 */
export function serviceAddressReaders(): readonly ServiceAddressReader[] {
  loaded ??= loadReaders();
  return loaded;
}

/** The first service address reader that reads `value` otherwise than the relay (ASCII case aside), and its reading. */
export function disagreeingReader(
  value: string,
  relayRead: readonly string[],
): { reader: string; read: string[] } | undefined {
  for (const reader of serviceAddressReaders()) {
    const read = reader.read(value);
    if (!sameAddresses(read, relayRead)) return { reader: reader.name, read };
  }
  return undefined;
}

function sameAddresses(read: readonly string[], relayRead: readonly string[]): boolean {
  return read.length === relayRead.length && read.every((a, i) => addressKey(a) === addressKey(relayRead[i]!));
}

function loadReaders(): ServiceAddressReader[] {
  const here = createRequire(import.meta.url);
  const readers: ServiceAddressReader[] = [];
  const seen = new Set<string>();
  const add = (from: NodeRequire, owner: string) => {
    let path: string;
    let version: string;
    try {
      path = from.resolve('nodemailer/lib/addressparser');
      version = (from('nodemailer/package.json') as { version: string }).version;
    } catch {
      return;
    }
    if (seen.has(path) || Number(version.split('.')[0]) < FIRST_LINEAR_MAJOR) return;
    seen.add(path);
    const module = from('nodemailer/lib/addressparser') as AddressParser | { default: AddressParser };
    const parse = typeof module === 'function' ? module : module.default;
    readers.push({ name: `nodemailer ${version} (${owner})`, read: (value) => flatten(parse(value)) });
  };
  try {
    // npm nests mailparser's own Nodemailer in its folder when versions differ.
    add(createRequire(join(dirname(here.resolve('mailparser')), 'index.js')), "mailparser's");
  } catch {
    // mailparser is not installed.
  }
  add(here, 'the nodemailer peer');
  return readers;
}

function flatten(entries: ParsedEntry[]): string[] {
  const out: string[] = [];
  const walk = (list: ParsedEntry[]) => {
    for (const entry of list) {
      if (entry.group) walk(entry.group);
      else out.push(entry.address ?? '');
    }
  };
  walk(entries);
  return out;
}

/**
 * The form in which two spellings of one mailbox compare equal: ASCII case folded, as the service folds it, nothing
 * else. Any further folding (Unicode, IDNA, quotes) would make two spellings one mailbox for the relay that the
 * service may keep apart, and mail a header listing both once per spelling for one `RCPT TO`.
 */
export function addressKey(address: string): string {
  return asciiLowerCase(address);
}

/** `toLowerCase` also folds non-ASCII letters, and the Kelvin sign to k. */
export function asciiLowerCase(text: string): string {
  return text.replace(/[A-Z]+/g, (run) => run.toLowerCase());
}
