import type { IncomingMessage } from 'node:http';
import type { AddressObject, ParsedMail } from 'mailparser';
import { html, type PageAnswer, type SafeHtml } from '../pages/public-pages.js';
import type { EmulatorState } from '../state/emulator-state.js';
import type { InboxMessage } from '../state/mail-store.js';
import type { DeliveredMessage } from '../state/records.js';
import { decodeWords } from '../state/mime-parts.js';
import { parseMime } from '../operations/send-operations.js';
import { headerSectionLength, parseHeaderFields } from '../../protocol/message-format.js';
import {
  attachmentName,
  FRAME_SANDBOX,
  formatSize,
  INBOX_HEADERS,
  INERT_CSP,
  inboxPage,
  isCalendar,
  messagePath,
  plural,
  sandboxedHtml,
  servedType,
  timeElement,
} from './inbox-pages.js';

/** Raw source shown inline up to this many bytes; the raw link has all of it. */
export const RAW_PREVIEW_BYTES = 256 * 1024;

interface Panel {
  tab: string;
  label: string;
  content: SafeHtml;
}

/**
 * `GET /inbox/messages/{id}`: one message as its recipient `copy` got it, with its HTML (sandboxed), text (links
 * clickable), decoded headers, raw source, attachments and calendar events.
 */
