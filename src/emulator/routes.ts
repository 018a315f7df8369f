import type { ApiScope } from '../api-types.js';
import { HttpError } from './http-error.js';
import type { Operation, Route } from './route.js';
import { sendEmlOperation } from './send-eml-operation.js';

/** An operation the emulator knows but does not implement yet: authenticated, then 501. */
function notImplemented(scopes: readonly ApiScope[], hasBody: boolean): Operation {
  return {
    scopes,
    hasBody,
    idempotent: false,
    handle() {
      return Promise.reject(
        new HttpError(501, 'not_implemented', 'This operation is not implemented by the emulator yet'),
      );
    },
  };
}

const SEGMENT = '([^/]+)';

/**
 * The service's operations. Path parameters are single, percent-encoded
 * segments; they are decoded after matching, so an encoded `/` or `..` can
 * never reach another route.
 */
export const ROUTES: readonly Route[] = [
  { pattern: /^\/v1\/send\/eml$/, methods: { POST: sendEmlOperation } },
  { pattern: /^\/v1\/send\/email$/, methods: { POST: notImplemented(['sender'], true) } },
  { pattern: new RegExp(`^/v1/send/group/${SEGMENT}$`), methods: { POST: notImplemented(['group.sender'], true) } },
  {
    pattern: new RegExp(`^/v1/group/${SEGMENT}$`),
    methods: {
      POST: notImplemented(['group:insert'], true),
      DELETE: notImplemented(['group:remove'], true),
    },
  },
  {
    pattern: new RegExp(`^/v1/group/${SEGMENT}/check/${SEGMENT}$`),
    methods: { GET: notImplemented(['group:insert', 'group:remove', 'group.sender'], false) },
  },
];
