import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { readBody, type SiteSection } from '../http/api-router.js';
import { sendPage, type PageAnswer } from '../pages/public-pages.js';
import type { EmulatorState } from '../state/emulator-state.js';
import type { InboxAddress, InboxMessage } from '../state/mail-store.js';
import { compareTags, htmlToText, MAX_TAGS, uniqueTags } from '../state/mail-store.js';
import { type MessageFilter, parseSearch } from '../state/mail-search.js';
import { mimeSummary, partContent, type MimePart } from '../state/mime-parts.js';
import { parseHeaderFields } from '../../protocol/message-format.js';
import { VERSION } from '../../shared/version.js';
import { fieldOf, mailpitSend, SendRefused } from './mailpit-send.js';
import type { WebAccess } from './web-access.js';
import { INBOX_HEADERS, INERT_CSP, messagePath, sandboxedHtml, servedType } from './inbox-pages.js';

/**
 * Mailpit's REST API v1 at the emulator's own address: the paths, query parameters, field names and JSON shapes
 * Mailpit's clients call (`mailpit-api`, `cypress-mailpit`, hand-written helpers), over the emulator's inbox. What
 * makes no sense here (releasing to SMTP, SpamAssassin...) answers 501 naming the feature. It answers only who may read
 * the mail ({@link WebAccess}).
 */
export function inspectionApi(
  state: EmulatorState,
  access: WebAccess,
  startedAt: number,
  maxSendBody: number,
): SiteSection {
  const api = new InspectionApi(state, startedAt, maxSendBody);
  return {
    owns: (_method, path) =>
      path.startsWith('/api/v1/') || path === '/api/v1' || path.startsWith('/view/') || PROBES.has(path),
    async serve(req, res, path, query) {
      if (PROBES.has(path)) {
        // Mailpit's probes for orchestrators, which ask by a pod's address: they show nothing to guard.
        sendPage(res, req.method, text(200, ''));
        return;
      }
      const answer = access.refusal(req) ?? (await api.answer(req, path, new URLSearchParams(query)));
      sendPage(res, req.method, { ...answer, headers: { ...INBOX_HEADERS, ...answer.headers } });
    },
  };
}

/** Mailpit's liveness and readiness paths: the emulator is ready once it listens. */
const PROBES = new Set(['/livez', '/readyz']);

/** Largest JSON body read (IDs of every message of a full inbox fit many times over). */
const MAX_BODY = 8 * 1024 * 1024;

type Handler = (req: IncomingMessage, params: string[], query: URLSearchParams) => Promise<PageAnswer> | PageAnswer;

interface ApiRoute {
  pattern: RegExp;
  methods: Partial<Record<string, Handler>>;
}

/** An answer the API gives in plain text, as Mailpit's errors and `ok`s. */
function text(status: number, body: string, headers: Record<string, string> = {}): PageAnswer {
  return { status, contentType: 'text/plain; charset=utf-8', body, headers };
}

/** JSON as Go's encoder writes it: compact, a line break at the end. */
function json(body: unknown): PageAnswer {
  return { status: 200, contentType: 'application/json', body: `${JSON.stringify(body)}\n` };
}

const NOT_FOUND = text(404, '404 page not found');
const MESSAGE_NOT_FOUND = text(404, 'Message not found');

function notSupported(feature: string, instead: string): Handler {
  return () =>
    text(
      501,
      `Not supported by the eml-api emulator: ${feature}. ${instead} (Mailpit's API v1 is implemented for reading, searching, marking and deleting captured mail.)`,
    );
}

class BadRequest extends Error {}

class InspectionApi {
  readonly #state: EmulatorState;
  readonly #startedAt: number;
  readonly #maxSendBody: number;
  readonly #routes: ApiRoute[];

