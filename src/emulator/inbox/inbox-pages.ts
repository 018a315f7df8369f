import type { IncomingMessage } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressObject, ParsedMail } from 'mailparser';
import { html, raw, type PageAnswer, type SafeHtml } from '../pages/public-pages.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { parseMime } from '../operations/send-operations.js';
import { headerSectionLength, parseHeaderFields } from '../../protocol/message-format.js';
import type { DeliveredMessage } from '../state/records.js';

/** Most rows the list shows; older deliveries stay reachable by their URL. */
export const LIST_LIMIT = 500;

/** `GET /`: every delivered copy, newest first, kept up to date over /inbox/events. */
export function messageListPage(state: EmulatorState): PageAnswer {
  const total = state.mail.deliveryCount();
  const rows = state.mail
    .latestDeliveries(LIST_LIMIT)
    .map((copy, i) => html`${i > 0 ? '\n' : ''}${messageRow(state, copy)}`);
  const main = html`<div class="head"><h1>Inbox</h1>
<span id="count" class="muted" data-total="${total}">${plural(total, 'message')}</span>
<span id="live" class="live" aria-live="polite">Connecting\u2026</span></div>
<div class="card">
<table id="messages" class="messages" data-cursor="${state.mail.cursor()}" data-limit="${LIST_LIMIT}"${total === 0 ? raw(' hidden') : ''}>
<thead><tr><th scope="col">To</th><th scope="col" class="from">From</th><th scope="col">Subject</th><th scope="col">Received</th></tr></thead>
<tbody id="message-rows">
${rows}
</tbody></table>
<p id="empty" class="empty"${total === 0 ? '' : raw(' hidden')}>No messages yet. Send one through the API at <code>${state.baseUrl}</code> and it shows up here.</p>
</div>
${total > LIST_LIMIT ? html`<p class="muted">Showing the newest ${LIST_LIMIT} of ${total}.</p>` : ''}`;
  return inboxPage({ title: 'Inbox', current: 'inbox', main, script: LIST_SCRIPT });
}

/** Raw source shown inline up to this many bytes; the raw link has all of it. */
export const RAW_PREVIEW_BYTES = 256 * 1024;

/** The iframe's sandbox: no scripts, forms or same-origin access; links may open new tabs. */
export const FRAME_SANDBOX = 'allow-popups allow-popups-to-escape-sandbox';

interface Panel {
  tab: string;
  label: string;
  content: SafeHtml;
}

