import { randomUUID } from 'node:crypto';
import { parseAddresses, parseHeaderFields, removeHeaderFields } from '../../protocol/message-format.js';
import type { DeliveredMessage, EmulatorAttachment, EmulatorMessage, ReadMessage } from './records.js';
import { decodeWords, mimeSummary } from './mime-parts.js';

/** An address as the inbox shows it: display name ('' when none) and address. */
export interface InboxAddress {
  name: string;
  address: string;
}

/** One inbox message as Mailpit counts them (an accepted send, an SMTP transaction, or one member's group copy). */
export interface InboxMessage {
  /** The id of its first delivered copy (`dlv_…`): the id the web inbox and the inspection API use. */
  readonly id: string;
  /** Change number of its arrival. */
  readonly seq: number;
  /** The accepted message it belongs to ({@link EmulatorMessage.id}). */
  readonly messageRef: string;
  /** The message as sent, Bcc header kept (as Mailpit keeps it). */
  readonly raw: Buffer;
  readonly from: InboxAddress | undefined;
  readonly to: InboxAddress[];
  readonly cc: InboxAddress[];
  /** Bcc header addresses: recipients the other headers do not name. */
  readonly bcc: InboxAddress[];
  readonly replyTo: InboxAddress[];
  /** Decoded subject. */
  readonly subject: string;
  /** Message-ID without angle brackets. */
  readonly messageId: string;
  readonly created: Date;
  readonly text: string | undefined;
  readonly html: string | undefined;
  /** Attachments as Mailpit's lists count them. */
  readonly attachmentCount: number;
  /** Inline parts, counted the same way. */
  readonly inlineCount: number;
  readonly snippet: string;
  /** Lower-cased text a free-text search looks in: header values, body text, file names. */
  readonly searchText: string;
  /** The group of a group send. */
  readonly group: string | undefined;
  /** One per recipient, in the order the recipients were named. */
  readonly copies: readonly DeliveredMessage[];
  read: boolean;
  tags: string[];
}

/** What the store needs to take in one message. */
export interface IncomingMessage {
  messageRef: string;
  /** The bytes as sent (for EML sends, with their Bcc header). */
  raw: Buffer;
  /** Recipients who get a copy; none means nothing is stored. */
  recipients: readonly string[];
  from: string;
  subject: string;
  /** Message-ID with angle brackets. */
  messageId: string;
  text: string | undefined;
  html: string | undefined;
  attachments: EmulatorAttachment[];
  group?: string | undefined;
}

/** How a message was when it was saved: its copies' ids and its marks. */
export interface SavedMarks {
  copyIds: string[];
  read: boolean;
  tags: string[];
}

/** Told of every change of the inbox (the data directory writes them). */
export interface MailObserver {
  stored(message: InboxMessage): void;
  removed(messages: InboxMessage[]): void;
  changed(messages: InboxMessage[]): void;
  cleared(): void;
}

/** One change of the inbox; `seq` grows by one per change, survives {@link MailStore.clear} and is never reused. */
export type MailChange =
  | DeliveryChange
  | { kind: 'reset'; seq: number }
  | { kind: 'delete'; seq: number; ids: string[] }
  | { kind: 'update'; seq: number; ids: string[] };

/** A message's arrival, numbered as a {@link MailChange}. */
export interface DeliveryChange {
  kind: 'delivery';
  seq: number;
  message: InboxMessage;
}

/** Messages kept when no limit is given. */
export const DEFAULT_MAX_MESSAGES = 10_000;
/** Edits (deletes, read marks) kept for readers that reconnect; one that missed older ones starts over. */
const EDIT_LOG = 500;
/** A larger edit is announced as a reset: readers reload rather than replay thousands of ids. */
const LARGE_EDIT = 200;

/**
 * The emulator's mail: accepted messages, the inbox (with read marks and tags) and each recipient's mailbox, at most
 * `maxMessages` of each, the oldest dropped first.
 */
export class MailStore {
  readonly #messages: EmulatorMessage[] = [];
  readonly #messagesById = new Map<string, EmulatorMessage>();
  readonly #mailboxes = new Map<string, DeliveredMessage[]>();
  /** Inbox messages, oldest first. */
  #inbox: InboxMessage[] = [];
  readonly #byId = new Map<string, InboxMessage>();
  /** Copy id to its message. */
  readonly #byCopy = new Map<string, InboxMessage>();
  readonly #listeners = new Set<(change: MailChange) => void>();
  readonly #edits: MailChange[] = [];
  #seq = 0;
  /** Readers whose cursor is before this start over (a clear, a large or forgotten edit). */
  #staleBefore = 0;
  #deleted = 0;
  #dropped = 0;
  #observer: MailObserver | undefined;
  #maxMessages: number;

