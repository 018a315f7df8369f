import type { IncomingMessage } from 'node:http';
import type { EmulatorState } from '../state/emulator-state.js';
import { IMAGE_CONTENT_TYPES } from '../state/image-store.js';
import type { PageAnswer } from './page-answer.js';

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