/** `GET /inbox/messages/{id}`: one delivered copy with its HTML (sandboxed), text, headers, raw source and attachments. */
export async function messagePage(state: EmulatorState, copy: DeliveredMessage): Promise<PageAnswer> {
  const base = messagePath(copy.id);
  const group = groupOf(state, copy);
  const fields = parseHeaderFields(copy.raw);
  // Only the header section: names in From, To and Cc decoded (RFC 2047) without reading the body.
  const head = await parseMime(copy.raw.subarray(0, headerSectionLength(copy.raw)));
  const cc = addressText(head.cc);
  const meta: [string, string | SafeHtml][] = [
    ['From', addressText(head.from) ?? copy.from],
    ['To', addressText(head.to) ?? copy.to],
    ...(cc === undefined ? [] : [['Cc', cc] as [string, string]]),
    ['Delivered to', copy.to],
    ['Received', timeElement(copy.deliveredAt)],
    ['Message-ID', html`<code>${copy.messageId}</code>`],
    ...(group === undefined ? [] : [['Group', group] as [string, string]]),
  ];

  const files = copy.attachments.map((a, i) => {
    const name = attachmentName(a, i);
    const details = [a.contentType, formatSize(a.size), ...(a.disposition === 'inline' ? ['inline'] : [])];
    return html`<li><a class="attachment" href="${`${base}/attachments/${i}`}" download>${name}</a>
<span class="muted">${details.join(' \u00b7 ')}</span></li>`;
  });

  const raw = copy.raw.subarray(0, RAW_PREVIEW_BYTES).toString('utf8');
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
          : html`<pre id="text-body">${copy.text}</pre>`,
    },
    {
      tab: 'headers',
      label: 'Headers',
      content: html`<table class="headers"><tbody>
${lines(fields, (f) => html`<tr><td>${f.name}</td><td>${f.value}</td></tr>`)}
</tbody></table>`,
    },
    {
      tab: 'raw',
      label: 'Raw',
      content: html`<pre id="raw-source">${raw}</pre>
<p class="note">${copy.raw.length > RAW_PREVIEW_BYTES ? `Showing the first ${formatSize(RAW_PREVIEW_BYTES)} of ${formatSize(copy.raw.length)}. ` : ''}<a href="${`${base}/raw`}">Open the raw source</a> \u00b7 <a href="${`${base}/raw`}" download="${copy.id}.eml">Download .eml</a></p>`,
    },
  ];

  const main = html`<p><a href="/">\u2190 Inbox</a></p>
<div class="head"><h1 id="subject">${copy.subject || '(no subject)'}</h1>${group === undefined ? '' : html`<span class="badge">group: ${group}</span>`}</div>
<div class="card"><dl class="meta">
${lines(meta, ([name, value]) => html`<dt>${name}</dt><dd>${value}</dd>`)}
</dl></div>
${files.length === 0 ? '' : html`<div class="card" id="attachments"><h2>Attachments</h2><ul class="files">\n${lines(files, (f) => f)}\n</ul></div>`}
<div class="card">
<div class="tabs" role="tablist" aria-label="Message parts">
${panels.map((p) => html`<button type="button" role="tab" id="tab-${p.tab}" data-tab="${p.tab}" aria-controls="panel-${p.tab}">${p.label}</button>`)}
</div>
${lines(panels, (p) => html`<section class="panel" id="panel-${p.tab}" role="tabpanel" aria-labelledby="tab-${p.tab}"><h2>${p.label}</h2>\n${p.content}\n</section>`)}
</div>`;
  return inboxPage({ title: copy.subject || '(no subject)', current: 'inbox', main, script: TABS_SCRIPT });
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

/** `GET /inbox/groups`: every group with its members and their substitutions. */
export function groupsPage(state: EmulatorState): PageAnswer {
  const ids = state.groups.ids();
  const cards = ids.map((id) => {
    const members = state.groups.members(id) ?? [];
    const rows = members.map((m) => {
      const subs = Object.entries(m.substitutions).map(([key, value]) => html`<code>${key} = ${value}</code>`);
      return html`<tr><td class="email">${m.email}</td><td>${m.name === undefined ? html`<span class="muted">\u2014</span>` : m.name}</td>
<td class="subs">${subs.length > 0 ? subs : html`<span class="muted">none</span>`}</td><td>${timeElement(m.addedAt)}</td></tr>`;
    });
    const body =
      members.length === 0
        ? html`<p class="empty">No members.</p>`
        : html`<table class="members"><thead><tr><th scope="col">Email</th><th scope="col">Name</th><th scope="col">Substitutions</th><th scope="col">Added</th></tr></thead>
<tbody>
${rows.map((row, i) => html`${i > 0 ? '\n' : ''}${row}`)}
</tbody></table>`;
    return html`<section class="card group" data-group="${id}">
<div class="card-head"><h2>${id}</h2><span class="muted">${plural(members.length, 'member')}</span></div>
${body}
</section>`;
  });
  const main = html`<div class="head"><h1>Groups</h1><span class="muted">${plural(ids.length, 'group')}</span></div>
${
  cards.length === 0
    ? html`<div class="card"><p class="empty">No groups yet. Groups are created out of band: <code>emu.createGroup('newsletter')</code>, the <code>groups</code> option, or <code>eml-api serve --group newsletter</code>.</p></div>`
    : cards.map((card, i) => html`${i > 0 ? '\n' : ''}${card}`)
}`;
  return inboxPage({ title: 'Groups', current: 'groups', main, script: GROUPS_SCRIPT });
}

/** A delivery as the inbox feed reports it. */
export interface DeliverySummary {
  /** Change number of the delivery (the feed's cursor). */
  seq: number;
  id: string;
  to: string;
  from: string;
  subject: string;
  /** ISO timestamp from the emulator's clock. */
  deliveredAt: string;
  /** The group of a group send, else null. */
  group: string | null;
  /** Attachments, inline parts excluded. */
  attachments: number;
  /** Path of the message view. */
  url: string;
  /** The list row, escaped HTML (`<tr>…</tr>`). */
  row: string;
}