  constructor(maxMessages = DEFAULT_MAX_MESSAGES) {
    this.#maxMessages = maxMessages;
  }

  /** Most inbox messages kept. */
  get maxMessages(): number {
    return this.#maxMessages;
  }

  /** Tells `observer` of every change from now on. */
  watch(observer: MailObserver): void {
    this.#observer = observer;
  }

  /** Messages deleted or dropped for room since the start. */
  get deletedCount(): number {
    return this.#deleted;
  }

  /** Messages dropped for room (the oldest, past `maxMessages`) since the start. */
  get droppedCount(): number {
    return this.#dropped;
  }

  /**
   * Records an accepted message and delivers one copy per recipient, without Bcc: one inbox message.
   * @param failed recipients among `parsed.recipients` whose delivery fails: recorded, never delivered
   */
  accept(
    endpoint: string,
    uploaded: Buffer,
    parsed: ReadMessage,
    now: Date,
    failed: readonly string[] = [],
  ): EmulatorMessage {
    const raw = owned(uploaded);
    const recipients = parsed.recipients.filter((r) => !failed.includes(r));
    const message: EmulatorMessage = {
      id: `msg_${randomUUID()}`,
      endpoint,
      from: parsed.from,
      recipients,
      subject: parsed.subject,
      messageId: parsed.messageId,
      raw,
      text: parsed.text,
      html: parsed.html,
      attachments: parsed.attachments,
      acceptedAt: now,
      failed: [...failed],
    };
    this.record(message);
    this.store({ ...parsed, recipients, messageRef: message.id, raw }, now);
    return message;
  }

  /** Records an accepted message; its inbox messages are stored separately ({@link store}). */
  record(message: EmulatorMessage): void {
    message.raw = owned(message.raw);
    this.#messages.push(message);
    this.#messagesById.set(message.id, message);
    while (this.#messages.length > this.#maxMessages) this.#messagesById.delete(this.#messages.shift()!.id);
  }

  /**
   * Puts one message in the inbox and a copy without Bcc in each recipient's mailbox, dropping the oldest when full.
   * @returns undefined when it has no recipient
   */
  store(incoming: IncomingMessage, now: Date, saved?: SavedMarks): InboxMessage | undefined {
    if (incoming.recipients.length === 0) return undefined;
    incoming = { ...incoming, raw: owned(incoming.raw) };
    const delivered = owned(removeHeaderFields(incoming.raw, 'bcc'));
    const copies: DeliveredMessage[] = incoming.recipients.map((to, i) => ({
      id: saved?.copyIds[i] ?? `dlv_${randomUUID()}`,
      messageRef: incoming.messageRef,
      to,
      from: incoming.from,
      subject: incoming.subject,
      messageId: incoming.messageId,
      raw: delivered,
      text: incoming.text,
      html: incoming.html,
      attachments: incoming.attachments,
      deliveredAt: now,
    }));
    const message = readInboxMessage(incoming, copies, ++this.#seq, now);
    if (saved) {
      message.read = saved.read;
      message.tags = saved.tags;
    }
    this.#inbox.push(message);
    this.#byId.set(message.id, message);
    for (const copy of copies) {
      this.#byCopy.set(copy.id, message);
      const key = copy.to.toLowerCase();
      let box = this.#mailboxes.get(key);
      if (!box) this.#mailboxes.set(key, (box = []));
      box.push(copy);
    }
    this.#emit({ kind: 'delivery', seq: message.seq, message });
    this.#observer?.stored(message);
    while (this.#inbox.length > this.#maxMessages) this.#dropOldest();
    return message;
  }

  #dropOldest(): void {
    const oldest = this.#inbox.shift()!;
    this.#forget(oldest);
    for (const copy of oldest.copies) {
      const box = this.#mailboxes.get(copy.to.toLowerCase());
      if (!box) continue;
      if (box[0] === copy) box.shift();
      else box.splice(box.indexOf(copy) >>> 0, 1);
      if (box.length === 0) this.#mailboxes.delete(copy.to.toLowerCase());
    }
    this.#deleted++;
    this.#dropped++;
    this.#observer?.removed([oldest]);
  }

  #forget(message: InboxMessage): void {
    this.#byId.delete(message.id);
    for (const copy of message.copies) this.#byCopy.delete(copy.id);
  }

