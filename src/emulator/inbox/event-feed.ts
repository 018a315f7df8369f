import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EmulatorState } from '../state/emulator-state.js';
import type { MailChange } from '../state/mail-store.js';
import { INBOX_HEADERS } from './page-layout.js';
import { deliverySummary } from './message-row.js';

/** Path of the inbox's Server-Sent Events stream. */
export const INBOX_EVENTS_PATH = '/inbox/events';

/** A comment line this often keeps idle proxies from dropping the stream. */
const HEARTBEAT_MS = 15_000;

/**
 * `GET /inbox/events?since=<cursor>`: Server-Sent Events for the inbox page.
 * Each delivery is an event `delivery` (data: a {@link DeliverySummary}, id:
 * its cursor); `emu.reset()` is an event `reset`. A client gets what it missed
 * after `since` (or the `Last-Event-ID` of a reconnecting EventSource) first.
 * Open streams are tracked so the emulator can end them when it closes.
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
    const state = this.#state;
    if (res.destroyed) return;
    const since = Math.max(
      cursorValue(new URLSearchParams(query).get('since')),
      cursorValue(headerValue(req.headers['last-event-id'])),
    );
    res.writeHead(this.#closed ? 503 : 200, {
      ...INBOX_HEADERS,
      'content-type': 'text/event-stream; charset=utf-8',
      'x-accel-buffering': 'no',
    });
    if (this.#closed || req.method === 'HEAD') {
      res.end();
      return;
    }
    // Never write after the end: that would be an 'error' event nobody listens to.
    const write = (text: string) => {
      if (!res.writableEnded && !res.destroyed) res.write(text);
    };
    const send = (change: MailChange) =>
      write(
        change.kind === 'reset'
          ? `id: ${change.seq}\nevent: reset\ndata: {}\n\n`
          : `id: ${change.seq}\nevent: delivery\ndata: ${JSON.stringify(deliverySummary(state, change.seq, change.copy))}\n\n`,
      );
    // Reconnect quickly after the emulator restarts; the page shows "Reconnecting…" meanwhile.
    write('retry: 1000\n\n');
    for (const change of state.mail.changesSince(since)) send(change);
    const unsubscribe = state.mail.subscribe(send);
    const heartbeat = setInterval(() => write(': ping\n\n'), HEARTBEAT_MS).unref();
    const stop = () => {
      unsubscribe();
      clearInterval(heartbeat);
      this.#open.delete(res);
      if (!res.writableEnded && !res.destroyed) res.end();
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