/** Path of a delivery's message view. */
export function messagePath(id: string): string {
  return `/inbox/messages/${encodeURIComponent(id)}`;
}

/** Attachments a person would call attachments: not the inline parts of an HTML body. */
export function countAttachments(copy: DeliveredMessage): number {
  return copy.attachments.filter((a) => a.disposition !== 'inline').length;
}

/** The group a delivery was sent to, when it came from a group send. */
export function groupOf(state: EmulatorState, copy: DeliveredMessage): string | undefined {
  return state.mail.message(copy.messageRef)?.group;
}

/** One row of the message list; every value is escaped. */
export function messageRow(state: EmulatorState, copy: DeliveredMessage, fresh = false): SafeHtml {
  const group = groupOf(state, copy);
  const attachments = countAttachments(copy);
  const badges = html`${group === undefined ? '' : html`<span class="badge" title="Group send">group: ${group}</span>`}${attachments === 0 ? '' : html`<span class="badge">${plural(attachments, 'attachment')}</span>`}`;
  return html`<tr id="${copy.id}"${fresh ? raw(' class="new"') : ''}>
<td class="addr to">${copy.to}</td>
<td class="addr from">${copy.from}</td>
<td class="subject"><a href="${messagePath(copy.id)}">${copy.subject || '(no subject)'}</a>${badges}</td>
<td class="time">${timeElement(copy.deliveredAt)}</td>
</tr>`;
}

/** The feed's record of one delivery. */
export function deliverySummary(state: EmulatorState, seq: number, copy: DeliveredMessage): DeliverySummary {
  return {
    seq,
    id: copy.id,
    to: copy.to,
    from: copy.from,
    subject: copy.subject,
    deliveredAt: Number.isNaN(copy.deliveredAt.getTime()) ? '' : copy.deliveredAt.toISOString(),
    group: groupOf(state, copy) ?? null,
    attachments: countAttachments(copy),
    url: messagePath(copy.id),
    row: messageRow(state, copy, true).value,
  };
}

/** For answers a browser must never run anything from. */
const INERT = "sandbox; default-src 'none'";

/** The name an attachment is shown and saved under: its own, or `attachment-N`. */
export function attachmentName(attachment: { filename?: string | undefined }, index: number): string {
  // Control characters and path separators become "_": it names a file, nothing more.
  const name = [...(attachment.filename ?? '')]
    .map((c) => (c < ' ' || c === '\x7f' || c === '/' || c === '\\' ? '_' : c))
    .join('')
    .trim()
    .slice(0, 200);
  return name || `attachment-${index + 1}`;
}

/** `GET /inbox/messages/{id}/raw`: the delivered bytes (no Bcc), as plain text. */
export function rawAnswer(copy: DeliveredMessage): PageAnswer {
  return {
    status: 200,
    contentType: 'text/plain; charset=utf-8',
    body: copy.raw,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': INERT,
      'content-disposition': disposition('inline', `${copy.id}.eml`),
    },
  };
}

/**
 * `GET /inbox/messages/{id}/html`: the HTML body for the message view's
 * sandboxed iframe, `cid:` images inlined as data: URLs. Its CSP sandboxes it
 * even when opened on its own: no script runs, and it loads nothing but
 * inline styles, data: images and the emulator's hosted images.
 * @returns undefined when the message has no HTML body
 */
export async function htmlAnswer(
  state: EmulatorState,
  req: IncomingMessage,
  copy: DeliveredMessage,
): Promise<PageAnswer | undefined> {
  if (copy.html === undefined) return undefined;
  const parsed = await parsedDelivery(copy);
  const html = typeof parsed.html === 'string' ? parsed.html : copy.html;
  const origins = new Set([state.baseUrl]);
  const host = req.headers.host;
  if (host && /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/.test(host)) origins.add(`http://${host}`);
  const images = [...origins].map((origin) => `${origin}/images/`).join(' ');
  return {
    status: 200,
    contentType: 'text/html; charset=utf-8',
    body: html,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': [
        'sandbox allow-popups allow-popups-to-escape-sandbox',
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        'font-src data:',
        `img-src data: ${images}`,
        "form-action 'none'",
      ].join('; '),
    },
  };
}

