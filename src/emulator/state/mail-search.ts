import { cleanSearchText, type InboxAddress, type InboxMessage } from './mail-store.js';

/**
 * Mailpit's search syntax, over the inbox: words and quoted phrases (all must match), `-` or `!` before a term to
 * exclude it, and the operators `from:`, `to:`, `cc:`, `bcc:`, `reply-to:`, `addressed:`, `subject:`, `message-id:`,
 * `tag:`, `is:read`, `is:unread`, `is:tagged`, `has:attachment`, `has:inline`, `after:`, `before:`, `larger:`,
 * `smaller:`. Free text looks in the header values, the body's text and attachment names.
 */

/** A parsed search: a test for one message. */
export type MessageFilter = (message: InboxMessage) => boolean;

/** Longest query read; the rest is ignored (no query needs more). */
const MAX_QUERY = 4096;
/** Most terms read from one query. */
const MAX_TERMS = 64;

/**
 * Parses a search query.
 * @param timeZone IANA zone for the dates of `after:` and `before:` (Mailpit's `tz`); unknown ones are ignored
 * @example
 * const filter = parseSearch('from:shop@example.test -is:read "order 1042"');
 * const hits = messages.filter(filter);
 */
export function parseSearch(query: string, timeZone?: string): MessageFilter {
  const tests: MessageFilter[] = [];
  for (const term of searchTerms(query.slice(0, MAX_QUERY)).slice(0, MAX_TERMS)) {
    const test = termFilter(term, timeZone);
    if (test) tests.push(test);
  }
  return (message) => tests.every((test) => test(message));
}

