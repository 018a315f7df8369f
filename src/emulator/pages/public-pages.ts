import type { IncomingMessage, ServerResponse } from 'node:http';
import { type SiteSection, readBody } from '../http/api-router.js';
import { type EmulatorState, IMAGE_CONTENT_TYPES } from '../state/emulator-state.js';
import { escapeHtml } from '../../shared/escape-html.js';

/**
 * The pages people and mail clients reach without an API key, from any host, as on the real service: the hosted
 * unsubscribe form (any method, so wrong ones get their 405 here) and hosted images.
 */
export function publicPages(state: EmulatorState): SiteSection {
  return {
    owns: (_method, path) => path.startsWith(UNSUBSCRIBE_PREFIX) || path.startsWith(IMAGES_PREFIX),
    async serve(req, res, path) {
      const answer = path.startsWith(IMAGES_PREFIX)
        ? hostedImageFile(state, req, path)
        : await unsubscribePage(state, req, path);
      sendPage(res, req.method, answer);
    },
  };
}

/** Path prefix of the hosted unsubscribe form. */
export const UNSUBSCRIBE_PREFIX = '/unsubscribe/';

const TOKEN = /^\/unsubscribe\/([A-Za-z0-9_-]{1,128})$/;

/**
 * `GET`/`POST /unsubscribe/{token}`: the hosted unsubscribe form. GET and HEAD only show it (link scanners must
 * unsubscribe no one); POST, from the form's button or a mail client's one-click request (RFC 8058), removes the
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

/** Path prefix of hosted images. */
export const IMAGES_PREFIX = '/images/';

const IMAGE = /^\/images\/([0-9a-f]{64})$/;

/** `GET /images/{sha256}`: an image hosted for JSON sends, until it expires. */
export function hostedImageFile(state: EmulatorState, req: IncomingMessage, path: string): PageAnswer {
  const method = (req.method ?? 'GET').toUpperCase();
  if (method !== 'GET' && method !== 'HEAD') {
    return {
      status: 405,
      contentType: 'text/plain; charset=utf-8',
      body: 'Method not allowed\n',
      headers: { allow: 'GET, HEAD' },
    };
  }
  const match = IMAGE.exec(path);
  const image = match ? state.images.get(match[1]!, state.now()) : undefined;
  if (!image) return { status: 404, contentType: 'text/plain; charset=utf-8', body: 'Image not found or expired\n' };
  return {
    status: 200,
    contentType: IMAGE_CONTENT_TYPES[image.mimeType],
    body: image.data,
    headers: { 'cache-control': 'public, max-age=86400', etag: `"${image.sha256}"` },
  };
}

/** An answer of a web page or file of the emulator (not the JSON API): any content type. */
export interface PageAnswer {
  status: number;
  contentType: string;
  body: string | Buffer | SafeHtml;
  headers?: Record<string, string>;
}

/** Writes a page answer; a HEAD request gets the headers only. */
export function sendPage(res: ServerResponse, method: string | undefined, answer: PageAnswer): void {
  if (res.headersSent || res.destroyed) return;
  const body = typeof answer.body === 'string' || Buffer.isBuffer(answer.body) ? answer.body : answer.body.value;
  res.writeHead(answer.status, {
    'content-type': answer.contentType,
    'content-length': Buffer.byteLength(body),
    ...answer.headers,
  });
  res.end(method === 'HEAD' ? undefined : body);
}

/** HTML that is safe to insert as it is: built by {@link html} or marked by {@link raw}. */
export class SafeHtml {
  constructor(readonly value: string) {}

  toString(): string {
    return this.value;
  }
}

/**
 * A template tag for the emulator's pages that escapes every value by default: strings, numbers and dates become text,
 * arrays are joined, `undefined`, `null` and `false` vanish, and only {@link SafeHtml} (nested `html` templates, {@link
 * raw}) goes in as markup.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let out = strings[0] ?? '';
  for (let i = 0; i < values.length; i++) out += render(values[i]) + (strings[i + 1] ?? '');
  return new SafeHtml(out);
}

/** Marks trusted markup (the page's own constants) to go into {@link html} unescaped. */
export function raw(markup: string): SafeHtml {
  return new SafeHtml(markup);
}

function render(value: unknown): string {
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === undefined || value === null || value === false) return '';
  return escapeHtml(String(value));
}
