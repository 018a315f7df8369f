import type { IncomingMessage } from 'node:http';
import type { EmulatorState } from '../state/emulator-state.js';
import { IMAGE_CONTENT_TYPES } from '../state/image-store.js';
import { answerInbox, isInboxRequest } from '../inbox/inbox-routes.js';
import { readBody } from '../http/read-body.js';
import { escapeHtml } from '../operations/render-placeholders.js';

/** An answer of a public (unauthenticated) route: any content type. */
export interface PageAnswer {
  status: number;
  contentType: string;
  body: string | Buffer;
  headers?: Record<string, string>;
}

const TOKEN = /^\/unsubscribe\/([A-Za-z0-9_-]{1,128})$/;
const IMAGE = /^\/images\/([0-9a-f]{64})$/;

/**
 * Answers the routes people and mail clients reach without an API key: the
 * hosted unsubscribe form (RFC 8058 one-click included), hosted images and
 * the web inbox (GET and HEAD of `/` and `/inbox/…`).
 * @returns the answer, or undefined when the path is not a public route
 */
export async function handlePublicRoute(
  state: EmulatorState,
  req: IncomingMessage,
  path: string,
): Promise<PageAnswer | undefined> {
  const method = (req.method ?? 'GET').toUpperCase();
  if (path.startsWith('/unsubscribe/')) {
    const match = TOKEN.exec(path);
    if (method === 'POST') await readBody(req, 16 * 1024).catch(() => undefined);
    if (method !== 'GET' && method !== 'POST')
      return page(405, 'Method not allowed', '<p>Use the link from the email.</p>', { allow: 'GET, POST' });
    const token = match?.[1];
    const ticket = token === undefined ? undefined : state.groups.ticket(token);
    if (!token || !ticket) {
      return page(
        404,
        'Link not valid',
        '<p>This unsubscribe link is not valid, or it was already used.</p><p>If you still receive these emails, use the link in the most recent one.</p>',
      );
    }
    if (!state.groups.has(ticket.groupId) || !state.groups.isMember(ticket.groupId, ticket.email)) {
      // Removed another way since the email was sent (API call, failed delivery, another link).
      state.groups.redeem(token);
      return page(
        200,
        'Already unsubscribed',
        `<p id="done"><strong>${escapeHtml(ticket.email)}</strong> is no longer on the list <strong>${escapeHtml(ticket.groupId)}</strong>.</p>`,
      );
    }
    if (method !== 'POST') {
      // GET and HEAD only show the form: link scanners must not unsubscribe anyone.
      return page(
        200,
        'Unsubscribe',
        `<p>Stop sending emails of the list <strong>${escapeHtml(ticket.groupId)}</strong> to <strong>${escapeHtml(ticket.email)}</strong>?</p>
<form method="post"><button type="submit" id="confirm">Confirm unsubscribe</button></form>`,
      );
    }
    // POST: the form's confirm button, or a mail client's one-click request (RFC 8058).
    state.groups.redeem(token);
    return page(
      200,
      'Unsubscribed',
      `<p id="done"><strong>${escapeHtml(ticket.email)}</strong> has been removed from <strong>${escapeHtml(ticket.groupId)}</strong>.</p>`,
    );
  }
  if (path.startsWith('/images/')) {
    const match = IMAGE.exec(path);
    if (method !== 'GET' && method !== 'HEAD') {
      return {
        status: 405,
        contentType: 'text/plain; charset=utf-8',
        body: 'Method not allowed\n',
        headers: { allow: 'GET, HEAD' },
      };
    }
    const image = match ? state.images.get(match[1]!, state.now()) : undefined;
    if (!image) return { status: 404, contentType: 'text/plain; charset=utf-8', body: 'Image not found or expired\n' };
    return {
      status: 200,
      contentType: IMAGE_CONTENT_TYPES[image.mimeType],
      body: method === 'HEAD' ? Buffer.alloc(0) : image.data,
      headers: {
        'cache-control': 'public, max-age=86400',
        etag: `"${image.sha256}"`,
        ...(method === 'HEAD' ? { 'content-length': String(image.data.length) } : {}),
      },
    };
  }
  if (isInboxRequest(method, path)) return answerInbox(state, req, path);
  return undefined;
}

function page(status: number, title: string, content: string, headers: Record<string, string> = {}): PageAnswer {
  const body = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}button{font-size:1rem;padding:.6rem 1.2rem;border:0;border-radius:6px;background:#1f6feb;color:#fff;cursor:pointer}</style>
</head><body><h1>${escapeHtml(title)}</h1>
${content}
</body></html>
`;
  return {
    status,
    contentType: 'text/html; charset=utf-8',
    body,
    headers: {
      'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
      ...headers,
    },
  };
}
