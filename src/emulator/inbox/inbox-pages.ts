import type { IncomingMessage } from 'node:http';
import { randomBytes } from 'node:crypto';
import { html, raw, type PageAnswer, type SafeHtml } from '../pages/public-pages.js';
import type { EmulatorState } from '../state/emulator-state.js';
import type { InboxAddress, InboxMessage } from '../state/mail-store.js';
import { parseSearch } from '../state/mail-search.js';

/** Rows a page of the message list shows, as Mailpit's pages. */
export const PAGE_SIZE = 50;

/** Most arrivals the live feed replays to a client; one further behind starts over. */
export const LIST_LIMIT = 500;

/** One page of the message list: its rows, its pager and the counts around it. */
export interface ListView {
  query: string;
  start: number;
  /** Messages in the inbox. */
  total: number;
  /** Unread messages in the inbox. */
  unread: number;
  /** Messages matching the search (all of them without one). */
  matching: number;
  rows: SafeHtml;
  pager: SafeHtml;
  /** The feed cursor this view is current at. */
  cursor: number;
}

/** The messages of one page of a search (or of the whole inbox), newest first, with exact counts. */
export function listView(state: EmulatorState, query: string, start: number): ListView {
  const total = state.mail.count();
  const searching = query.trim() !== '';
  const matching = searching ? state.mail.newestFirst().filter(parseSearch(query)) : undefined;
  const found = matching?.length ?? total;
  const first = Math.min(start, Math.max(0, found - 1));
  const page = matching ? matching.slice(first, first + PAGE_SIZE) : state.mail.page(first, PAGE_SIZE);
  const link = (to: number, label: string, id: string, rel: string) =>
    html`<a id="${id}" rel="${rel}" href="${listPath(query, to)}" data-start="${to}">${label}</a>`;
  const pager = html`<span id="range">${found === 0 ? 'No messages' : `${first + 1}\u2013${first + page.length} of ${found}`}</span>
${first > 0 ? link(Math.max(0, first - PAGE_SIZE), '\u2190 Newer', 'newer', 'prev') : ''}${first + PAGE_SIZE < found ? link(first + PAGE_SIZE, 'Older \u2192', 'older', 'next') : ''}`;
  return {
    query,
    start: first,
    total,
    unread: state.mail.unreadCount(),
    matching: found,
    rows: html`${page.map((m, i) => html`${i > 0 ? '\n' : ''}${messageRow(m)}`)}`,
    pager,
    cursor: state.mail.cursor(),
  };
}

/** The path of a list page: `/`, `/?query=...&start=50`. */
export function listPath(query: string, start: number): string {
  const params = new URLSearchParams();
  if (query) params.set('query', query);
  if (start > 0) params.set('start', String(start));
  const search = params.toString();
  return search ? `/?${search}` : '/';
}

/**
 * `GET /` (`?query=`, `?start=`): a page of the messages, newest first, with the search box; kept up to date over
 * /inbox/events.
 */
