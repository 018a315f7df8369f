import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import type { EmulatorState, MailChange } from '../state/emulator-state.js';
import type { SiteSection } from '../http/api-router.js';
import { sendPage, type PageAnswer } from '../pages/public-pages.js';
import {
  groupsPage,
  notFoundPage,
  attachmentAnswer,
  htmlAnswer,
  rawAnswer,
  messageListPage,
  messagePage,
  LIST_LIMIT,
  deliverySummary,
  INBOX_HEADERS,
} from './inbox-pages.js';

const MESSAGE = /^\/inbox\/messages\/(dlv_[A-Za-z0-9-]{1,100})(?:\/(raw|html|attachments\/(0|[1-9]\d{0,4})))?$/;

/**
 * The web inbox as a site section: GET and HEAD of `/` and of paths under
 * `/inbox/` (other methods go on to the API, which answers them as before),
 * the live event feed included. It reads the stores and follows the mail
 * store's changes; nothing else depends on it. It answers only requests for
 * loopback names or the allowed hosts (see host-check.ts).
 */
export function inboxSection(state: EmulatorState, allowedHosts: readonly string[]): SiteSection {
  const events = new InboxEventFeed(state);
  const allowed = new Set(allowedHosts);
  return {
    owns: (method, path) => (method === 'GET' || method === 'HEAD') && (path === '/' || path.startsWith('/inbox/')),
    async serve(req, res, path, query) {
      if (!isAllowedHost(req.headers.host, allowed)) {
        sendPage(res, req.method, refusedHost(req.headers.host));
        return;
      }
      if (path === INBOX_EVENTS_PATH) {
        events.serve(req, res, query);
        return;
      }
      sendPage(res, req.method, await answerInbox(state, req, path));
    },
    close: () => events.close(),
  };
}

/**
 * Answers a page or file of the web inbox (the event stream excepted, see
 * event-feed.ts): the message list, a message with its raw source, HTML
 * body and attachments, and the groups. Unknown paths get an HTML 404.
 */
async function answerInbox(state: EmulatorState, req: IncomingMessage, path: string): Promise<PageAnswer> {
  if (path === '/') return messageListPage(state);
  if (path === '/inbox/groups') return groupsPage(state);
  const match = MESSAGE.exec(path);
  if (!match) return notFoundPage('Page', `There is no inbox page at ${path.slice(0, 200)}.`);
  const [, id, part, index] = match as unknown as [string, string, string | undefined, string | undefined];
  const copy = state.mail.delivery(id);
  if (!copy) {
    return notFoundPage('Message', 'No delivered message has this id; the emulator may have been reset or restarted.');
  }
  if (part === undefined) return messagePage(state, copy);
  if (part === 'raw') return rawAnswer(copy);
  if (part === 'html') {
    return (await htmlAnswer(state, req, copy)) ?? notFoundPage('HTML body', 'This message has no HTML body.');
  }
  return (
    (await attachmentAnswer(copy, Number(index))) ??
    notFoundPage('Attachment', 'This message has no attachment with that number.')
  );
}

/** The answer to a request for a host the inbox does not answer. */
function refusedHost(host: string | undefined): PageAnswer {
  return {
    status: 403,
    contentType: 'text/plain; charset=utf-8',
    body: `This web inbox shows every captured message, so it answers only requests for localhost or a loopback address (this one was for ${JSON.stringify((host ?? '').slice(0, 100))}). To open it under another name, start the emulator with allowedHosts (eml-api serve --allow-host NAME).\n`,
    headers: { 'cache-control': 'no-store' },
  };
}

/**
 * Whether a request's `Host` is one the web inbox answers: `localhost` (and
 * `*.localhost`, which browsers resolve to loopback themselves), a loopback
 * address, or a name the user allowed. Anything else (a DNS-rebinding page's
 * own name, a missing Host) is refused.
 *
 * @param allowed lower-cased host names allowed besides the loopback ones
 */
export function isAllowedHost(hostHeader: string | undefined, allowed: ReadonlySet<string>): boolean {
  const host = hostName(hostHeader);
  if (host === undefined) return false;
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (host === '::1' || host === '[::1]') return true;
  return allowed.has(host);
}

/** The host name of a Host header, lower-cased, without port or trailing dot. */
function hostName(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const value = header.trim().toLowerCase();
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    return end === -1 ? undefined : value.slice(0, end + 1);
  }
  const colon = value.lastIndexOf(':');
  const name = colon !== -1 && /^\d+$/.test(value.slice(colon + 1)) ? value.slice(0, colon) : value;
  return name.replace(/\.$/, '') || undefined;
}