/**
 * `GET /inbox/messages/{id}/attachments/{index}`: one attachment's decoded
 * bytes, as a download under its own name and content type. The delivered
 * message is parsed once for its page, frame and downloads (parsed-deliveries.ts).
 * @returns undefined when there is no attachment at that index
 */
export async function attachmentAnswer(copy: DeliveredMessage, index: number): Promise<PageAnswer | undefined> {
  if (index >= copy.attachments.length) return undefined;
  const parsed = await parsedDelivery(copy);
  const attachment = parsed.attachments[index];
  if (!attachment) return undefined;
  const type = /^[\w.+-]+\/[\w.+-]+$/.test(attachment.contentType)
    ? attachment.contentType
    : 'application/octet-stream';
  return {
    status: 200,
    contentType: type,
    body: attachment.content,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': INERT,
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
 * A delivery parsed once for the inbox (its HTML with `cid:` images as data:
 * URLs, and its attachments), shared by the requests of its page, frame and
 * downloads. The last few are kept; older ones are parsed again if opened.
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

/** A small envelope icon, inline so the browser never asks for /favicon.ico. */
const FAVICON =
  "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect x='1' y='3' width='14' height='10' rx='2' fill='%232459d6'/%3E%3Cpath d='M2 4.5l6 4.5 6-4.5' stroke='white' stroke-width='1.4' fill='none'/%3E%3C/svg%3E";

/** Headers every inbox answer carries: nothing cached, nothing sniffed, no referrer. */
export const INBOX_HEADERS: Readonly<Record<string, string>> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

export interface InboxPage {
  status?: number;
  /** The `<title>`, as text. */
  title: string;
  /** Which top navigation link is current. */
  current?: 'inbox' | 'groups';
  /** The page content. */
  main: SafeHtml;
  /** A script for the end of the body, run under the page's nonce. */
  script?: string;
}

/**
 * Wraps inbox content in the common page: top bar, inline stylesheet and a
 * Content-Security-Policy that lets only this page's own inline script run
 * and only talk to the emulator.
 */
export function inboxPage(page: InboxPage): PageAnswer {
  const nonce = randomBytes(16).toString('base64');
  const link = (href: string, label: string, name: InboxPage['current']) =>
    html`<a href="${href}"${page.current === name ? raw(' aria-current="page"') : ''}>${label}</a>`;
  const body = html`<!doctype html>
<html lang="en" class="no-js"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${page.title}</title>
<link rel="icon" href="${raw(FAVICON)}">
<style>${raw(INBOX_CSS)}</style>
</head><body>
<header class="bar"><div class="brand">EML API <span>emulator</span></div>
<nav>${link('/', 'Inbox', 'inbox')}${link('/inbox/groups', 'Groups', 'groups')}</nav></header>
<main>
${page.main}
</main>
<script nonce="${nonce}">document.documentElement.className = 'js';${raw(page.script ?? '')}</script>
</body></html>
`;
  return {
    status: page.status ?? 200,
    contentType: 'text/html; charset=utf-8',
    body,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': [
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        'img-src data:',
        `script-src 'nonce-${nonce}'`,
        "connect-src 'self'",
        "frame-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
      ].join('; '),
    },
  };
}

/** The inbox's "not found" page, with HTTP 404. */
export function notFoundPage(what: string, detail: string): PageAnswer {
  return inboxPage({
    status: 404,
    title: `${what} not found`,
    main: html`<div class="head"><h1>${what} not found</h1></div>
<div class="card"><p class="empty">${detail} <a href="/">Back to the inbox</a></p></div>`,
  });
}

/**
 * A timestamp of the emulator's clock as the inbox shows it, in UTC:
 * `2025-03-01 09:30:00 UTC`. Empty for an invalid date.
 */