export async function messagePage(message: InboxMessage, copy: DeliveredMessage): Promise<PageAnswer> {
  const base = messagePath(copy.id);
  const group = message.group;
  const fields = parseHeaderFields(copy.raw);
  // Only the header section: names in From, To and Cc decoded (RFC 2047) without reading the body.
  const head = await parseMime(copy.raw.subarray(0, headerSectionLength(copy.raw)));
  const cc = addressText(head.cc);
  const named = new Set([...message.to, ...message.cc].map((a) => a.address.toLowerCase()));
  const shown = message.copies.filter((c) => named.has(c.to.toLowerCase())).map((c) => c.to);
  const hidden = message.copies.length - shown.length;
  const deliveredTo = [...shown, ...(hidden > 0 ? [`${plural(hidden, 'Bcc recipient')}`] : [])].join(', ');
  const meta: [string, string | SafeHtml][] = [
    ['From', addressText(head.from) ?? copy.from],
    ['To', addressText(head.to) ?? copy.to],
    ...(cc === undefined ? [] : [['Cc', cc] as [string, string]]),
    ['Delivered to', deliveredTo || copy.to],
    ['Received', timeElement(copy.deliveredAt)],
    ['Message-ID', html`<code>${copy.messageId}</code>`],
    ...(group === undefined ? [] : [['Group', group] as [string, string]]),
    ...(message.tags.length === 0 ? [] : [['Tags', message.tags.join(', ')] as [string, string]]),
  ];

  const calendars = copy.attachments.some((a) => isCalendar(a.contentType))
    ? (await parsedDelivery(copy)).attachments
        .filter((a) => isCalendar(a.contentType))
        .map((a) => calendarEvents(a.content.toString('utf8')))
    : [];
  // A calendar often travels twice (a text/calendar alternative and an .ics attachment): each event once.
  const events = [...new Map(calendars.flat().map((e) => [JSON.stringify(e), e])).values()];
  const files = copy.attachments.map((a, i) => {
    const name = attachmentName(a, i);
    const details = [a.contentType, formatSize(a.size), ...(a.disposition === 'inline' ? ['inline'] : [])];
    return html`<li><a class="attachment" href="${`${base}/attachments/${i}`}" download>${name}</a>
<span class="muted">${details.join(' \u00b7 ')}</span></li>`;
  });

  const source = copy.raw.subarray(0, RAW_PREVIEW_BYTES).toString('utf8');
  const panels: Panel[] = [
    ...(copy.html === undefined
      ? []
      : [
          {
            tab: 'html',
            label: 'HTML',
            content: html`<iframe id="html-body" title="HTML body of the message" sandbox="${FRAME_SANDBOX}" referrerpolicy="no-referrer" src="${`${base}/html`}"></iframe>`,
          },
        ]),
    {
      tab: 'text',
      label: 'Text',
      content:
        copy.text === undefined
          ? html`<p class="empty">This message has no plain-text part.</p>`
          : html`<pre id="text-body">${linkedText(copy.text)}</pre>`,
    },
    {
      tab: 'headers',
      label: 'Headers',
      content: html`<table class="headers"><tbody>
${lines(fields, (f) => html`<tr><td>${f.name}</td><td>${decodeWords(f.value)}</td></tr>`)}
</tbody></table>`,
    },
    {
      tab: 'raw',
      label: 'Raw',
      content: html`<pre id="raw-source">${source}</pre>
<p class="note">${copy.raw.length > RAW_PREVIEW_BYTES ? `Showing the first ${formatSize(RAW_PREVIEW_BYTES)} of ${formatSize(copy.raw.length)}. ` : ''}<a href="${`${base}/raw`}">Open the raw source</a> \u00b7 <a href="${`${base}/raw`}" download="${copy.id}.eml">Download .eml</a></p>`,
    },
  ];

  const main = html`<p><a href="/">\u2190 Inbox</a></p>
<div class="head"><h1 id="subject">${copy.subject || '(no subject)'}</h1>${group === undefined ? '' : html`<span class="badge">group: ${group}</span>`}
<span class="js-only actions" id="message-actions" data-id="${message.id}"><button type="button" id="mark-unread">Mark unread</button> <button type="button" id="delete-message" class="danger">Delete</button></span></div>
<div class="card"><dl class="meta">
${lines(meta, ([name, value]) => html`<dt>${name}</dt><dd>${value}</dd>`)}
</dl></div>
${events.length === 0 ? '' : html`<div class="card" id="events"><h2>${events.length === 1 ? 'Calendar event' : 'Calendar events'}</h2><ul class="files">\n${lines(events, eventItem)}\n</ul></div>`}
${files.length === 0 ? '' : html`<div class="card" id="attachments"><h2>Attachments</h2><ul class="files">\n${lines(files, (f) => f)}\n</ul></div>`}
<div class="card">
<div class="tabs" role="tablist" aria-label="Message parts">
${panels.map((p) => html`<button type="button" role="tab" id="tab-${p.tab}" data-tab="${p.tab}" aria-controls="panel-${p.tab}">${p.label}</button>`)}
</div>
${lines(panels, (p) => html`<section class="panel" id="panel-${p.tab}" role="tabpanel" tabindex="0" aria-labelledby="tab-${p.tab}"><h2>${p.label}</h2>\n${p.content}\n</section>`)}
</div>`;
  return inboxPage({ title: copy.subject || '(no subject)', current: 'inbox', main, script: MESSAGE_SCRIPT });
}

function addressText(value: AddressObject | AddressObject[] | undefined): string | undefined {
  if (!value) return undefined;
  const text = (Array.isArray(value) ? value : [value]).map((a) => a.text).join(', ');
  return text || undefined;
}

/** Items one per line, as the page's source shows them. */
function lines<T>(items: T[], line: (item: T) => SafeHtml): SafeHtml[] {
  return items.map((item, i) => html`${i > 0 ? '\n' : ''}${line(item)}`);
}

const URL_IN_TEXT = /\bhttps?:\/\/[^\s<>"'`]+/g;

/** Plain text with its http(s) URLs as links that open a new tab; everything escaped. */
export function linkedText(text: string): SafeHtml[] {
  const out: SafeHtml[] = [];
  let at = 0;
  for (const match of text.matchAll(URL_IN_TEXT)) {
    // Punctuation that ends a sentence is not part of the URL.
    const url = match[0].replace(/[.,;:!?)\]}]+$/, '');
    out.push(html`${text.slice(at, match.index)}`);
    out.push(html`<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`);
    at = match.index + url.length;
  }
  out.push(html`${text.slice(at)}`);
  return out;
}

