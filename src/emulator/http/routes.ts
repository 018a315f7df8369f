import { addToGroupOperation } from '../operations/add-to-group-operation.js';
import { checkGroupOperation } from '../operations/check-group-operation.js';
import { removeFromGroupOperation } from '../operations/remove-from-group-operation.js';
import { sendGroupOperation } from '../operations/send-group-operation.js';
import type { Route } from '../operations/operation.js';
import { sendEmailOperation } from '../operations/send-email-operation.js';
import { sendEmlOperation } from '../operations/send-eml-operation.js';

const SEGMENT = '([^/]+)';

/**
 * The service's operations. Path parameters are single, percent-encoded
 * segments; they are decoded after matching, so an encoded `/` or `..` can
 * never reach another route.
 */
export const ROUTES: readonly Route[] = [
  { pattern: /^\/v1\/send\/eml$/, methods: { POST: sendEmlOperation } },
  { pattern: /^\/v1\/send\/email$/, methods: { POST: sendEmailOperation } },
  { pattern: new RegExp(`^/v1/send/group/${SEGMENT}$`), methods: { POST: sendGroupOperation } },
  {
    pattern: new RegExp(`^/v1/group/${SEGMENT}$`),
    methods: { POST: addToGroupOperation, DELETE: removeFromGroupOperation },
  },
  {
    pattern: new RegExp(`^/v1/group/${SEGMENT}/check/${SEGMENT}$`),
    methods: { GET: checkGroupOperation },
  },
];