/** Splits a query at spaces outside double quotes; the quotes go. */
export function searchTerms(query: string): string[] {
  const terms: string[] = [];
  let current = '';
  let quoted = false;
  const flush = () => {
    const term = current.replace(/"/g, '').trim();
    if (term !== '') terms.push(term);
    current = '';
  };
  for (const c of query) {
    if (c === '"') {
      quoted = !quoted;
      current += c;
    } else if (c === ' ' && !quoted) flush();
    else current += c;
  }
  flush();
  return terms;
}

function termFilter(raw: string, timeZone: string | undefined): MessageFilter | undefined {
  if (cleanSearchText(raw) === '') return undefined;
  let term = raw;
  let exclude = false;
  if (term.length > 1 && (term[0] === '-' || term[0] === '!')) {
    exclude = true;
    term = term.slice(1);
  }
  const test = positiveFilter(term, timeZone);
  if (!test) return undefined;
  return exclude ? (m) => !test(m) : test;
}

const ADDRESS_FIELDS: Record<string, (m: InboxMessage) => InboxAddress[]> = {
  'to:': (m) => m.to,
  'from:': (m) => (m.from ? [m.from] : []),
  'cc:': (m) => m.cc,
  'bcc:': (m) => m.bcc,
  'reply-to:': (m) => m.replyTo,
  'addressed:': (m) => [...m.to, ...(m.from ? [m.from] : []), ...m.cc, ...m.bcc, ...m.replyTo],
};

function positiveFilter(term: string, timeZone: string | undefined): MessageFilter | undefined {
  const lower = term.toLowerCase();
  for (const [prefix, addresses] of Object.entries(ADDRESS_FIELDS)) {
    if (!lower.startsWith(prefix)) continue;
    const want = cleanSearchText(term.slice(prefix.length));
    if (want === '') return undefined;
    return (m) => addresses(m).some((a) => `${a.name} ${a.address}`.toLowerCase().includes(want));
  }
  if (lower.startsWith('subject:')) {
    const want = lower.slice(8);
    return want === '' ? undefined : (m) => m.subject.toLowerCase().includes(want);
  }
  if (lower.startsWith('message-id:')) {
    const want = cleanSearchText(term.slice(11));
    return want === '' ? undefined : (m) => m.messageId.toLowerCase().includes(want);
  }
  if (lower.startsWith('tag:')) {
    const want = cleanSearchText(term.slice(4));
    return want === '' ? undefined : (m) => m.tags.some((t) => t.toLowerCase() === want);
  }
  switch (lower) {
    case 'is:read':
      return (m) => m.read;
    case 'is:unread':
      return (m) => !m.read;
    case 'is:tagged':
      return (m) => m.tags.length > 0;
    case 'has:attachment':
    case 'has:attachments':
      return (m) => m.attachmentCount > 0;
    case 'has:inline':
    case 'has:inlines':
      return (m) => m.inlineCount > 0;
  }
  for (const [prefix, after] of [
    ['after:', true],
    ['before:', false],
  ] as const) {
    if (!lower.startsWith(prefix)) continue;
    const at = parseSearchDate(cleanSearchText(term.slice(prefix.length)).toUpperCase(), timeZone);
    if (at === undefined) return undefined;
    return after ? (m) => m.created.getTime() >= at : (m) => m.created.getTime() <= at;
  }
  for (const [prefix, larger] of [
    ['larger:', true],
    ['smaller:', false],
  ] as const) {
    if (!lower.startsWith(prefix)) continue;
    const size = sizeInBytes(cleanSearchText(term.slice(prefix.length)));
    // As Mailpit: a size it cannot read makes the term plain text.
    if (size > 0) return larger ? (m) => m.raw.length > size : (m) => m.raw.length < size;
  }
  const want = cleanSearchText(lower);
  return (m) => m.searchText.includes(want);
}

/** `2kb`, `4MB`, `1.5m`, `300` as bytes; 0 when it is none of these. */
function sizeInBytes(value: string): number {
  const m = /^(\d+(?:\.\d+)?)\s?([a-z]{1,2})?$/.exec(value.toLowerCase());
  if (!m) return 0;
  const n = Number(m[1]);
  const unit = m[2] ?? '';
  if (unit === '') return Math.floor(n);
  if (unit === 'k' || unit === 'kb') return Math.floor(n * 1024);
  if (unit === 'm' || unit === 'mb') return Math.floor(n * 1024 * 1024);
  return 0;
}

/**
 * The time of a search date, in ms: `2025-04-30` (midnight), `2025-04-30T14:05` or `2025-04-30 14:05`, with seconds, or with a zone (`Z`,
 * `+02:00`), or a Unix time in seconds or ms. A date without a zone is read in `timeZone` (else the machine's own).
 * @returns undefined when it is no date
 */
export function parseSearchDate(value: string, timeZone?: string): number | undefined {
  if (/^\d{10}$/.test(value)) return Number(value) * 1000;
  if (/^\d{13}$/.test(value)) return Number(value);
  const m =
    /^(\d{4})[-/](\d{1,2})[-/](\d{1,2})(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?(Z|[+-]\d{2}:?\d{2})?$/.exec(
      value,
    );
  if (!m) return undefined;
  const [, y, mo, d, h = '0', mi = '0', s = '0', frac = '0', zone] = m;
  const parts = [
    Number(y),
    Number(mo) - 1,
    Number(d),
    Number(h),
    Number(mi),
    Number(s),
    Number(frac.slice(0, 3).padEnd(3, '0')),
  ] as const;
  if (parts[1] > 11 || parts[2] < 1 || parts[2] > 31 || parts[3] > 23 || parts[4] > 59 || parts[5] > 60)
    return undefined;
  const utc = Date.UTC(...parts);
  if (zone !== undefined) {
    if (zone === 'Z') return utc;
    const sign = zone[0] === '-' ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    return utc - sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60_000;
  }
  const zoneOffset = timeZone === undefined ? undefined : offsetIn(timeZone, utc);
  if (zoneOffset === undefined) return new Date(...parts).getTime();
  // The offset at the guessed instant, then again at the result (a date across a DST change).
  const first = utc - zoneOffset;
  return utc - (offsetIn(timeZone!, first) ?? zoneOffset);
}

/** The offset of an IANA zone from UTC at an instant, in ms; undefined for an unknown zone. */
function offsetIn(timeZone: string, at: number): number | undefined {
  let format: Intl.DateTimeFormat;
  try {
    format = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
  } catch {
    return undefined;
  }
  const part = (type: string) => Number(format.formatToParts(at).find((p) => p.type === type)?.value);
  const local = Date.UTC(part('year'), part('month') - 1, part('day'), part('hour'), part('minute'), part('second'));
  return local - Math.floor(at / 1000) * 1000;
}
