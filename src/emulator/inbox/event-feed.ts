import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EmulatorState } from '../state/emulator-state.js';
import type { MailChange } from '../state/mail-store.js';
import { LIST_LIMIT } from './message-list-page.js';
import { deliverySummary } from './message-row.js';
import { INBOX_HEADERS } from './page-layout.js';

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