  constructor(state: EmulatorState, startedAt: number, maxSendBody: number) {
    this.#state = state;
    this.#startedAt = startedAt;
    this.#maxSendBody = maxSendBody;
    const id = '([^/]+)';
    this.#routes = [
      { pattern: /^\/api\/v1\/info$/, methods: { GET: () => json(this.#info()) } },
      { pattern: /^\/api\/v1\/webui$/, methods: { GET: () => json(WEBUI) } },
      {
        pattern: /^\/api\/v1\/messages$/,
        methods: {
          GET: (_req, _p, q) => json(this.#list(undefined, q)),
          PUT: (req, _p, q) => this.#setRead(req, q),
          DELETE: (req) => this.#delete(req),
        },
      },
      {
        pattern: /^\/api\/v1\/search$/,
        methods: {
          GET: (_req, _p, q) => json(this.#list(requireQuery(q), q)),
          DELETE: (_req, _p, q) => {
            const filter = searchFilter(requireQuery(q), q);
            this.#state.mail.delete(this.#state.mail.newestFirst().filter(filter));
            return text(200, 'ok');
          },
        },
      },
      { pattern: new RegExp(`^/api/v1/message/${id}$`), methods: { GET: (_r, [i], q) => this.#summary(i!, q) } },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/headers$`),
        methods: { GET: (_r, [i], q) => this.#with(i!, q, (m) => json(headerMap(m.raw))) },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/raw$`),
        methods: {
          GET: (_r, [i], q) =>
            this.#with(i!, q, (m) => ({
              status: 200,
              contentType: 'text/plain; charset=utf-8',
              body: m.raw,
              headers: {
                'content-security-policy': INERT_CSP,
                ...(q.get('dl') === '1'
                  ? { 'content-disposition': `attachment; filename="${fileSafe(m.id)}.eml"` }
                  : {}),
              },
            })),
        },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/part/${id}$`),
        methods: { GET: (_r, [i, part], q) => this.#with(i!, q, (m) => partAnswer(m, part!)) },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/part/${id}/thumb$`),
        methods: {
          GET: notSupported(
            'attachment thumbnails',
            'Download the part itself from /api/v1/message/{ID}/part/{PartID}.',
          ),
        },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/html-check$`),
        methods: {
          GET: notSupported('the HTML check (email client compatibility)', 'Check HTML with a dedicated tool.'),
        },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/link-check$`),
        methods: {
          GET: notSupported('the link check', 'The emulator makes no requests to the links in captured mail.'),
        },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/sa-check$`),
        methods: { GET: notSupported('the SpamAssassin check', 'The emulator runs no spam filter.') },
      },
      {
        pattern: new RegExp(`^/api/v1/message/${id}/release$`),
        methods: {
          POST: notSupported(
            'releasing a message to an SMTP server',
            'The emulator stands in for the email service and delivers nowhere; send to the real service with its API key instead.',
          ),
        },
      },
      { pattern: /^\/api\/v1\/send$/, methods: { POST: (req) => this.#send(req) } },
      {
        pattern: /^\/api\/v1\/chaos$/,
        methods: Object.fromEntries(
          ['GET', 'PUT'].map((m) => [
            m,
            notSupported(
              'Chaos (SMTP error triggers)',
              'Inject failures into the service API with the faults option, emu.setFaults() or eml-api serve --fault-unavailable and the other --fault flags.',
            ),
          ]),
        ),
      },
      {
        pattern: /^\/api\/v1\/tags$/,
        methods: { GET: () => json(this.#state.mail.tags()), PUT: (req) => this.#setTags(req) },
      },
      {
        pattern: new RegExp(`^/api/v1/tags/${id}$`),
        methods: { PUT: (req, [tag]) => this.#renameTag(req, tag!), DELETE: (_r, [tag]) => this.#deleteTag(tag!) },
      },
      {
        pattern: /^\/view\/([^/]+)\.html$/,
        methods: {
          GET: (req, [i], q) => this.#with(i!, q, (m) => this.#viewHtml(req, m, q), MESSAGE_NOT_FOUND),
        },
      },
      {
        pattern: /^\/view\/([^/]+)\.txt$/,
        methods: {
          GET: (_r, [i], q) =>
            this.#with(
              i!,
              q,
              (m) => {
                this.#state.mail.markRead([m], true);
                return {
                  ...text(200, mailpitText(m, mimeSummary(m.raw).parts)),
                  headers: { 'content-security-policy': INERT_CSP },
                };
              },
              MESSAGE_NOT_FOUND,
            ),
        },
      },
      {
        pattern: /^\/view\/([^/.]+)$/,
        methods: {
          GET: (_r, [i], q) => {
            const m = this.#find(i!, q);
            return text(302, '', { location: m ? messagePath(m.id) : '/' });
          },
        },
      },
    ];
  }

  async answer(req: IncomingMessage, path: string, query: URLSearchParams): Promise<PageAnswer> {
    const method = (req.method ?? 'GET').toUpperCase();
    for (const route of this.#routes) {
      const match = route.pattern.exec(path);
      if (!match) continue;
      const handler = route.methods[method === 'HEAD' ? 'GET' : method];
      if (!handler) {
        return text(405, 'Method Not Allowed', { allow: Object.keys(route.methods).join(', ') });
      }
      try {
        const params = match.slice(1).map((p) => decodeURIComponent(p!));
        return await handler(req, params, query);
      } catch (err) {
        if (err instanceof BadRequest || err instanceof URIError) return text(400, err.message);
        throw err;
      }
    }
    return NOT_FOUND;
  }

  /** A message by id, or `latest` (of a search, with `query`). */
  #find(id: string, query: URLSearchParams): InboxMessage | undefined {
    const mail = this.#state.mail;
    if (id !== 'latest') return mail.messageOfCopy(id);
    const search = query.get('query')?.trim();
    if (!search) return mail.latest();
    return mail.newestFirst().find(searchFilter(search, query));
  }

  /** Answers for a message; an unknown one gets Mailpit's 404 (the /view pages always say "Message not found"). */
  #with(
    id: string,
    query: URLSearchParams,
    answer: (m: InboxMessage) => PageAnswer,
    unknown = id === 'latest' ? MESSAGE_NOT_FOUND : NOT_FOUND,
  ): PageAnswer {
    const message = this.#find(id, query);
    return message ? answer(message) : unknown;
  }

  #info(): Record<string, unknown> {
    const mail = this.#state.mail;
    const messages = mail.newestFirst();
    const counts = new Map<string, number>();
    for (const m of messages) for (const t of m.tags) counts.set(t, (counts.get(t) ?? 0) + 1);
    // Go writes a map's keys in byte order.
    const tags = Object.fromEntries([...counts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    const smtp = this.#state.smtpStats;
    return {
      Version: VERSION,
      LatestVersion: 'disabled',
      Database: this.#state.dataDir ?? '',
      DatabaseSize: messages.reduce((sum, m) => sum + m.raw.length, 0),
      Messages: messages.length,
      Unread: mail.unreadCount(),
      Tags: tags,
      RuntimeStats: {
        Uptime: Math.floor((Date.now() - this.#startedAt) / 1000),
        Memory: process.memoryUsage().rss,
        MessagesDeleted: mail.deletedCount,
        SMTPAccepted: smtp.accepted,
        SMTPAcceptedSize: smtp.acceptedSize,
        SMTPRejected: smtp.rejected,
        SMTPIgnored: 0,
        MessagesDropped: mail.droppedCount,
        MaxMessages: mail.maxMessages,
      },
    };
  }

  #list(search: string | undefined, query: URLSearchParams): Record<string, unknown> {
    const mail = this.#state.mail;
    const start = wholeParam(query.get('start'), 0);
    const limit = wholeParam(query.get('limit'), 50);
    const before = Date.parse(query.get('before') ?? '');
    const unread = mail.unreadCount();
    let page: InboxMessage[];
    let matchingCount = mail.count();
    let matchingUnread = unread;
    if (search === undefined && Number.isNaN(before)) {
      // The whole inbox: a page read from its end, nothing else looked at.
      page = mail.page(start, limit === 0 ? Number.MAX_SAFE_INTEGER : limit);
    } else {
      let matching = mail.newestFirst();
      if (!Number.isNaN(before)) matching = matching.filter((m) => m.created.getTime() < before);
      if (search !== undefined) matching = matching.filter(searchFilter(search, query));
      // As Mailpit: a limit of 0 lists every message, but finds no search results.
      page = limit === 0 ? (search === undefined ? matching.slice(start) : []) : matching.slice(start, start + limit);
      matchingCount = matching.length;
      matchingUnread = matching.filter((m) => !m.read).length;
    }
    return {
      total: mail.count(),
      unread,
      count: page.length,
      messages_count: matchingCount,
      messages_unread: matchingUnread,
      start,
      tags: mail.tags(),
      messages: page.map(listSummary),
    };
  }

  #summary(id: string, query: URLSearchParams): PageAnswer {
    return this.#with(id, query, (m) => {
      this.#state.mail.markRead([m], true);
      return json(messageSummary(m));
    });
  }

  async #setRead(req: IncomingMessage, query: URLSearchParams): Promise<PageAnswer> {
    const body = await jsonBody(req, false);
    const read = fieldOf(body, 'read');
    if (read !== undefined && typeof read !== 'boolean') throw new BadRequest('Read must be true or false');
    const ids = idList(fieldOf(body, 'ids'));
    const search = fieldOf(body, 'search');
    if (search !== undefined && typeof search !== 'string') throw new BadRequest('Search must be a string');
    if (ids.length > 0 && search) throw new BadRequest('You may specify either IDs or a search query, not both');
    const mail = this.#state.mail;
    const targets = search
      ? mail.newestFirst().filter(searchFilter(search, query))
      : ids.length > 0
        ? this.#byIds(ids)
        : mail.newestFirst();
    mail.markRead(targets, read === true);
    return text(200, 'ok');
  }

  async #delete(req: IncomingMessage): Promise<PageAnswer> {
    const body = await jsonBody(req, true);
    const ids = idList(fieldOf(body, 'ids'));
    const mail = this.#state.mail;
    if (ids.length === 0) mail.clear();
    else mail.delete(this.#byIds(ids));
    return text(200, 'ok');
  }

  #byIds(ids: string[]): InboxMessage[] {
    return ids.flatMap((id) => this.#state.mail.messageOfCopy(id) ?? []);
  }

  async #setTags(req: IncomingMessage): Promise<PageAnswer> {
    const body = await jsonBody(req, false);
    const tags = fieldOf(body, 'tags') ?? [];
    if (!Array.isArray(tags) || tags.some((t) => typeof t !== 'string')) {
      throw new BadRequest('Tags must be an array of strings');
    }
    const next = uniqueTags(tags as string[]).sort(compareTags);
    if (next.length > MAX_TAGS) throw new BadRequest(`A message holds at most ${MAX_TAGS} tags; got ${next.length}`);
    this.#state.mail.setTags(this.#byIds(idList(fieldOf(body, 'ids'))), () => next);
    return text(200, 'ok');
  }

  async #renameTag(req: IncomingMessage, tag: string): Promise<PageAnswer> {
    const name = fieldOf(await jsonBody(req, false), 'name');
    const [to] = typeof name === 'string' ? uniqueTags([name]) : [];
    if (to === undefined)
      throw new BadRequest(`invalid tag name: ${typeof name === 'string' ? name.slice(0, 100) : ''}`);
    if (tag === to) return text(200, 'ok');
    const from = tag.toLowerCase();
    const existing = this.#state.mail.tags();
    if (!existing.some((t) => t.toLowerCase() === from)) throw new BadRequest(`tag not found: ${tag}`);
    if (to.toLowerCase() !== from && existing.some((t) => t.toLowerCase() === to.toLowerCase())) {
      throw new BadRequest(`tag already exists: ${to}`);
    }
    this.#state.mail.setTags(this.#state.mail.newestFirst(), (tags) =>
      tags.map((t) => (t.toLowerCase() === from ? to : t)).sort(compareTags),
    );
    return text(200, 'ok');
  }

  #deleteTag(tag: string): PageAnswer {
    const doomed = tag.toLowerCase();
    if (!this.#state.mail.tags().some((t) => t.toLowerCase() === doomed)) throw new BadRequest(`tag not found: ${tag}`);
    this.#state.mail.setTags(this.#state.mail.newestFirst(), (tags) => tags.filter((t) => t.toLowerCase() !== doomed));
    return text(200, 'ok');
  }

  async #send(req: IncomingMessage): Promise<PageAnswer> {
    try {
      const message = await mailpitSend(this.#state, await jsonBody(req, false, this.#maxSendBody));
      return json({ ID: message.id });
    } catch (err) {
      if (!(err instanceof SendRefused || err instanceof BadRequest)) throw err;
      return { ...json({ Error: err.message }), status: 400 };
    }
  }

  #viewHtml(req: IncomingMessage, m: InboxMessage, query: URLSearchParams): PageAnswer {
    if (m.html === undefined || m.html === '') return text(404, 'This message does not contain a HTML part');
    this.#state.mail.markRead([m], true);
    const { inline, attachments } = mimeSummary(m.raw);
    const parts = new Map<string, string>();
    for (const part of [...inline, ...attachments]) {
      const cid = part.contentId.toLowerCase();
      if (cid !== '' && !parts.has(cid)) parts.set(cid, part.partId);
    }
    // One pass over the HTML, whatever the number of parts.
    let html = m.html.replace(/(=["']?)cid:([^"'\s/>;]+)(?=["'\s/>;])/gi, (whole, before: string, cid: string) => {
      const partId = parts.get(cid.toLowerCase());
      return partId === undefined ? whole : `${before}/api/v1/message/${encodeURIComponent(m.id)}/part/${partId}`;
    });
    if (query.get('embed') === '1') html = linksInNewTabs(html);
    return sandboxedHtml(this.#state, req, html);
  }
}

const WEBUI = {
  Label: 'eml-api emulator',
  MessageRelay: {
    Enabled: false,
    SMTPServer: '',
    ReturnPath: '',
    AllowedRecipients: '',
    BlockedRecipients: '',
    OverrideFrom: '',
    PreserveMessageIDs: false,
    RecipientAllowlist: '',
  },
  SpamAssassin: false,
  ChaosEnabled: false,
  DuplicatesIgnored: false,
  HideDeleteAllButton: false,
};

/** A search of a request, its dates read in the request's `tz`. */
function searchFilter(search: string, query: URLSearchParams): MessageFilter {
  return parseSearch(search, query.get('tz') ?? undefined);
}

function requireQuery(query: URLSearchParams): string {
  const search = query.get('query')?.trim();
  if (!search) throw new BadRequest('Error: no search query');
  return search;
}

/** A whole-number query parameter, as Mailpit reads `start` and `limit`: anything else is the default. */
function wholeParam(value: string | null, fallback: number): number {
  if (value === null || !/^\+?\d{1,15}$/.test(value.trim())) return fallback;
  return Number(value.trim());
}

/** Reads a JSON object body. Field names match case-insensitively, as Go's decoder matches them. */
async function jsonBody(
  req: IncomingMessage,
  emptyIsObject: boolean,
  limit = MAX_BODY,
): Promise<Record<string, unknown>> {
  const raw = await readBody(req, limit).catch((err: unknown) => {
    throw new BadRequest(err instanceof Error ? err.message : 'the request body could not be read');
  });
  const body = raw.toString('utf8').trim();
  if (body === '' || body === 'null') {
    if (emptyIsObject) return {};
    throw new BadRequest('EOF');
  }
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (err) {
    throw new BadRequest(`The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new BadRequest('The request body must be a JSON object');
  }
  return value as Record<string, unknown>;
}

function idList(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || value.some((id) => typeof id !== 'string')) {
    throw new BadRequest('IDs must be an array of message IDs (strings)');
  }
  return value as string[];
}

function address(a: InboxAddress): { Name: string; Address: string } {
  return { Name: a.name, Address: a.address };
}

/** The address fields a list entry and a message summary share, in Mailpit's order. */
function addressFields(m: InboxMessage): Record<string, unknown> {
  return {
    From: address(m.from ?? { name: '', address: '' }),
    To: m.to.map(address),
    Cc: m.cc.map(address),
    Bcc: m.bcc.map(address),
    ReplyTo: m.replyTo.map(address),
  };
}

/** A message as Mailpit's lists show it. */
function listSummary(m: InboxMessage): Record<string, unknown> {
  return {
    ID: m.id,
    MessageID: m.messageId,
    Read: m.read,
    ...addressFields(m),
    Subject: m.subject,
    Created: goTime(m.created.getTime()),
    Username: '',
    Tags: m.tags,
    Size: m.raw.length,
    Attachments: m.attachmentCount,
    Snippet: m.snippet,
  };
}

/** A message as Mailpit's `GET /api/v1/message/{ID}` shows it. */
function messageSummary(m: InboxMessage): Record<string, unknown> {
  const fields = parseHeaderFields(m.raw);
  const header = (name: string) => fields.find((f) => f.name.toLowerCase() === name)?.value;
  const dateHeader = header('date');
  const date = dateHeader === undefined ? NaN : Date.parse(dateHeader);
  const offset = /([+-])(\d\d)(\d\d)\s*(?:\([^()]*\)\s*)?$/.exec(dateHeader ?? '');
  const { inline, attachments, parts } = mimeSummary(m.raw);
  const unsubscribe = header('list-unsubscribe');
  return {
    ID: m.id,
    MessageID: m.messageId,
    ...addressFields(m),
    ReturnPath: header('return-path')?.replace(/^<|>$/g, '') || (m.from?.address ?? ''),
    Subject: m.subject,
    ListUnsubscribe:
      unsubscribe === undefined
        ? { Header: '', Links: [], Errors: '', HeaderPost: '' }
        : {
            Header: unsubscribe,
            ...listUnsubscribeLinks(unsubscribe),
            HeaderPost: header('list-unsubscribe-post') ?? '',
          },
    Date: Number.isNaN(date)
      ? goTime(m.created.getTime())
      : goTime(date, offset ? (offset[1] === '-' ? -1 : 1) * (Number(offset[2]) * 60 + Number(offset[3])) : 0),
    Tags: m.tags,
    Username: '',
    Text: mailpitText(m, parts),
    HTML: m.html ?? '',
    Size: m.raw.length,
    Inline: inline.map((p) => attachmentSummary(m.raw, p)),
    Attachments: attachments.map((p) => attachmentSummary(m.raw, p)),
  };
}

/**
 * A message's text as Mailpit gives it: an HTML-only message's is made from its HTML, as enmime's html2text makes it
 * (links as `text ( url )`, bold as `*text*`), so tests that read links and codes from `Text` find them where Mailpit
 * puts them.
 */
function mailpitText(m: InboxMessage, parts: MimePart[]): string {
  const textPart = parts.some((p) => p.contentType === 'text/plain' && p.disposition !== 'attachment');
  if (textPart || !m.html) return m.text ?? '';
  return htmlToText(linksAsText(m.html).replace(/<\/?(?:b|strong)(?=[\s>])[^>]*>/gi, '*'));
}

/** Each `<a href>`'s URL written after its text, as `( url )`, unless the text is the URL; one pass. */
function linksAsText(html: string): string {
  let out = '';
  let last = 0;
  let link: { href: string; start: number } | undefined;
  for (const tag of html.matchAll(/<a(?=[\s>])([^>]*)>|<\/a\s*>/gi)) {
    out += html.slice(last, tag.index);
    last = tag.index + tag[0].length;
    if (tag[1] !== undefined) {
      const href = /\shref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))/i.exec(tag[1]);
      link = {
        href: htmlToText(href?.[1] ?? href?.[2] ?? href?.[3] ?? '').replace(/^mailto:/i, ''),
        start: out.length,
      };
    } else if (link) {
      if (link.href !== '' && htmlToText(out.slice(link.start)) !== link.href) out += ` ( ${link.href} )`;
      link = undefined;
    }
  }
  return out + html.slice(last);
}

