import type { IncomingMessage } from 'node:http';
import { readBody } from '../http/read-body.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { html, type SafeHtml } from './html.js';
import type { PageAnswer } from './page-answer.js';

/** Path prefix of the hosted unsubscribe form. */
export const UNSUBSCRIBE_PREFIX = '/unsubscribe/';

const TOKEN = /^\/unsubscribe\/([A-Za-z0-9_-]{1,128})$/;

/**
 * `GET`/`POST /unsubscribe/{token}`: the hosted unsubscribe form. GET and
 * HEAD only show it (link scanners must unsubscribe no one); POST, from the
 * form's button or a mail client's one-click request (RFC 8058), removes the
 * member.
 */
export async function unsubscribePage(state: EmulatorState, req: IncomingMessage, path: string): Promise<PageAnswer> {
  const method = (req.method ?? 'GET').toUpperCase();
  if (method === 'POST') await readBody(req, 16 * 1024).catch(() => undefined);
  if (method !== 'GET' && method !== 'HEAD' && method !== 'POST')
    return page(405, 'Method not allowed', html`<p>Use the link from the email.</p>`, { allow: 'GET, POST' });
  const token = TOKEN.exec(path)?.[1];
  const ticket = token === undefined ? undefined : state.groups.ticket(token);
  if (!token || !ticket) {
    return page(
      404,
      'Link not valid',
      html`<p>This unsubscribe link is not valid, or it was already used.</p><p>If you still receive these emails, use the link in the most recent one.</p>`,
    );
  }
  if (!state.groups.has(ticket.groupId) || !state.groups.isMember(ticket.groupId, ticket.email)) {
    // Removed another way since the email was sent (API call, failed delivery, another link).
    state.groups.redeem(token);
    return page(
      200,
      'Already unsubscribed',
      html`<p id="done"><strong>${ticket.email}</strong> is no longer on the list <strong>${ticket.groupId}</strong>.</p>`,
    );
  }
  if (method !== 'POST') {
    return page(
      200,
      'Unsubscribe',
      html`<p>Stop sending emails of the list <strong>${ticket.groupId}</strong> to <strong>${ticket.email}</strong>?</p>
<form method="post"><button type="submit" id="confirm">Confirm unsubscribe</button></form>`,
    );
  }
  state.groups.redeem(token);
  return page(
    200,
    'Unsubscribed',
    html`<p id="done"><strong>${ticket.email}</strong> has been removed from <strong>${ticket.groupId}</strong>.</p>`,
  );
}

function page(status: number, title: string, content: SafeHtml, headers: Record<string, string> = {}): PageAnswer {
  return {
    status,
    contentType: 'text/html; charset=utf-8',
    body: html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}button{font-size:1rem;padding:.6rem 1.2rem;border:0;border-radius:6px;background:#1f6feb;color:#fff;cursor:pointer}</style>
</head><body><h1>${title}</h1>
${content}
</body></html>
`,
    headers: {
      'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
      ...headers,
    },
  };
}
