import type { IncomingMessage } from 'node:http';
import { parsedDelivery } from './parsed-deliveries.js';
import type { DeliveredMessage } from '../state/records.js';
import type { EmulatorState } from '../state/emulator-state.js';
import type { PageAnswer } from '../pages/page-answer.js';
import { INBOX_HEADERS } from './page-layout.js';

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
