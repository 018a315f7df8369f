import type { ServerResponse } from 'node:http';
import type { SafeHtml } from './html.js';

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
