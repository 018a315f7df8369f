import type { KnownKey } from '../state/api-key-store.js';
import { HttpError } from './http-error.js';
import type { ValidTextContent } from './validate-json-send.js';

/**
 * Embedded (hosted) images need the plus plan.
 * @throws {HttpError} 403 `plan_required`
 */
export function requirePlusForImages(key: KnownKey, content: ValidTextContent): void {
  if (content.images.length > 0 && key.plan !== 'plus') {
    throw new HttpError(403, 'plan_required', 'textContent.images needs the plus plan; this key is on the free plan');
  }
}
