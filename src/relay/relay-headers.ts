import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { findForbiddenCharacter, isValidAddress } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * The relay reads a message's header section strictly, because the service
 * reads it leniently: a line, an address or an encoded word that the relay
 * skipped while the service read it as a recipient would send mail to people
 * who were never in `RCPT TO`. So whatever the relay cannot read for certain
 * is refused (`554 5.6.0`, naming it), never skipped. What it accepts is a
 * subset of RFC 5322 on which MIME parsers agree: the property tests check
 * that mailparser (the emulator's parser) reads the same recipients from
 * every header section the relay accepts.
 *
 * The work is bounded as well as linear: the address fields are capped in
 * entries and in characters ({@link HeaderLimits}) before a parser of the
 * service's side runs over them, and the reading is a series of steps that
 * the relay runs in slices of the event loop ({@link runInSlices}), so that
 * a header section of 1 MiB does not hold up the other clients.
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
   * How many ways the To, Cc and Bcc fields spell their recipients: distinct
   * addresses as written (`Ann@x` and `ann@x` are two). The relay compares
   * spellings as {@link addressKey} does, and the service may compare them
   * more strictly, so this, not `recipients.length`, bounds the copies the
   * service might make.
   */
  spellings: number;
  /** The From fields. */
  froms: RelayHeaderField[];
  /** The Sender fields. */
  senders: RelayHeaderField[];
  /** The first address of the first From field, or false. */
  from: string | false;
  /** The first non-empty Message-ID field, or undefined. */
  messageId: string | undefined;
  /** Whether the message has a Date field. */
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

/** The fields whose addresses the service sends to. */
const RECIPIENT_FIELDS = new Set(['to', 'cc', 'bcc']);

/** Fields the service reads addresses from besides To, Cc and Bcc, and refuses with a control character in. */
const OTHER_ADDRESS_FIELDS = new Set(['from', 'sender', 'reply-to']);

/**
 * From fields, and Sender fields, a message may have (RFC 5322 allows one; services read either of two):
 * each one may cost a run of mailparser ({@link fromRefusal}, {@link identityAddresses}).
 */
const MAX_FROM_FIELDS = 10;

/** Fields split between two steps of the reading. */
const FIELDS_PER_STEP = 256;

/**
 * A piece of work done in steps: each `yield` is a point where it may stop
 * for the event loop to serve others ({@link runInSlices}).
 */
export type Steps<T> = Generator<void, T, void>;

/** Milliseconds of work the relay does in one turn of the event loop before it lets other clients in. */
const SLICE_MS = 4;

/**
 * Steps the relay takes in one turn at most: the turns a piece of work
 * takes then grow with the work whatever the machine's speed (a message of
 * a few fields takes a few steps, and one turn).
 */
const SLICE_STEPS = 64;

/**
 * Runs work in slices of the event loop: after {@link SLICE_STEPS} steps, or
 * a step that ends past {@link SLICE_MS} of the current slice, the rest waits
 * for the next turn (`setImmediate`), so that other clients are greeted and
 * answered, and the health port answers, while a large header section is read.
 */
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

/** Runs work to its end at once. */
export function runWhole<T>(steps: Steps<T>): T {
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * Reads a header section the way the relay trusts: every line is a field
 * (`name:` or `name :`, the name printable ASCII) or the folded continuation
 * of one, and every To, Cc and Bcc field is an address list the relay reads
 * for certain (see {@link readAddressList}).
 *
 * @param head the header section, with or without its blank line; the relay passes it with CRLF line ends only
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
      // The service refuses these (400 invalid_address): refused before anything is sent or stored.
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

/**
 * What the address lists read so far hold, against the limits: counted while
 * reading, so that a long list stops early, before any parser of the
 * service's side runs over it.
 */
class ReadingBudget {
  readonly #maxEntries: number;
  readonly #maxTokens: number;
  #entries = 0;
  #tokens = 0;

  constructor(limits: HeaderLimits) {
    this.#maxEntries = limits.maxEntries ?? Infinity;
    this.#maxTokens = limits.maxTokens ?? Infinity;
  }

  /** Counts an entry: an address, or a group, empty or not. @throws {EmlApiError} past the limit */
  entry(): void {
    if (++this.#entries > this.#maxEntries) {
      throw tooMuch(
        `the To, Cc and Bcc headers hold more than ${this.#maxEntries} entries (addresses and groups) in all`,
      );
    }
  }

  /** Counts a token: a word, a quoted string, a comment, a separator. @throws {EmlApiError} past the limit */
  token(): void {
    if (++this.#tokens > this.#maxTokens) {
      throw tooMuch(
        `the To, Cc and Bcc headers hold more than ${this.#maxTokens} words, separators and comments in all`,
      );
    }
  }
}

/**
 * Refuses a To, Cc or Bcc field that a parser of the service's side reads
 * otherwise than the relay (see {@link disagreeingReader}): a second opinion
 * behind the strict grammar below, which is what makes the readings agree.
 * One step per parser.
 */
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
 * Why the service is certain to refuse a message for its From fields, or
 * undefined: it has none (400 `invalid_eml`), or one of them holds no
 * address (400 `invalid_address`; a service may read either of two From
 * fields, mailparser reads the last). A From's address is read as mailparser
 * reads it: with the address parser it bundles, and, where that reading
 * leaves room for mailparser's own decoding (encoded words, `xn--`
 * domains), with mailparser itself when it is installed.
 *
 * Without mailparser, a From is read for certain where the relay's strict
 * grammar ({@link readAddressList}, on which parsers agree) and the
 * Nodemailer peer's parser find the same first address. Any other From is
 * left to the service, unless `certain` asks for a certain reading (the
 * outbox stores the message, and nobody would hear of the service's
 * refusal): it is then refused too.
 *
 * @param options.certain refuse a From the relay cannot read for certain
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

/** Whether a From holds an address as the service reads it, holds none, or cannot be told without mailparser. */
async function fromReading(value: string): Promise<'address' | 'none' | 'uncertain'> {
  // The parser mailparser bundles when it is installed (the first reader), else the peer's.
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

/** The first address of a From as the relay's strict grammar reads it, or undefined where it reads none for certain. */
function strictFirstAddress(value: string): string | undefined {
  try {
    return new AddressListReader(value, 'From', new ReadingBudget({})).read()[0];
  } catch {
    return undefined;
  }
}

/**
 * Every address a reader of the message could take a From or Sender value
 * to name: the relay's strict reading (where it reads the value), each
 * Nodemailer parser's, mailparser's (when installed), and every text shaped
 * like an address once encoded words are decoded and compatibility forms
 * folded (NFKC: `ｃｅｏ＠ｂａｎｋ．ｅｘａｍｐｌｅ`), as a display name or a comment
 * that a mail program shows may hold one.
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
  // As a mail program shows the text: adjacent encoded words joined (RFC 2047 6.2), quoted pairs unescaped,
  // and once more without comments (`ceo(x)@bank.example`).
  const shown = decodedWords(value.replace(/(\?=)\s+(?==\?)/g, '$1')).replace(/\\(.)/g, '$1');
  const texts = `${shown} ${withoutComments(shown)} ${names}`.normalize('NFKC');
  for (const word of texts.split(ADDRESS_SEPARATORS)) {
    const parts = word.split('@');
    for (let i = 1; i < parts.length; i++) if (parts[i - 1] && parts[i]) add(`${parts[i - 1]}@${parts[i]}`);
  }
  return [...found];
}

/** The text without its parenthesised comments, nested ones included (one pass: linear). */
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

/** What ends text shaped like an address (characters around an `@`): white space and the specials. Split on, never backtracked over. */
const ADDRESS_SEPARATORS = /[\s<>"(),;:[\]\\]+/;

const FROM_ONLY = { skipHtmlToText: true, skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true };

type MimeAddress = { address?: string; name?: string; group?: MimeAddress[] };
type MimeParser = (source: Buffer, options?: object) => Promise<{ from?: { value: MimeAddress[] } }>;

let mimeParser: MimeParser | null | undefined;

/** mailparser's `simpleParser` (an optional peer: the emulator's parser), or null when it is not installed. */
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

/** The first address of a parsed From, groups flattened, as the emulator takes it. */
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

/** An RFC 2047 encoded word: its charset (language suffix included), encoding and text. */
const ENCODED_WORD = /=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g;

/**
 * The charsets the relay decodes as mailparser (libmime, iconv-lite) does,
 * by their lower-case label: TextDecoder's label, or the relay's own decoder.
 * libmime reads `us-ascii` as UTF-8, and decodes labels iconv-lite lacks (or
 * that it reads otherwise than TextDecoder: `unicode`, `utf-8x`, `cp936`,
 * `utf7imap`...) each its own way.
 */
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

/**
 * The charset of the first encoded word in the text that the relay cannot
 * decode as the service's parser does, or undefined; always undefined where
 * mailparser is installed (it is then run over the text itself).
 */
export function unreadCharset(text: string): string | undefined {
  if (loadMimeParser()) return undefined;
  for (const [, charset] of text.matchAll(ENCODED_WORD)) if (!charsetOf(charset!)) return charset;
  return undefined;
}

/** The text with its RFC 2047 encoded words (`=?charset?B|Q?...?=`) decoded, as far as the relay knows the charset. */
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

/** UTF-32 text, which TextDecoder lacks; a code point out of range is U+FFFD. */
function utf32(bytes: Buffer, bigEndian: boolean): string {
  let out = '';
  for (let i = 0; i + 4 <= bytes.length; i += 4) {
    const code = bigEndian ? bytes.readUInt32BE(i) : bytes.readUInt32LE(i);
    out += code <= 0x10ffff ? String.fromCodePoint(code) : '\uFFFD';
  }
  return out;
}

/** UTF-7 text (RFC 2152), which TextDecoder lacks: `+` and modified Base64 of UTF-16BE up to `-`. */
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

/** The fields of a header section; a line that is neither a field nor a continuation is refused. One step per {@link FIELDS_PER_STEP} lines. */
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

/** The fields of a header section, without reading their values (see {@link readRelayHeaders} for the rules). */
export function headerFields(head: Buffer): RelayHeaderField[] {
  return runWhole(splittingFields(head));
}

/** The index of the colon of a field line (a name of printable ASCII, white space allowed before the colon). */
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

/** The first address of a From value, read leniently (the service checks From itself; {@link fromRefusal} what it refuses). */
function firstAddress(value: string): string | false {
  try {
    return new AddressListReader(value, 'From', new ReadingBudget({})).read()[0] ?? false;
  } catch {
    return false;
  }
}

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
    // mailparser decodes an xn-- domain before the service checks the address: one that decodes to characters
    // the service refuses (a zero-width space, a bidirectional control) is refused by it, after any 250.
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

  /**
   * A quoted string, quotes included; a backslash escapes the next character.
   * Inside a group one holding `;` is refused: Nodemailer before 10.6 ends the
   * group at it, and reads what follows as recipients outside the group.
   */
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
   * Skips a comment of plain text. A comment is read only beside an address:
   * an entry that is a comment alone is refused, as parsers read one as a
   * name or as an address. So is one holding a character in
   * {@link COMMENT_SPECIALS}: parsers disagree on where such a comment ends
   * (nested parentheses, a backslash) and on whether an address, a
   * separator or a quote inside it is a recipient, and `a@x (c (d) <e@y>)`
   * was delivered to `e@y` alone.
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

/**
 * An address as mailparser hands it on: a domain after `@xn--` decoded from
 * Punycode label by label (the `punycode.js` it uses: `xn--` in lower case,
 * RFC 3490 full stops read as dots), the address as it is where a label
 * does not decode.
 */
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

/** RFC 3492 decoding of one label (without its `xn--`). @throws {RangeError} when it is not Punycode */
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

/** A value as quoted in an error: JSON, cut to {@link SHOWN} characters. */
export function shown(text: string): string {
  return JSON.stringify(text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text);
}

/** The error for a header section past the relay's {@link HeaderLimits} (permanent `EMESSAGE`, `554 5.6.0`). */
function tooMuch(problem: string): EmlApiError {
  return new EmlApiError('EMESSAGE', `The relay does not read this header section: ${problem}`, {
    command: 'DATA',
    permanent: true,
  });
}

/** The error for an address field the service refuses (permanent `EMESSAGE`, `554 5.6.0`). */
function badAddressField(field: RelayHeaderField, problem: string): EmlApiError {
  return new EmlApiError('EMESSAGE', `The ${field.name} header ${problem}; the email service refuses it`, {
    command: 'DATA',
    permanent: true,
  });
}

/** The error for a header section the relay cannot read for certain (permanent `EMESSAGE`, `554 5.6.0`). */
export function unreadable(problem: string): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The relay cannot read the message's recipients for certain (${problem}); the service might read others from it`,
    { command: 'DATA', permanent: true },
  );
}

/** One entry of Nodemailer's address parser: an address, or a group of them. */
interface ParsedEntry {
  name?: string;
  address?: string;
  group?: ParsedEntry[];
}

type AddressParser = (text: string) => ParsedEntry[];

/** One address parser the relay checks its reading against. */
export interface ServiceAddressReader {
  /** Where it was loaded from, e.g. `nodemailer 10.0.12 (mailparser's)`. */
  readonly name: string;
  /** The addresses of an address list, groups flattened, in order; '' for an entry without one. */
  read(value: string): string[];
}

/**
 * Nodemailer releases before 7 parse an address list in time quadratic in its
 * length (ten seconds for a header section of 1 MiB, which the relay takes):
 * they are not run as a cross-check.
 */
const FIRST_LINEAR_MAJOR = 7;

let loaded: readonly ServiceAddressReader[] | undefined;

/**
 * The address parsers the service's side reads To, Cc and Bcc with, as far
 * as this machine has them: Nodemailer's `addressparser` as mailparser (the
 * emulator's MIME parser, and that of services built on it) loads it, from
 * mailparser's own dependencies (mailparser 3.9.31 bundles Nodemailer
 * 10.0.12, whose parser reads comments and groups otherwise than 10.6's), and
 * the copy of the `nodemailer` peer dependency when it is another. Both are
 * optional here: mailparser is an optional peer, and a reader that cannot be
 * loaded is left out (the relay's own strict reading stays the rule).
 *
 * Loaded once, on first use.
 */
export function serviceAddressReaders(): readonly ServiceAddressReader[] {
  loaded ??= loadReaders();
  return loaded;
}

/**
 * Whether every service address reader reads `value` as the relay read it:
 * the same addresses, in the same order, each spelled the same way (ASCII
 * case aside, as {@link addressKey} compares them).
 *
 * @returns undefined when they agree, else the first reader that does not and what it read
 */
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
    // Resolved from mailparser's own folder: npm nests the Nodemailer it depends on there when versions differ.
    add(createRequire(join(dirname(here.resolve('mailparser')), 'index.js')), "mailparser's");
  } catch {
    // mailparser is not installed: only the peer's copy is run.
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
 * The form in which two spellings of one mailbox compare equal, as the
 * service delivers them: ASCII letters case-insensitively (the service, and
 * the emulator, fold case), every other character exactly as written.
 *
 * Nothing else is folded, on purpose: no Unicode normalisation, no Unicode
 * case folding, no IDNA mapping, no quotes dropped. Each of those makes two
 * spellings one mailbox for the relay that the service may keep apart, and a
 * header listing both (`victim@example.test`, `victim@𝐞xample.test`,
 * `victim@ｅxample.test`...) would then be mailed once per spelling for one
 * `RCPT TO`. Stricter than the service is safe: two spellings the relay keeps
 * apart must each be in `RCPT TO`. So an internationalised domain is written
 * the same way (`xn--` or Unicode) in `RCPT TO` and in the header; and a
 * quoted local part the relay reads only where the quotes are needed (it
 * refuses `"ann"@x`, which mailparser reads as `"ann"@x` in angle brackets
 * and as `ann@x` without).
 */
export function addressKey(address: string): string {
  return asciiLowerCase(address);
}

/** The text with A-Z made a-z and nothing else changed (`toLowerCase` also folds non-ASCII letters, and the Kelvin sign to k). */
export function asciiLowerCase(text: string): string {
  return text.replace(/[A-Z]+/g, (run) => run.toLowerCase());
}
