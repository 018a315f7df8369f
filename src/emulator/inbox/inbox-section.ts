import type { IncomingMessage } from 'node:http';
import type { EmulatorState } from '../state/emulator-state.js';
import type { SiteSection } from '../http/site-section.js';
import { sendPage, type PageAnswer } from '../pages/page-answer.js';
import { groupsPage } from './groups-page.js';
import { isAllowedHost } from './host-check.js';
import { INBOX_EVENTS_PATH, InboxEventFeed } from './event-feed.js';
import { notFoundPage } from './page-layout.js';
import { attachmentAnswer, htmlAnswer, rawAnswer } from './message-files.js';
import { messageListPage } from './message-list-page.js';
import { messagePage } from './message-page.js';

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