/** A time as Go's JSON encoder writes it: RFC 3339, the fraction without its trailing zeros, at an offset in minutes. */
function goTime(ms: number, offsetMinutes = 0): string {
  const local = new Date(ms + offsetMinutes * 60_000).toISOString();
  const fraction = local.slice(20, 23).replace(/0+$/, '');
  const abs = Math.abs(offsetMinutes);
  const pad = (n: number) => String(n).padStart(2, '0');
  const zone =
    offsetMinutes === 0 ? 'Z' : `${offsetMinutes < 0 ? '-' : '+'}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
  return `${local.slice(0, 19)}${fraction === '' ? '' : `.${fraction}`}${zone}`;
}

function attachmentSummary(raw: Buffer, part: MimePart): Record<string, unknown> {
  const content = partContent(raw, part);
  const hash = (algorithm: string) => createHash(algorithm).update(content).digest('hex');
  return {
    PartID: part.partId,
    FileName: part.fileName || part.contentId,
    ContentType: part.contentType,
    ContentID: part.contentId,
    Size: content.length,
    Checksums: { MD5: hash('md5'), SHA1: hash('sha1'), SHA256: hash('sha256') },
  };
}

/**
 * The links of a List-Unsubscribe header and what is wrong with it, as Mailpit checks it: `<...>` entries split by
 * commas, at most one mailto and one http(s) link, no spaces.
 */
export function listUnsubscribeLinks(value: string): { Links: string[]; Errors: string } {
  const v = value.replace(/\([^)]*\)/g, '').trim();
  const entries = [...v.matchAll(/<([^>]*)>/g)].map((m) => m[1]!);
  if (entries.length === 0) return { Links: [], Errors: `"${v}" no valid unsubscribe links found` };
  if (!/^<.*>$/s.test(v)) return { Links: [], Errors: `"${v}" should be enclosed in <>` };
  if (entries.length > 2)
    return { Links: [], Errors: `"${v}" should include a maximum of one email and one HTTP link` };
  for (const between of v.matchAll(/>([^<]*)</g)) {
    if (!/^\s*,\s*$/.test(between[1]!))
      return { Links: [], Errors: `"${v}" <> should be split with a comma and optional spaces` };
  }
  const links: string[] = [];
  const errors: string[] = [];
  let mailto = false;
  let http = false;
  for (const link of entries) {
    if (/\s/.test(link)) errors.push(`"${link}" should not contain spaces`);
    else if (/^mailto:[a-zA-Z0-9]/.test(link)) {
      if (mailto) errors.push(`"${link}" should only contain one mailto:`);
      else links.push(link);
      mailto = true;
    } else if (/^https?:\/\/[a-zA-Z0-9]/i.test(link)) {
      if (http) errors.push(`"${link}" should only contain one HTTP link`);
      else links.push(link);
      http = true;
    } else errors.push(`"${link}" should start with either http(s):// or mailto:`);
  }
  return { Links: links, Errors: errors.join(', ') };
}