  /** Accepted messages, oldest first (a copy of the list). */
  messages(): EmulatorMessage[] {
    return [...this.#messages];
  }

  /** Copies delivered to one address (case-insensitive), oldest first. */
  mailbox(address: string): DeliveredMessage[] {
    return [...(this.#mailboxes.get(address.trim().toLowerCase()) ?? [])];
  }

  /** Every address that holds mail. */
  addresses(): string[] {
    return [...this.#mailboxes.keys()];
  }

  /** An accepted message by its id. */
  message(id: string): EmulatorMessage | undefined {
    return this.#messagesById.get(id);
  }

  /** An inbox message by its id. */
  inboxMessage(id: string): InboxMessage | undefined {
    return this.#byId.get(id);
  }

  /** The inbox message of a delivered copy, by the copy's id (the message's own id included). */
  messageOfCopy(copyId: string): InboxMessage | undefined {
    return this.#byCopy.get(copyId);
  }

  /** A delivered copy by its id (`dlv_…`). */
  delivery(id: string): DeliveredMessage | undefined {
    return this.#byCopy.get(id)?.copies.find((c) => c.id === id);
  }

  /** Inbox messages, newest first (a copy). */
  newestFirst(): InboxMessage[] {
    return this.#inbox.slice().reverse();
  }

  /** How many messages the inbox holds. */
  count(): number {
    return this.#inbox.length;
  }

  /** How many of them are unread. */
  unreadCount(): number {
    let n = 0;
    for (const m of this.#inbox) if (!m.read) n++;
    return n;
  }

  /** The newest message, if any. */
  latest(): InboxMessage | undefined {
    return this.#inbox[this.#inbox.length - 1];
  }

  /** A page of the inbox, newest first: `limit` messages after the newest `start`. */
  page(start: number, limit: number): InboxMessage[] {
    const end = Math.max(0, this.#inbox.length - start);
    return this.#inbox.slice(Math.max(0, end - limit), end).reverse();
  }

  /** Every tag in use, sorted. */
  tags(): string[] {
    const all = new Set<string>();
    for (const m of this.#inbox) for (const t of m.tags) all.add(t);
    return [...all].sort(compareTags);
  }

  /** Deletes inbox messages and their copies. @returns how many were deleted */
  delete(messages: Iterable<InboxMessage>): number {
    const doomed = new Set<InboxMessage>();
    for (const m of messages) if (this.#byId.get(m.id) === m) doomed.add(m);
    if (doomed.size === 0) return 0;
    this.#inbox = this.#inbox.filter((m) => !doomed.has(m));
    const copies = new Set<DeliveredMessage>();
    const boxes = new Set<string>();
    for (const m of doomed) {
      this.#forget(m);
      for (const copy of m.copies) {
        copies.add(copy);
        boxes.add(copy.to.toLowerCase());
      }
    }
    for (const key of boxes) {
      const kept = (this.#mailboxes.get(key) ?? []).filter((c) => !copies.has(c));
      if (kept.length === 0) this.#mailboxes.delete(key);
      else this.#mailboxes.set(key, kept);
    }
    this.#deleted += doomed.size;
    this.#observer?.removed([...doomed]);
    this.#edit('delete', [...doomed]);
    return doomed.size;
  }

  /** Marks messages read or unread. @returns how many changed */
  markRead(messages: Iterable<InboxMessage>, read: boolean): number {
    const changed = [...messages].filter((m) => m.read !== read && this.#byId.get(m.id) === m);
    for (const m of changed) m.read = read;
    if (changed.length > 0) {
      this.#observer?.changed(changed);
      this.#edit('update', changed);
    }
    return changed.length;
  }

  /** Replaces the tags of messages. */
  setTags(messages: Iterable<InboxMessage>, tags: (current: string[]) => string[]): void {
    const changed: InboxMessage[] = [];
    for (const m of messages) {
      const next = tags(m.tags);
      if (next.join('\n') !== m.tags.join('\n')) {
        m.tags = next;
        changed.push(m);
      }
    }
    if (changed.length > 0) {
      this.#observer?.changed(changed);
      this.#edit('update', changed);
    }
  }

  #edit(kind: 'delete' | 'update', messages: InboxMessage[]): void {
    const seq = ++this.#seq;
    if (messages.length > LARGE_EDIT) {
      this.#staleBefore = seq;
      this.#edits.length = 0;
      this.#emit({ kind: 'reset', seq });
      return;
    }
    const change: MailChange = { kind, seq, ids: messages.map((m) => m.id) };
    this.#edits.push(change);
    if (this.#edits.length > EDIT_LOG) this.#staleBefore = this.#edits.shift()!.seq;
    this.#emit(change);
  }

  /** Number of the latest change: a cursor for {@link changesSince}. */
  cursor(): number {
    return this.#seq;
  }

  /**
   * The changes after cursor `since`, with at most `limit` arrivals. A reader whose cursor predates the last clear or a
   * forgotten or large edit, comes from another run, or lags more than `limit` arrivals gets a reset and the newest
   * `limit` messages: its list is rebuilt rather than replayed.
   */
  changesSince(since: number, limit = Infinity): MailChange[] {
    const stale = since < this.#staleBefore || since > this.#seq;
    if (!stale) {
      let first = this.#inbox.length;
      while (first > 0 && this.#inbox[first - 1]!.seq > since) first--;
      if (this.#inbox.length - first <= limit) {
        const arrivals: MailChange[] = this.#inbox
          .slice(first)
          .map((message) => ({ kind: 'delivery', seq: message.seq, message }));
        const edits = this.#edits.filter((e) => e.seq > since);
        return edits.length === 0 ? arrivals : [...arrivals, ...edits].sort((a, b) => a.seq - b.seq);
      }
    }
    const kept = this.#inbox.slice(Math.max(0, this.#inbox.length - limit));
    // A stale reader's cursor moves to the present; a lagging one's to just before the rows it gets.
    const resetSeq = stale || kept.length === 0 ? this.#seq : kept[0]!.seq - 1;
    return [
      { kind: 'reset', seq: resetSeq },
      ...kept.map((message): MailChange => ({ kind: 'delivery', seq: message.seq, message })),
    ];
  }

  /** Calls `listener` with every change from now on. @returns a function that stops it */
  subscribe(listener: (change: MailChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Forgets every message (accepted, inbox, mailboxes). */
  clear(): void {
    const count = this.#inbox.length;
    this.#messages.length = 0;
    this.#messagesById.clear();
    this.#mailboxes.clear();
    this.#inbox = [];
    this.#byId.clear();
    this.#byCopy.clear();
    this.#edits.length = 0;
    this.#deleted += count;
    this.#observer?.cleared();
    this.#staleBefore = ++this.#seq;
    this.#emit({ kind: 'reset', seq: this.#staleBefore });
  }

  #emit(change: MailChange): void {
    for (const listener of [...this.#listeners]) listener(change);
  }
}

/** Bytes of their own: a small Buffer often slices an 8 KB pool slab and keeps it whole while it lives. */
function owned(bytes: Buffer): Buffer {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) return bytes;
  const copy = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(copy);
  return copy;
}

/** What the inbox keeps of a message: its headers read once, a snippet and the text searches look in. */
function readInboxMessage(incoming: IncomingMessage, copies: DeliveredMessage[], seq: number, now: Date): InboxMessage {
  const fields = parseHeaderFields(incoming.raw);
  const header = (name: string) => fields.filter((f) => f.name.toLowerCase() === name).map((f) => f.value);
  const addresses = (name: string) =>
    header(name).flatMap((value) =>
      parseAddresses(value.slice(0, 64 * 1024)).map((a) => ({ name: decodeWords(a.name), address: a.address })),
    );
  const from = addresses('from')[0];
  const mime = mimeSummary(incoming.raw);
  const htmlText = incoming.html === undefined ? undefined : htmlToText(incoming.html);
  const bodyText = htmlText ?? incoming.text ?? '';
  const decoded = (name: string) => header(name).map(decodeWords).join(' ');
  const searchText = cleanSearchText(
    [
      decoded('from'),
      incoming.subject,
      decoded('to'),
      decoded('cc'),
      decoded('bcc'),
      decoded('reply-to'),
      decoded('return-path'),
      bodyText,
      // Both bodies (Mailpit reads only the HTML one when there is one): a text part's words are found too.
      htmlText === undefined ? '' : (incoming.text ?? ''),
      ...mime.attachments.map((a) => a.fileName),
    ].join(' '),
  );
  return {
    id: copies[0]!.id,
    seq,
    messageRef: incoming.messageRef,
    raw: incoming.raw,
    from,
    to: addresses('to'),
    cc: addresses('cc'),
    bcc: addresses('bcc'),
    replyTo: addresses('reply-to'),
    subject: incoming.subject,
    messageId: incoming.messageId.trim().replace(/^<|>$/g, ''),
    created: now,
    text: incoming.text,
    html: incoming.html,
    attachmentCount: mime.attachmentCount,
    inlineCount: mime.inlineCount,
    snippet: snippetOf(bodyText),
    searchText,
    group: incoming.group,
    copies,
    read: false,
    tags: tagsOf(header('x-tags'), [
      ...addresses('to'),
      ...addresses('cc'),
      ...addresses('bcc'),
      ...(from ? [from] : []),
    ]),
  };
}

/** Mailpit's snippet: the body's text, white space collapsed, up to 200 characters and an ellipsis. */
function snippetOf(text: string): string {
  const flat = text
    .replace(/\uFEFF/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return flat.length <= 200 ? flat : `${[...flat].slice(0, 200).join('')}...`;
}

/** Search text as Mailpit cleans it: line breaks, tabs and `<>",;()` as spaces, white space collapsed, lower case. */
export function cleanSearchText(text: string): string {
  return text
    .replace(/\uFEFF/g, ' ')
    .replace(/[\r\n\t<>",;()]/g, ' ')
    .replace(/\s+/g, ' ')
    .trim()
    .toLowerCase();
}

/** The readable text of an HTML body: no tags, scripts, styles or comments; entities decoded. */
export function htmlToText(html: string): string {
  return decodeEntities(
    html
      .slice(0, 4 * 1024 * 1024)
      .replace(/<!--[\s\S]*?-->/g, ' ')
      .replace(/<(script|style|head|title)\b[^>]*>[\s\S]*?<\/\1\s*>/gi, ' ')
      .replace(
        /<\/?(?:br|p|div|tr|td|th|h\d|li|ul|ol|table|blockquote|section|article|header|footer|hr)\b[^>]*>/gi,
        '\n',
      )
      .replace(/<[^>]*>/g, ''),
  )
    .replace(/[ \t]+/g, ' ')
    .replace(/ *\n[\s]*/g, '\n')
    .trim();
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };

function decodeEntities(text: string): string {
  return text.replace(/&(#x[0-9a-f]{1,6}|#\d{1,7}|[a-z]{2,6});/gi, (whole, name: string) => {
    if (name[0] === '#') {
      const code = name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : Number(name.slice(1));
      return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return ENTITIES[name.toLowerCase()] ?? whole;
  });
}

/** Characters a tag may hold, as Mailpit's rule; others become spaces. */
const TAG_INVALID = /[^a-zA-Z0-9\- _.@]/g;

/** A tag cleaned as Mailpit cleans it, or '' when nothing is left. */
export function cleanTag(tag: string): string {
  return tag.replace(TAG_INVALID, ' ').replace(/\s+/g, ' ').trim().slice(0, 100);
}

/** Unique tags (case-insensitive), in order, cleaned. */
export function uniqueTags(tags: Iterable<string>): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const raw of tags) {
    const tag = cleanTag(raw);
    if (tag === '' || seen.has(tag.toLowerCase())) continue;
    seen.add(tag.toLowerCase());
    out.push(tag);
  }
  return out;
}

/** Most tags a message holds: a header or request with more is cut (header) or refused (request). */
export const MAX_TAGS = 100;

/** Mailpit's order of tags (SQLite's NOCASE): ASCII letters folded to lower case, then by code unit. */
export function compareTags(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * Tags a new message gets, as Mailpit gives them: its X-Tags header and each `+` part of the plus addresses of its
 * recipients and sender (`ann+signup+eu@` gives `signup` and `eu`).
 */
function tagsOf(xTags: string[], addresses: InboxAddress[]): string[] {
  const fromHeader = xTags.flatMap((value) => value.split(','));
  const plus = addresses.flatMap((a) => {
    const local = a.address.slice(0, a.address.lastIndexOf('@'));
    const at = local.indexOf('+');
    return at === -1 ? [] : local.slice(at + 1).split('+');
  });
  return uniqueTags([...fromHeader, ...plus])
    .slice(0, MAX_TAGS)
    .sort(compareTags);
}