export function messageListPage(state: EmulatorState, query: string, start: number): PageAnswer {
  const view = listView(state, query, start);
  const main = html`<div class="head"><h1>Inbox</h1>
<span id="count" class="muted" data-total="${view.total}">${plural(view.total, 'message')}</span>
<span id="unread" class="muted">${view.unread} unread</span>
<span id="live" class="live" aria-live="polite">Connecting\u2026</span></div>
<form id="search" class="toolbar" role="search" method="get" action="/">
<input id="search-box" type="search" name="query" role="searchbox" aria-label="Search messages" placeholder="Search: words, from:, to:, subject:, is:unread, has:attachment, after:2025-01-31\u2026" value="${view.query}" autocomplete="off">
<button type="submit">Search</button>
<span class="js-only actions">
<button type="button" id="mark-read">Mark all read</button>
<button type="button" id="delete-results" class="danger"${view.query ? '' : raw(' hidden')}>Delete results</button>
<button type="button" id="delete-all" class="danger">Delete all</button>
</span>
</form>
<p id="matching" class="muted" aria-live="polite"${view.query ? '' : raw(' hidden')}>${plural(view.matching, 'result')}</p>
<div class="card">
<table id="messages" class="messages" data-cursor="${view.cursor}" data-limit="${LIST_LIMIT}" data-run="${state.runId}" data-query="${view.query}" data-start="${view.start}"${view.matching === 0 ? raw(' hidden') : ''}>
<thead><tr><th scope="col">To</th><th scope="col" class="from">From</th><th scope="col">Subject</th><th scope="col">Received</th><th scope="col" class="js-only"><span class="sr-only">Actions</span></th></tr></thead>
<tbody id="message-rows">
${view.rows}
</tbody></table>
<p id="empty" class="empty"${view.matching === 0 ? '' : raw(' hidden')}>${view.total === 0 ? html`No messages yet. Send one through the API at <code>${state.baseUrl}</code> and it shows up here.` : 'No message matches this search.'}</p>
</div>
<nav id="pager" class="pager" aria-label="Pages">${view.pager}</nav>`;
  return inboxPage({ title: 'Inbox', current: 'inbox', main, script: LIST_SCRIPT });
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

/** A message as the inbox feed reports it. */
export interface DeliverySummary {
  /** Change number of its arrival (the feed's cursor). */
  seq: number;
  id: string;
  /** The To addresses. */
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

/** Path of a message's view. */
export function messagePath(id: string): string {
  return `/inbox/messages/${encodeURIComponent(id)}`;
}

/** Attachments a person would call attachments: not the inline parts of an HTML body. */
export function countAttachments(copy: { attachments: readonly { disposition: string | undefined }[] }): number {
  return copy.attachments.filter((a) => a.disposition !== 'inline').length;
}

/** Addresses of a list, comma-separated, without names. */
export function addressList(addresses: readonly InboxAddress[]): string {
  return addresses.map((a) => a.address).join(', ');
}

/** One row of the message list; every value is escaped. */
export function messageRow(message: InboxMessage, fresh = false): SafeHtml {
  const copy = message.copies[0]!;
  const attachments = countAttachments(copy);
  const classes = [...(fresh ? ['new'] : []), ...(message.read ? [] : ['unread'])];
  const badges = html`${message.group === undefined ? '' : html`<span class="badge" title="Group send">group: ${message.group}</span>`}${attachments === 0 ? '' : html`<span class="badge">${plural(attachments, 'attachment')}</span>`}${message.tags.map((t) => html`<span class="badge tag">${t}</span>`)}`;
  return html`<tr id="${message.id}"${classes.length > 0 ? html` class="${classes.join(' ')}"` : ''}>
<td class="addr to">${addressList(message.to) || copy.to}</td>
<td class="addr from">${message.from?.address ?? copy.from}</td>
<td class="subject"><a href="${messagePath(message.id)}">${message.subject || '(no subject)'}</a>${badges}${message.snippet ? html`<span class="snippet">${message.snippet}</span>` : ''}</td>
<td class="time">${timeElement(message.created)}</td>
<td class="actions js-only"><button type="button" class="delete" data-id="${message.id}" aria-label="${`Delete \u201c${(message.subject || '(no subject)').slice(0, 80)}\u201d`}">Delete</button></td>
</tr>`;
}

/** The feed's record of one message. */
export function deliverySummary(seq: number, message: InboxMessage): DeliverySummary {
  const copy = message.copies[0]!;
  return {
    seq,
    id: message.id,
    to: addressList(message.to) || copy.to,
    from: message.from?.address ?? copy.from,
    subject: message.subject,
    deliveredAt: Number.isNaN(message.created.getTime()) ? '' : message.created.toISOString(),
    group: message.group ?? null,
    attachments: countAttachments(copy),
    url: messagePath(message.id),
    row: messageRow(message, true).value,
  };
}

/** The name an attachment is shown and saved under: its own, `calendar.ics` for a calendar, or `attachment-N`. */
export function attachmentName(
  attachment: { filename?: string | undefined; contentType?: string },
  index: number,
): string {
  // Control characters and path separators become "_": it names a file, nothing more.
  const name = [...(attachment.filename ?? '')]
    .map((c) => (c < ' ' || c === '\x7f' || c === '/' || c === '\\' ? '_' : c))
    .join('')
    .trim()
    .slice(0, 200);
  if (name) return name;
  return isCalendar(attachment.contentType) ? 'calendar.ics' : `attachment-${index + 1}`;
}

/** Whether a part is an iCalendar one. */
export function isCalendar(contentType: string | undefined): boolean {
  return /^(?:text\/calendar|application\/ics)$/i.test(contentType ?? '');
}

/** A part's media type as served: its own when well-formed, else `application/octet-stream`. */
export function servedType(contentType: string): string {
  return /^[\w.+-]+\/[\w.+-]+$/.test(contentType) ? contentType : 'application/octet-stream';
}

/** The CSP of answers a browser must never run anything from (raw sources, parts, attachments). */
export const INERT_CSP = "sandbox; default-src 'none'";

/**
 * An HTML body as the inbox and `/view/{ID}.html` serve it: its CSP sandboxes it even when opened on its own (no script
 * runs, it reaches no other page's data), lets it load only inline styles, data: images and the emulator's hosted
 * images, and lets its links and forms open new tabs.
 */
export function sandboxedHtml(state: EmulatorState, req: IncomingMessage, body: string): PageAnswer {
  const origins = new Set([state.baseUrl]);
  const host = req.headers.host;
  if (host && /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/.test(host)) origins.add(`http://${host}`);
  const self = [...origins].join(' ');
  const images = [...origins].map((origin) => `${origin}/images/ ${origin}/api/v1/message/`).join(' ');
  return htmlAnswer(200, body, [
    `sandbox ${FRAME_SANDBOX}`,
    "default-src 'none'",
    "style-src 'unsafe-inline'",
    'font-src data:',
    `img-src data: ${images}`,
    `form-action ${self} http: https:`,
  ]);
}

/** An HTML answer of the inbox under its Content-Security-Policy `csp`. */
function htmlAnswer(status: number, body: string | SafeHtml, csp: string[]): PageAnswer {
  return {
    status,
    contentType: 'text/html; charset=utf-8',
    body,
    headers: { ...INBOX_HEADERS, 'content-security-policy': csp.join('; ') },
  };
}

/**
 * The HTML frame's sandbox: no scripts and no same-origin access; links and forms open new tabs, outside the sandbox,
 * as in a mail client.
 */
export const FRAME_SANDBOX = 'allow-popups allow-popups-to-escape-sandbox allow-forms';

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
 * Wraps inbox content in the common page: top bar, inline stylesheet and a Content-Security-Policy that lets only this
 * page's own inline script run and only talk to the emulator.
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
  return htmlAnswer(page.status ?? 200, body, [
    "default-src 'none'",
    "style-src 'unsafe-inline'",
    'img-src data:',
    `script-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "frame-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ]);
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
 * A timestamp of the emulator's clock as the inbox shows it, in UTC: `2025-03-01 09:30:00 UTC`. Empty for an invalid
 * date.
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
 * Rows arrive as HTML the server escaped ({@link messageRow}).
 */

/**
 * The message list: the search box, paging, deletes and read marks through the inspection API, and a reload of the
 * page's rows whenever /inbox/events reports a change (an arrival, a delete, a reset, a restart).
 */
export const LIST_SCRIPT = `
(() => {
  const table = document.getElementById('messages');
  const rows = document.getElementById('message-rows');
  const empty = document.getElementById('empty');
  const count = document.getElementById('count');
  const unread = document.getElementById('unread');
  const matching = document.getElementById('matching');
  const live = document.getElementById('live');
  const pager = document.getElementById('pager');
  const box = document.getElementById('search-box');
  const deleteResults = document.getElementById('delete-results');
  const view = { query: table.dataset.query || '', start: Number(table.dataset.start) || 0 };
  const plural = (n, noun) => n + ' ' + noun + (n === 1 ? '' : 's');
  const show = (list) => {
    rows.innerHTML = list.rows;
    pager.innerHTML = list.pager;
    count.dataset.total = String(list.total);
    count.textContent = plural(list.total, 'message');
    unread.textContent = list.unread + ' unread';
    matching.hidden = !list.query;
    matching.textContent = plural(list.matching, 'result');
    deleteResults.hidden = !list.query;
    table.hidden = list.matching === 0;
    empty.hidden = list.matching !== 0;
    empty.textContent = list.total === 0 ? 'No messages yet.' : 'No message matches this search.';
    view.start = list.start;
  };
  const listUrl = (base) => {
    const params = new URLSearchParams();
    if (view.query) params.set('query', view.query);
    if (view.start > 0) params.set('start', String(view.start));
    const search = params.toString();
    return base + (search ? '?' + search : '');
  };
  let loading = false;
  let again = false;
  const refresh = async () => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    try {
      do {
        again = false;
        const response = await fetch(listUrl('/inbox/list'), { cache: 'no-store' });
        if (response.ok) show(await response.json());
      } while (again);
    } catch {
      // The emulator stopped: the feed reconnects and asks again.
    } finally {
      loading = false;
    }
  };
  let timer;
  const soon = (ms) => {
    clearTimeout(timer);
    timer = setTimeout(refresh, ms);
  };
  const api = async (method, path, body) => {
    const response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) alert('The emulator refused: ' + (await response.text()));
    await refresh();
  };
  box.addEventListener('input', () => {
    view.query = box.value.trim();
    view.start = 0;
    history.replaceState(null, '', listUrl('/'));
    soon(200);
  });
  document.getElementById('search').addEventListener('submit', (event) => {
    event.preventDefault();
    view.query = box.value.trim();
    view.start = 0;
    history.replaceState(null, '', listUrl('/'));
    refresh();
  });
  pager.addEventListener('click', (event) => {
    const link = event.target.closest('a[data-start]');
    if (!link) return;
    event.preventDefault();
    view.start = Number(link.dataset.start);
    history.pushState(null, '', listUrl('/'));
    refresh();
  });
  rows.addEventListener('click', (event) => {
    const button = event.target.closest('button.delete');
    if (button) api('DELETE', '/api/v1/messages', { IDs: [button.dataset.id] });
  });
  document.getElementById('mark-read').addEventListener('click', () =>
    api('PUT', '/api/v1/messages', view.query ? { Read: true, Search: view.query } : { Read: true }),
  );
  deleteResults.addEventListener('click', () => {
    if (view.query && confirm('Delete every message matching "' + view.query + '"?'))
      api('DELETE', '/api/v1/search?query=' + encodeURIComponent(view.query));
  });
  document.getElementById('delete-all').addEventListener('click', () => {
    if (confirm('Delete every message in the inbox?')) api('DELETE', '/api/v1/messages');
  });
  window.addEventListener('popstate', () => {
    const params = new URLSearchParams(location.search);
    view.query = params.get('query') || '';
    view.start = Number(params.get('start')) || 0;
    box.value = view.query;
    refresh();
  });
  const setLive = (on) => {
    live.className = on ? 'live on' : 'live off';
    live.textContent = on ? 'Live' : 'Reconnecting\\u2026';
  };
  const events = new EventSource(
    '/inbox/events?since=' + encodeURIComponent(table.dataset.cursor) + '&run=' + encodeURIComponent(table.dataset.run),
  );
  let lost = false;
  events.onopen = () => {
    setLive(true);
    if (lost) soon(0);
    lost = false;
  };
  events.onerror = () => {
    lost = true;
    setLive(false);
  };
  for (const kind of ['delivery', 'delete', 'update', 'reset']) events.addEventListener(kind, () => soon(50));
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
.no-js .js-only{display:none}
.sr-only{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
.toolbar{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin-bottom:1rem}
.toolbar input[type=search]{flex:1 1 22rem;font:inherit;padding:.45rem .7rem;border:1px solid var(--line);
border-radius:6px;background:var(--card);color:var(--fg)}
.actions{display:inline-flex;flex-wrap:wrap;gap:.5rem}
button{font:inherit;font-size:.9rem;padding:.4rem .8rem;border:1px solid var(--line);border-radius:6px;
background:var(--card);color:var(--fg);cursor:pointer}
button:hover{background:var(--hover)}
button.danger{color:#b42318}
button[hidden]{display:none}
.messages td.actions{width:1%;white-space:nowrap;position:relative;z-index:1}
.messages td.actions button{font-size:.8rem;padding:.15rem .5rem}
.messages tr.unread .subject a{font-weight:750}
.messages tr.unread td.to::before{content:"\u25cf ";color:var(--accent)}
.messages tr:not(.unread) .subject a{font-weight:500}
.snippet{display:block;color:var(--muted);font-size:.85rem;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;max-width:44rem}
.pager{display:flex;gap:1rem;align-items:baseline;color:var(--muted)}
.pager a{text-decoration:none}
.head .actions{margin-left:auto}
.event-summary{margin-right:.5rem}
@media (max-width:700px){.messages .from,.messages thead{display:none}.messages td{display:block;border:0;padding:.15rem 1rem}
.messages tr{display:block;padding:.5rem 0;border-bottom:1px solid var(--line)}}
`;