/** Header fields as Go's `mail.Header`: canonical names, values in order, unfolded. */
function headerMap(raw: Buffer): Record<string, string[]> {
  const map: Record<string, string[]> = {};
  for (const f of parseHeaderFields(raw)) (map[canonicalName(f.name)] ??= []).push(f.value);
  return Object.fromEntries(Object.entries(map).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** Go's canonical MIME header key: `message-id` is `Message-Id`. */
function canonicalName(name: string): string {
  if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) return name;
  return name.toLowerCase().replace(/(^|-)([a-z])/g, (_w, dash: string, c: string) => dash + c.toUpperCase());
}

function partAnswer(m: InboxMessage, partId: string): PageAnswer {
  const part = mimeSummary(m.raw).parts.find((p) => p.partId === partId);
  if (!part) return NOT_FOUND;
  const name = part.fileName || part.contentId;
  return {
    status: 200,
    contentType: servedType(part.contentType),
    body: partContent(m.raw, part),
    headers: {
      'content-disposition': `inline; filename="${pathEscape(name)}"`,
      'content-security-policy': INERT_CSP,
    },
  };
}

/** Go's `url.PathEscape`: UTF-8 bytes percent-encoded except unreserved characters and `$&+:=@`. */
function pathEscape(value: string): string {
  return encodeURIComponent(value)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%(24|26|2B|3A|3D|40)/g, (_w, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

function fileSafe(id: string): string {
  return id.replace(/[^A-Za-z0-9_.-]/g, '_');
}

/** Every `<a>` opens a new tab without a referrer, as Mailpit's `embed=1` makes them. */
export function linksInNewTabs(html: string): string {
  return html.replace(/<a(?=[\s>])([^>]*)>/gi, (_whole, attributes: string) => {
    const rest = attributes.replace(/\s(?:target|rel)\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]*)/gi, '');
    return `<a${rest} target="_blank" rel="noreferrer noopener">`;
  });
}
