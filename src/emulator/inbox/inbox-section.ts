import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EmulatorState } from '../state/emulator-state.js';
import type { MailChange } from '../state/mail-store.js';
import type { SiteSection } from '../http/api-router.js';
import { sendPage, type PageAnswer } from '../pages/public-pages.js';
import {
  groupsPage,
  notFoundPage,
  messageListPage,
  LIST_LIMIT,
  deliverySummary,
  INBOX_HEADERS,
  listView,
  messagePath,
} from './inbox-pages.js';
import { attachmentAnswer, htmlAnswer, messagePage, rawAnswer } from './message-page.js';
import type { WebAccess } from './web-access.js';
import { parseSearch } from '../state/mail-search.js';

const MESSAGE = /^\/inbox\/messages\/(dlv_[A-Za-z0-9-]{1,100})(?:\/(raw|html|attachments\/(0|[1-9]\d{0,4})))?$/;

/**
 * The web inbox as a site section: GET and HEAD of `/` and of paths under `/inbox/` (other methods go on to the API,
 * which answers them as before), the live event feed included. It reads the stores and follows the mail store's
 * changes; its buttons act through the inspection API. It answers only who may read the mail ({@link WebAccess}).
 */
export function inboxSection(state: EmulatorState, access: WebAccess): SiteSection {
  const events = new InboxEventFeed(state);
  return {
    owns: (method, path) => (method === 'GET' || method === 'HEAD') && (path === '/' || path.startsWith('/inbox/')),
    async serve(req, res, path, query) {
      const refusal = access.refusal(req);
      if (refusal) {
        sendPage(res, req.method, refusal);
        return;
      }
      if (path === INBOX_EVENTS_PATH) {
        events.serve(req, res, query);
        return;
      }
      sendPage(res, req.method, await answerInbox(state, req, path, new URLSearchParams(query)));
    },
    close: () => events.close(),
  };
}

/** Path of the list's rows as JSON, for the page's script. */
export const INBOX_LIST_PATH = '/inbox/list';

/**
 * Answers a page or file of the web inbox (the event stream excepted): the message list, a message with its raw source,
 * HTML body and attachments, the newest message, and the groups. Unknown paths get an HTML 404.
 */
async function answerInbox(
  state: EmulatorState,
  req: IncomingMessage,
  path: string,
  query: URLSearchParams,
): Promise<PageAnswer> {
  const search = (query.get('query') ?? '').slice(0, 4096);
  const start = /^\d{1,9}$/.test(query.get('start') ?? '') ? Number(query.get('start')) : 0;
  if (path === '/') return messageListPage(state, search, start);
  if (path === INBOX_LIST_PATH) {
    const view = listView(state, search, start);
    return {
      status: 200,
      contentType: 'application/json; charset=utf-8',
      body: JSON.stringify({ ...view, rows: view.rows.value, pager: view.pager.value }),
      headers: INBOX_HEADERS,
    };
  }
  if (path === '/inbox/groups') return groupsPage(state);
  if (path === '/inbox/messages/latest') {
    const latest = search ? state.mail.newestFirst().find(parseSearch(search)) : state.mail.latest();
    return {
      status: 302,
      contentType: 'text/plain; charset=utf-8',
      body: '',
      headers: { ...INBOX_HEADERS, location: latest ? messagePath(latest.id) : '/' },
    };
  }
  const match = MESSAGE.exec(path);
  if (!match) return notFoundPage('Page', `There is no inbox page at ${path.slice(0, 200)}.`);
  const [, id, part, index] = match as unknown as [string, string, string | undefined, string | undefined];
  const message = state.mail.messageOfCopy(id);
  const copy = message?.copies.find((c) => c.id === id);
  if (!message || !copy) {
    return notFoundPage(
      'Message',
      'No message has this id; it may have been deleted, or the emulator reset or restarted.',
    );
  }
  if (part === undefined) {
    if (req.method !== 'HEAD') state.mail.markRead([message], true);
    return messagePage(message, copy);
  }
  if (part === 'raw') return rawAnswer(copy);
  if (part === 'html') {
    return (await htmlAnswer(state, req, copy)) ?? notFoundPage('HTML body', 'This message has no HTML body.');
  }
  return (
    (await attachmentAnswer(copy, Number(index))) ??
    notFoundPage('Attachment', 'This message has no attachment with that number.')
  );
}

/** Path of the inbox's Server-Sent Events stream. */
export const INBOX_EVENTS_PATH = '/inbox/events';

/** A comment line this often keeps idle proxies from dropping the stream. */
const HEARTBEAT_MS = 15_000;

/** Event streams open at once; more are refused with 503 (each browser tab holds one). */
export const MAX_EVENT_STREAMS = 50;

/**
 * `GET /inbox/events?since=<cursor>`: Server-Sent Events for the inbox page. Each message's arrival is an event
 * `delivery` (data: a {@link DeliverySummary}, id: its cursor); deletes and read marks are events `delete` and `update`
 * (data: `{ ids }`); a clear, `emu.reset()` or a large edit is an event `reset` (data: `{ before }`, the messages not
 * replayed after it). A client gets what it missed after `since` (or the `Last-Event-ID` of a reconnecting EventSource)
 * first.
 *
 * Memory stays bounded whatever clients do: each stream keeps only a cursor and is written to while its socket drains
 * (a client that stops reading gets nothing more until it reads again); a client more than the list's 500 rows behind
 * gets a reset and the newest 500, as the page shows no more; and at most 50 streams are open. Open streams are ended
 * when the emulator closes.
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
    const params = new URLSearchParams(query);
    let cursor = Math.max(cursorValue(params.get('since')), cursorValue(headerValue(req.headers['last-event-id'])));
    // A page from another run of the emulator (restarted) starts over.
    const run = params.get('run');
    if (run !== null && run !== state.runId) cursor = Number.MAX_SAFE_INTEGER;
    let draining = false;
    const live = () => !res.writableEnded && !res.destroyed;
    // A reset says how many messages precede the ones that follow it (0 after emu.reset(), more for a
    // client rebuilt from the newest rows), so the page's count stays right.
    const format = (change: MailChange, before: number) => {
      switch (change.kind) {
        case 'reset':
          return `id: ${change.seq}\nevent: reset\ndata: {"before":${before}}\n\n`;
        case 'delivery':
          return `id: ${change.seq}\nevent: delivery\ndata: ${JSON.stringify(deliverySummary(change.seq, change.message))}\n\n`;
        default:
          return `id: ${change.seq}\nevent: ${change.kind}\ndata: ${JSON.stringify({ ids: change.ids })}\n\n`;
      }
    };
    // Writes what the client has not had yet, until the socket asks to wait. A batch (at most a reset
    // and the newest rows) is taken at once and written across drains; the cursor then covers it.
    let pending: string[] = [];
    const pump = () => {
      while (!draining && live()) {
        if (pending.length === 0) {
          const changes = state.mail.changesSince(cursor, LIST_LIMIT);
          if (changes.length === 0) return;
          const before = state.mail.count() - changes.filter((c) => c.kind === 'delivery').length;
          pending = changes.map((change) => format(change, before));
          cursor = changes[0]!.kind === 'reset' ? state.mail.cursor() : changes[changes.length - 1]!.seq;
        }
        while (pending.length > 0) {
          if (!res.write(pending.shift()!)) {
            draining = true;
            res.once('drain', () => {
              draining = false;
              pump();
            });
            return;
          }
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
