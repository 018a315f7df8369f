import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerApi } from './api-router.js';
import type { ServerContext } from './server-context.js';
import type { SiteSection } from './site-section.js';

/**
 * The emulator's request handler: a request a site section owns (public
 * pages, the web inbox) goes to it; everything else is the JSON API.
 */
export function createRequestHandler(
  server: ServerContext,
  sections: readonly SiteSection[],
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const target = req.url ?? '/';
    const queryAt = target.indexOf('?');
    const path = queryAt === -1 ? target : target.slice(0, queryAt);
    const query = queryAt === -1 ? '' : target.slice(queryAt + 1);
    const method = (req.method ?? 'GET').toUpperCase();
    const section = sections.find((s) => s.owns(method, path));
    if (!section) return answerApi(server, req, res);
    try {
      await section.serve(req, res, path, query);
    } catch (err) {
      server.onInternalError(err);
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'content-length': '15' });
        res.end('Internal error\n');
      }
    }
  };
}