/** What the inbox shows of a calendar event (a VEVENT of an `.ics` part). */
export interface CalendarEvent {
  summary: string;
  start: string;
  end: string;
  location: string;
  organizer: string;
  method: string;
}

/** The events of an iCalendar text, read leniently (lines unfolded, parameters dropped, text unescaped). */
export function calendarEvents(ics: string): CalendarEvent[] {
  const unfolded = ics.slice(0, 1024 * 1024).replace(/\r?\n[ \t]/g, '');
  const method = /^METHOD(?:;[^:]*)?:(.*)$/im.exec(unfolded)?.[1]?.trim() ?? '';
  const events: CalendarEvent[] = [];
  for (const block of unfolded.split(/^BEGIN:VEVENT\s*$/im).slice(1, 51)) {
    const body = block.split(/^END:VEVENT\s*$/im)[0] ?? '';
    const value = (name: string) => {
      const m = new RegExp(`^${name}(?:;[^:\\r\\n]*)?:(.*)$`, 'im').exec(body);
      return (m?.[1] ?? '')
        .trim()
        .replace(/\\([,;\\])/g, '$1')
        .replace(/\\n/gi, ' ');
    };
    events.push({
      summary: value('SUMMARY'),
      start: icsTime(value('DTSTART')),
      end: icsTime(value('DTEND')),
      location: value('LOCATION'),
      organizer: value('ORGANIZER').replace(/^mailto:/i, ''),
      method,
    });
  }
  return events;
}

/** `20250301T093000Z` as `2025-03-01 09:30 UTC`, a date as `2025-03-01`; others as written. */
function icsTime(value: string): string {
  const m = /^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})?(Z)?)?$/.exec(value);
  if (!m) return value;
  const [, y, mo, d, h, mi, , z] = m;
  return h === undefined ? `${y}-${mo}-${d}` : `${y}-${mo}-${d} ${h}:${mi}${z ? ' UTC' : ''}`;
}

function eventItem(event: CalendarEvent): SafeHtml {
  const when = [event.start, event.end].filter(Boolean).join(' \u2013 ');
  const details = [when, event.location, event.organizer && `organizer ${event.organizer}`, event.method].filter(
    Boolean,
  );
  return html`<li><strong class="event-summary">${event.summary || '(no title)'}</strong>
<span class="muted">${details.join(' \u00b7 ')}</span></li>`;
}

/** `GET /inbox/messages/{id}/raw`: the delivered bytes (no Bcc), as plain text. */
export function rawAnswer(copy: DeliveredMessage): PageAnswer {
  return {
    status: 200,
    contentType: 'text/plain; charset=utf-8',
    body: copy.raw,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': INERT_CSP,
      'content-disposition': disposition('inline', `${copy.id}.eml`),
    },
  };
}

/**
 * `GET /inbox/messages/{id}/html`: the HTML body for the message view's sandboxed iframe, `cid:` images inlined as
 * data: URLs and links opening new tabs (a `<base target="_blank">`).
 * @returns undefined when the message has no HTML body
 */
export async function htmlAnswer(
  state: EmulatorState,
  req: IncomingMessage,
  copy: DeliveredMessage,
): Promise<PageAnswer | undefined> {
  if (copy.html === undefined) return undefined;
  const parsed = await parsedDelivery(copy);
  const body = typeof parsed.html === 'string' ? parsed.html : copy.html;
  return sandboxedHtml(state, req, `<base target="_blank">${body}`);
}

/**
 * `GET /inbox/messages/{id}/attachments/{index}`: one attachment's decoded bytes, as a download under its own name and
 * content type. The delivered message is parsed once for its page, frame and downloads.
 * @returns undefined when there is no attachment at that index
 */