/** Path of the inbox's Server-Sent Events stream. */
export const INBOX_EVENTS_PATH = '/inbox/events';

/** A comment line this often keeps idle proxies from dropping the stream. */
const HEARTBEAT_MS = 15_000;

/** Event streams open at once; more are refused with 503 (each browser tab holds one). */
export const MAX_EVENT_STREAMS = 50;

/**
 * `GET /inbox/events?since=<cursor>`: Server-Sent Events for the inbox page.
 * Each delivery is an event `delivery` (data: a {@link DeliverySummary}, id:
 * its cursor); `emu.reset()` is an event `reset` (data: `{ before }`, the
 * deliveries not replayed after it). A client gets what it missed
 * after `since` (or the `Last-Event-ID` of a reconnecting EventSource) first.
 *
 * Memory stays bounded whatever clients do: each stream keeps only a cursor
 * and is written to while its socket drains (a client that stops reading
 * gets nothing more until it reads again); a client more than the list's
 * 500 rows behind gets a reset and the newest 500, as the page shows no more;
 * and at most 50 streams are open. Open streams are ended when the emulator closes.
 */
export class InboxEventFeed {
  /** Each open stream and the function that ends it. */
  readonly #open = new Map<ServerResponse, () => void>();
  readonly #state: EmulatorState;
  #closed = false;

  constructor(state: EmulatorState) {
    this.#state = state;
  }

  serve(req: IncomingMessage, res: ServerResponse, query: string): void {
    if (res.destroyed) return;
    if (this.#closed || this.#open.size >= MAX_EVENT_STREAMS) {
      const text = this.#closed
        ? 'The emulator is closing\n'
        : `Too many open event streams (${MAX_EVENT_STREAMS}); close some inbox tabs\n`;
      res.writeHead(503, { ...INBOX_HEADERS, 'content-type': 'text/plain; charset=utf-8', 'retry-after': '5' });
      res.end(text);
      return;
    }
    res.writeHead(200, {
      ...INBOX_HEADERS,
      'content-type': 'text/event-stream; charset=utf-8',
      'x-accel-buffering': 'no',
    });
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const state = this.#state;
    let cursor = Math.max(
      cursorValue(new URLSearchParams(query).get('since')),
      cursorValue(headerValue(req.headers['last-event-id'])),
    );
    let draining = false;
    const live = () => !res.writableEnded && !res.destroyed;
    // A reset says how many deliveries precede the ones that follow it (0 after emu.reset(), more for a
    // client rebuilt from the newest rows), so the page's count stays right.
    const format = (change: MailChange, before: number) =>
      change.kind === 'reset'
        ? `id: ${change.seq}\nevent: reset\ndata: {"before":${before}}\n\n`
        : `id: ${change.seq}\nevent: delivery\ndata: ${JSON.stringify(deliverySummary(state, change.seq, change.copy))}\n\n`;
    // Writes what the client has not had yet, until the socket asks to wait.
    const pump = () => {
      if (draining || !live()) return;
      const changes = state.mail.changesSince(cursor, LIST_LIMIT);
      const before = state.mail.deliveryCount() - changes.filter((c) => c.kind === 'delivery').length;
      for (const change of changes) {
        cursor = change.seq;
        if (!res.write(format(change, before))) {
          draining = true;
          res.once('drain', () => {
            draining = false;
            pump();
          });
          return;
        }
      }
    };
    // Reconnect quickly after the emulator restarts; the page shows "Reconnecting…" meanwhile.
    res.write('retry: 1000\n\n');
    pump();
    const unsubscribe = state.mail.subscribe(pump);
    const heartbeat = setInterval(() => {
      if (!draining && live()) res.write(': ping\n\n');
    }, HEARTBEAT_MS).unref();
    const stop = () => {
      unsubscribe();
      clearInterval(heartbeat);
      this.#open.delete(res);
      if (live()) res.end();
    };
    this.#open.set(res, stop);
    res.on('close', stop);
  }

  /** Ends every open stream and refuses new ones (503): the emulator is closing. */
  close(): void {
    this.#closed = true;
    for (const stop of [...this.#open.values()]) stop();
  }
}

/** A non-negative integer cursor, or 0. */
function cursorValue(value: string | null | undefined): number {
  return value && /^\d{1,15}$/.test(value) ? Number(value) : 0;
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
