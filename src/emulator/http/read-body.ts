import type { IncomingMessage } from 'node:http';
import { HttpError } from '../operations/http-error.js';

/**
 * Reads a request body up to `limit` bytes. A declared or actual size over the
 * limit answers 413 without buffering the rest.
 */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    throw tooLarge(limit);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) throw tooLarge(limit);
      chunks.push(chunk);
    }
  } catch (err) {
    if (err instanceof HttpError) throw err;
    // The stream fails ('aborted', ECONNRESET) when the client goes away mid-body.
    throw new ClientGoneError(err);
  }
  return Buffer.concat(chunks, size);
}

/**
 * The client went away before its request was read: its own doing, never an
 * internal error of the emulator. There is nobody left to answer.
 */
export class ClientGoneError extends Error {
  override readonly name = 'ClientGoneError';
  constructor(cause: unknown) {
    super('the client disconnected before its request was read', { cause });
  }
}

function tooLarge(limit: number): HttpError {
  return new HttpError(413, 'payload_too_large', `The request body is larger than the limit of ${limit} bytes`);
}

/**
 * Parses a JSON body that must be an object.
 * @throws {HttpError} 400 `invalid_json` or `invalid_request`
 */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new HttpError(400, 'invalid_json', `The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new HttpError(400, 'invalid_request', 'The request body must be a JSON object');
  }
  return value as Record<string, unknown>;
}
