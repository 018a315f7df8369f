import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * A part of the emulator's web site beside the JSON API (the public pages,
 * the web inbox). The request handler asks each section in turn whether it
 * owns a request; sections write their own answers, so the handler knows
 * nothing of what they serve.
 */
export interface SiteSection {
  /** Whether this section answers a request for `path` with `method`. */
  owns(method: string, path: string): boolean;
  /** Answers a request it owns; a thrown error is answered with a plain 500. */
  serve(req: IncomingMessage, res: ServerResponse, path: string, query: string): Promise<void>;
  /** Ends what the section keeps open (event streams): the emulator is closing. */
  close?(): void;
}
