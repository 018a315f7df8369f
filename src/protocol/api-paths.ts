/**
 * Where the service's operations live and the headers every request carries,
 * shared by the client, the emulator and the CLI.
 */

/**
 * Header carrying the API key (lower case, as Node.js gives header names).
 * @example
 * fetch(url, { headers: { [API_KEY_HEADER]: process.env.EML_API_KEY! } });
 */
export const API_KEY_HEADER = 'x-api-key';

/**
 * Header carrying the idempotency key of a logical send.
 * @example
 * const key = request.headers[IDEMPOTENCY_KEY_HEADER];
 */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/**
 * Paths of the service's operations, relative to the base URL. Path parameters
 * are percent-encoded so that no value can change the path.
 *
 * @example
 * API_PATHS.sendEml; // '/v1/send/eml'
 * API_PATHS.groupCheck('news', 'ann@example.net'); // '/v1/group/news/check/ann%40example.net'
 */
export const API_PATHS = {
  sendEml: '/v1/send/eml',
  sendEmail: '/v1/send/email',
  sendGroup: (groupId: string): string => `/v1/send/group/${encodePathSegment(groupId)}`,
  group: (groupId: string): string => `/v1/group/${encodePathSegment(groupId)}`,
  groupCheck: (groupId: string, email: string): string =>
    `/v1/group/${encodePathSegment(groupId)}/check/${encodePathSegment(email)}`,
} as const;

/**
 * What a send posts, and so where it goes: a complete message (`eml`,
 * `POST /v1/send/eml`), a standard JSON email (`email`, `POST /v1/send/email`)
 * or a JSON email to every member of a group (`group`,
 * `POST /v1/send/group/{groupId}`). The transport, the outbox (stored on each
 * job) and the relay name a send's kind with it.
 *
 * @example
 * const counts = { eml: 0, email: 0, group: 0 } satisfies Record<SendKind, number>;
 */
export type SendKind = 'eml' | 'email' | 'group';

/**
 * The path a send of `kind` is posted to.
 * @param groupId the group of a `group` send
 * @example
 * sendPath('group', 'news'); // '/v1/send/group/news'
 */
export function sendPath(kind: SendKind, groupId?: string): string {
  if (kind === 'group') return API_PATHS.sendGroup(groupId ?? '');
  return kind === 'eml' ? API_PATHS.sendEml : API_PATHS.sendEmail;
}

/**
 * Percent-encodes one path segment. Beyond `encodeURIComponent`, a segment made
 * only of dots is encoded too, since `.` and `..` would otherwise be resolved
 * as dot segments by URL parsers and proxies and change the path.
 *
 * @example
 * encodePathSegment('../admin'); // '..%2Fadmin'
 * encodePathSegment('..');       // '%2E%2E'
 */
export function encodePathSegment(value: string): string {
  const encoded = encodeURIComponent(value);
  return /^\.+$/.test(encoded) ? encoded.replace(/\./g, '%2E') : encoded;
}