export async function attachmentAnswer(copy: DeliveredMessage, index: number): Promise<PageAnswer | undefined> {
  if (index >= copy.attachments.length) return undefined;
  const parsed = await parsedDelivery(copy);
  const attachment = parsed.attachments[index];
  if (!attachment) return undefined;
  return {
    status: 200,
    contentType: servedType(attachment.contentType),
    body: attachment.content,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': INERT_CSP,
      'content-disposition': disposition('attachment', attachmentName(attachment, index)),
    },
  };
}

/** A Content-Disposition value with an ASCII `filename` and the exact name in `filename*` (RFC 6266). */
function disposition(kind: 'inline' | 'attachment', filename: string): string {
  const ascii = filename.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  const exact = encodeURIComponent(filename).replace(
    /['()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `${kind}; filename="${ascii}"; filename*=UTF-8''${exact}`;
}

/** Parsed deliveries kept: the ones someone is looking at (a page, then its frame and files). */
const KEPT = 16;
/** ...and no more of them than this many bytes of message. */
const KEPT_BYTES = 64 * 1024 * 1024;

const recent = new Map<string, { parsed: Promise<ParsedMail>; bytes: number }>();
let keptBytes = 0;

/**
 * A delivery parsed once for the inbox (its HTML with `cid:` images as data: URLs, and its attachments), shared by the
 * requests of its page, frame and downloads. The last few are kept; older ones are parsed again if opened.
 */
export function parsedDelivery(copy: DeliveredMessage): Promise<ParsedMail> {
  let entry = recent.get(copy.id);
  if (entry) {
    // Most recently used last.
    recent.delete(copy.id);
  } else {
    const parsed = parseMime(copy.raw, { skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true });
    entry = { parsed, bytes: copy.raw.length };
    keptBytes += entry.bytes;
    parsed.catch(() => forget(copy.id));
  }
  recent.set(copy.id, entry);
  for (const id of recent.keys()) {
    if (recent.size <= 1 || (recent.size <= KEPT && keptBytes <= KEPT_BYTES)) break;
    forget(id);
  }
  return entry.parsed;
}

function forget(id: string): void {
  const entry = recent.get(id);
  if (!entry) return;
  recent.delete(id);
  keptBytes -= entry.bytes;
}

/**
 * The message view: the HTML, text, headers and raw sections as WAI-ARIA tabs (arrow keys, Home and End move between
 * them; every section shows without script), and its Delete and Mark unread buttons.
 */
export const MESSAGE_SCRIPT = `
(() => {
  const tabs = [...document.querySelectorAll('.tabs [role=tab]')];
  const show = (tab) => {
    for (const other of tabs) {
      const on = other === tab;
      other.setAttribute('aria-selected', String(on));
      other.tabIndex = on ? 0 : -1;
      document.getElementById(other.getAttribute('aria-controls')).hidden = !on;
    }
  };
  const select = (tab, focus) => {
    show(tab);
    if (focus) tab.focus();
    history.replaceState(null, '', '#' + tab.dataset.tab);
  };
  for (const tab of tabs) {
    tab.addEventListener('click', () => select(tab, false));
    tab.addEventListener('keydown', (event) => {
      const at = tabs.indexOf(tab);
      const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      select(tabs[(to + tabs.length) % tabs.length], true);
    });
  }
  show(tabs.find((tab) => '#' + tab.dataset.tab === location.hash) ?? tabs[0]);
  const actions = document.getElementById('message-actions');
  const ids = { IDs: [actions.dataset.id] };
  const send = (method, body) =>
    fetch('/api/v1/messages', { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  document.getElementById('mark-unread').addEventListener('click', async (event) => {
    const response = await send('PUT', { ...ids, Read: false });
    if (response.ok) event.target.textContent = 'Marked unread';
  });
  document.getElementById('delete-message').addEventListener('click', async () => {
    const response = await send('DELETE', ids);
    if (response.ok) location.assign('/');
  });
})();
`;