export function formatTime(date: Date): string {
  if (Number.isNaN(date.getTime())) return '';
  return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** `<time>` element of {@link formatTime}, with the ISO timestamp in `datetime`. */
export function timeElement(date: Date): SafeHtml {
  if (Number.isNaN(date.getTime())) return html`<time></time>`;
  return html`<time datetime="${date.toISOString()}">${formatTime(date)}</time>`;
}

/** A byte count for people: `512 B`, `1.5 KB`, `2.0 MB`. */
export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** `1 attachment`, `2 attachments`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/*
 * The inbox pages' scripts, inlined under each page's CSP nonce. Plain
 * browser JavaScript in strings: the package's TypeScript has no DOM types.
 * Rows arrive as HTML the server escaped (see message-row.ts).
 */

/** The message list: prepends rows announced on /inbox/events, empties the list on a reset. */
export const LIST_SCRIPT = `
(() => {
  const table = document.getElementById('messages');
  const rows = document.getElementById('message-rows');
  const empty = document.getElementById('empty');
  const count = document.getElementById('count');
  const live = document.getElementById('live');
  const limit = Number(table.dataset.limit);
  let total = Number(count.dataset.total);
  const show = () => {
    count.dataset.total = String(total);
    count.textContent = total + (total === 1 ? ' message' : ' messages');
    table.hidden = total === 0;
    empty.hidden = total !== 0;
  };
  const setLive = (on) => {
    live.className = on ? 'live on' : 'live off';
    live.textContent = on ? 'Live' : 'Reconnecting\\u2026';
  };
  const events = new EventSource('/inbox/events?since=' + encodeURIComponent(table.dataset.cursor));
  events.onopen = () => setLive(true);
  events.onerror = () => setLive(false);
  events.addEventListener('delivery', (event) => {
    const delivery = JSON.parse(event.data);
    if (document.getElementById(delivery.id)) return;
    rows.insertAdjacentHTML('afterbegin', delivery.row);
    while (rows.rows.length > limit) rows.deleteRow(-1);
    total += 1;
    show();
  });
  events.addEventListener('reset', (event) => {
    rows.replaceChildren();
    total = Number(JSON.parse(event.data).before) || 0;
    show();
  });
})();
`;

/** The message view: turns the HTML, text, headers and raw sections into tabs (all sections show without script). */
export const TABS_SCRIPT = `
(() => {
  const tabs = [...document.querySelectorAll('.tabs [role=tab]')];
  const select = (tab) => {
    for (const other of tabs) {
      const on = other === tab;
      other.setAttribute('aria-selected', String(on));
      other.tabIndex = on ? 0 : -1;
      document.getElementById(other.getAttribute('aria-controls')).hidden = !on;
    }
  };
  for (const tab of tabs) {
    tab.addEventListener('click', () => {
      select(tab);
      history.replaceState(null, '', '#' + tab.dataset.tab);
    });
  }
  select(tabs.find((tab) => '#' + tab.dataset.tab === location.hash) ?? tabs[0]);
})();
`;

/** The groups page: refreshes its content every two seconds while it is open. */
export const GROUPS_SCRIPT = `
(() => {
  const main = document.querySelector('main');
  setInterval(async () => {
    try {
      const response = await fetch(location.pathname, { cache: 'no-store' });
      if (!response.ok) return;
      const next = new DOMParser().parseFromString(await response.text(), 'text/html').querySelector('main');
      if (next && next.innerHTML !== main.innerHTML) main.innerHTML = next.innerHTML;
    } catch {
      // The emulator stopped or restarted: try again at the next tick.
    }
  }, 2000);
})();
`;

/** The inbox pages' stylesheet, inlined in every page (no external fonts or files). */
export const INBOX_CSS = `
:root{color-scheme:light dark;--bg:#f5f6f8;--fg:#1c2230;--muted:#667085;--card:#fff;--line:#e3e6ec;--hover:#f0f4ff;
--accent:#2459d6;--badge:#eef2ff;--badge-fg:#3538a8;--soft:#f7f8fa;--ok:#16a34a;--warn:#d97706}
@media (prefers-color-scheme:dark){:root{--bg:#0f1217;--fg:#e5e7eb;--muted:#9aa3b2;--card:#171b22;--line:#2a303b;
--hover:#1d2433;--accent:#7aa7ff;--badge:#232a4a;--badge-fg:#c7d2fe;--soft:#12161c}}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
background:var(--bg);color:var(--fg)}
a{color:var(--accent)}
.bar{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem 1.75rem;padding:.7rem 1.5rem;background:var(--card);
border-bottom:1px solid var(--line)}
.brand{font-weight:650;letter-spacing:-.01em}
.brand span{color:var(--muted);font-weight:400}
.bar nav{display:flex;gap:1.25rem}
.bar nav a{color:var(--muted);text-decoration:none;padding:.2rem 0;border-bottom:2px solid transparent}
.bar nav a[aria-current=page]{color:var(--fg);border-bottom-color:var(--accent)}
main{max-width:76rem;margin:1.5rem auto 3rem;padding:0 1.5rem}
h1{font-size:1.35rem;line-height:1.3;margin:0;overflow-wrap:anywhere}
h2{font-size:1.05rem;margin:0}
.head{display:flex;flex-wrap:wrap;align-items:baseline;gap:.5rem 1rem;margin-bottom:1rem}
.muted{color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;overflow:hidden;margin-bottom:1.25rem}
.card>h2,.card>.card-head{padding:.8rem 1rem;border-bottom:1px solid var(--line)}
.card-head{display:flex;flex-wrap:wrap;align-items:baseline;gap:.25rem 1rem}
table{width:100%;border-collapse:collapse}
th,td{text-align:left;padding:.6rem 1rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:.75rem;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);font-weight:600;background:var(--soft)}
tbody tr:last-child td{border-bottom:0}
.messages tbody tr{position:relative}
.messages tbody tr:hover{background:var(--hover)}
.messages .subject a{color:inherit;font-weight:600;text-decoration:none;overflow-wrap:anywhere}
.messages .subject a::after{content:"";position:absolute;inset:0}
.messages td.addr{overflow-wrap:anywhere}
.messages tr.new{animation:arrive 2s ease-out}
@keyframes arrive{from{background:#fff4c2}}
.empty{padding:2.5rem 1rem;text-align:center;color:var(--muted)}
.badge{display:inline-block;font-size:.72rem;font-weight:600;line-height:1.6;padding:0 .55rem;border-radius:999px;
background:var(--badge);color:var(--badge-fg);margin-left:.35rem;white-space:nowrap;vertical-align:1px}
time{white-space:nowrap;color:var(--muted);font-variant-numeric:tabular-nums}
.live{font-size:.8rem;color:var(--muted);display:inline-flex;align-items:center;gap:.35rem}
.live::before{content:"";width:.55rem;height:.55rem;border-radius:50%;background:var(--muted)}
.live.on::before{background:var(--ok)}
.live.off::before{background:var(--warn)}
code,pre{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace}
pre{margin:0;padding:1rem;white-space:pre-wrap;overflow-wrap:anywhere}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.35rem 1.25rem;margin:0;padding:1rem}
dl.meta dt{color:var(--muted)}
dl.meta dd{margin:0;overflow-wrap:anywhere}
ul.files{list-style:none;margin:0;padding:.4rem 0}
ul.files li{padding:.35rem 1rem}
.tabs{display:flex;gap:.25rem;padding:.5rem .75rem 0;border-bottom:1px solid var(--line);background:var(--soft)}
.tabs button{font:inherit;color:var(--muted);background:none;border:0;border-bottom:2px solid transparent;
padding:.45rem .8rem;cursor:pointer}
.tabs button[aria-selected=true]{color:var(--fg);border-bottom-color:var(--accent)}
.no-js .tabs{display:none}
.panel>h2{padding:.8rem 1rem 0}
.js .panel>h2{display:none}
iframe{display:block;width:100%;height:70vh;min-height:20rem;border:0;background:#fff;resize:vertical}
.headers td:first-child{white-space:nowrap;color:var(--muted);width:1%}
.headers td{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
.members{table-layout:fixed}
.members th:nth-child(1){width:30%}.members th:nth-child(2){width:20%}.members th:nth-child(4){width:15.5rem}
.members td{overflow-wrap:anywhere}
.note{padding:.6rem 1rem;border-top:1px solid var(--line);font-size:.9rem}
.subs code{display:inline-block;margin:0 .5rem .2rem 0;padding:0 .35rem;border-radius:4px;background:var(--soft);
border:1px solid var(--line)}
@media (max-width:700px){.messages .from,.messages thead{display:none}.messages td{display:block;border:0;padding:.15rem 1rem}
.messages tr{display:block;padding:.5rem 0;border-bottom:1px solid var(--line)}}
`;
