/**
 * Request and response shapes of the email service, shared by the client and
 * the emulator so both always agree on the wire format.
 *
 * The service specification leaves response bodies open; the shapes here are
 * the project's contract (see docs/contract.md). The client reads
 * them leniently, the emulator produces them exactly.
 */

/**
 * A permission held by an API key.
 *
 * - `sender`: `POST /v1/send/eml` and `POST /v1/send/email`
 * - `group.sender`: `POST /v1/send/group/{id}`
 * - `group:insert`: `POST /v1/group/{id}`
 * - `group:remove`: `DELETE /v1/group/{id}`
 *
 * @example
 * const scopes: ApiScope[] = ['sender', 'group.sender'];
 */
export type ApiScope = 'sender' | 'group.sender' | 'group:insert' | 'group:remove';

/**
 * Every scope the service knows, in the order of the specification.
 * @example
 * API_SCOPES.includes('sender'); // true
 */
export const API_SCOPES: readonly ApiScope[] = ['sender', 'group.sender', 'group:insert', 'group:remove'];

/**
 * Account plan of an API key. Hosted (embedded) images need `plus`.
 *
 * @example
 * const plan: ApiPlan = 'plus';
 */
export type ApiPlan = 'free' | 'plus';

/**
 * Address object used for `to` and `from` in the JSON send forms.
 *
 * @example
 * const from: ApiAddress = { email: 'shop@example.test', name: 'Shop' };
 */
export interface ApiAddress {
  email: string;
  name?: string;
}

/**
 * Image embedded in a JSON send, hosted by the service (plus plan).
 *
 * @example
 * const logo: ApiImage = { name: 'logo', data: pngBase64, mimeType: 'PNG' };
 */
export interface ApiImage {
  /** Placeholder name, referenced as `{{name}}` in `html`. */
  name: string;
  /** Base64 image data. */
  data: string;
  /** Upper-case format word. */
  mimeType: 'PNG' | 'JPEG' | 'GIF' | 'WEBP';
}

/**
 * Content of a JSON send.
 *
 * @example
 * const content: ApiTextContent = { html: '<p>Hi</p>', text: 'Hi', tracking: false };
 */
export interface ApiTextContent {
  html?: string;
  text?: string;
  tracking?: boolean;
  images?: ApiImage[];
}

/**
 * Body of `POST /v1/send/eml`: the complete message, Base64-encoded.
 * @example
 * const body: EmlSendRequest = { mail: Buffer.from(eml).toString('base64') };
 */
export interface EmlSendRequest {
  mail: string;
}

/**
 * Body of `POST /v1/send/email`.
 * @example
 * const body: StandardEmailRequest = { to: [{ email: 'ann@example.net' }], from: { email: 'shop@example.com' }, subject: 'Hi', textContent: { text: 'Hello' } };
 */
export interface StandardEmailRequest {
  to: ApiAddress[];
  from: ApiAddress;
  subject: string;
  textContent: ApiTextContent;
}

/**
 * Body of `POST /v1/send/group/{groupId}`.
 * @example
 * const body: GroupEmailRequest = { from: { email: 'news@example.com' }, subject: 'Hello {{first_name}}', textContent: { html: '<p>…</p>' } };
 */
export interface GroupEmailRequest {
  from: ApiAddress;
  subject: string;
  textContent: ApiTextContent;
}

/**
 * One member entry of an add-to-group request. Substitution keys are written `{{key}}`.
 * @example
 * const entry: GroupMemberEntry = { email: 'ann@example.net', name: 'Ann', substitutions: { first_name: 'Ann' } };
 */
export interface GroupMemberEntry {
  email: string;
  name?: string;
  substitutions?: Record<string, string>;
}

/**
 * What the service does when an entry of an add request cannot be added:
 * skip it and add the others, or add none.
 * @example
 * await client.addToGroup('newsletter', members, { onFailure: 'SKIP' });
 */
export type OnFailure = 'SKIP' | 'ABORT';

/**
 * Body of `POST /v1/group/{groupId}`.
 * @example
 * const body: AddToGroupRequest = { groupId: 'newsletter', entries: [{ email: 'ann@example.net' }], onFailure: 'SKIP' };
 */
export interface AddToGroupRequest {
  entries: GroupMemberEntry[];
  groupId: string;
  onFailure?: OnFailure;
}

/**
 * Body of `DELETE /v1/group/{groupId}`.
 * @example
 * const body: RemoveFromGroupRequest = { email: 'ann@example.net' };
 */
export interface RemoveFromGroupRequest {
  email: string;
}

/**
 * 202 answer of `POST /v1/send/eml` and `POST /v1/send/email`.
 * @example
 * const answer: SendAcceptedResponse = { id: 'snd_1', messageId: '<a1@example.com>', recipients: 2 };
 */
export interface SendAcceptedResponse {
  /** The service's id for this send. */
  id: string;
  /** The Message-ID header of the message as sent. */
  messageId: string;
  /** Number of recipients the message was accepted for. */
  recipients: number;
}

/**
 * 202 answer of `POST /v1/send/group/{groupId}`.
 * @example
 * const answer: GroupSendAcceptedResponse = { id: 'grp_1', recipients: 120, failed: 0 };
 */
export interface GroupSendAcceptedResponse {
  id: string;
  recipients: number;
  failed: number;
}

/**
 * 200 answer of `POST /v1/group/{groupId}`.
 * @example
 * const answer: AddToGroupResponse = { added: ['ann@example.net'], skipped: [{ email: 'x', reason: 'invalid_address' }] };
 */
export interface AddToGroupResponse {
  added: string[];
  skipped: { email: string; reason: string }[];
}

/**
 * 200 answer of `DELETE /v1/group/{groupId}`.
 * @example
 * const answer: RemoveFromGroupResponse = { removed: true };
 */
export interface RemoveFromGroupResponse {
  removed: true;
}

/**
 * 200 answer of `GET /v1/group/{groupId}/check/{email}`.
 * @example
 * const answer: GroupCheckResponse = { member: true };
 */
export interface GroupCheckResponse {
  member: boolean;
}

/**
 * Error codes the emulator answers with (the service's own codes where it has them).
 * @example
 * const code: ApiErrorCode = 'group_not_found'; // an EmlApiError's apiCode
 */
export type ApiErrorCode =
  | 'invalid_json'
  | 'invalid_request'
  | 'invalid_base64'
  | 'invalid_eml'
  | 'invalid_address'
  | 'no_recipients'
  | 'missing_api_key'
  | 'invalid_api_key'
  | 'missing_scope'
  | 'plan_required'
  | 'group_not_found'
  | 'not_a_member'
  | 'not_found'
  | 'idempotency_key_reused'
  | 'method_not_allowed'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'internal_error'
  | 'unavailable';

/**
 * Error body: `{ "error": { "code", "message" } }`.
 * @example
 * const body: ApiErrorBody = { error: { code: 'invalid_api_key', message: 'The API key is not valid' } };
 */
export interface ApiErrorBody {
  error: { code: ApiErrorCode | (string & {}); message: string };
}

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

/**
 * The service's limits, as CONTRACT.md states them and the emulator enforces
 * them: defined once, here, and imported by every component that derives a
 * default from them.
 */

/**
 * The largest HTTP request the service accepts, in bytes: 50 MiB. A message
 * travels Base64-encoded in JSON (4/3 of its size), so the largest message a
 * send carries is a little under 37.5 MiB.
 */
export const MAX_REQUEST_SIZE = 50 * 1024 * 1024;

/** Longest `Idempotency-Key` value. */
export const MAX_IDEMPOTENCY_KEY = 255;

/**
 * Whether a value can be an `Idempotency-Key`: 1 to 255 printable ASCII
 * characters without spaces, so it can neither inject a header nor be refused.
 */
export function isValidIdempotencyKey(key: unknown): key is string {
  return typeof key === 'string' && key.length > 0 && key.length <= MAX_IDEMPOTENCY_KEY && /^[\x21-\x7e]+$/.test(key);
}

/**
 * The API-key rule of the wire contract: a key travels in the `X-API-KEY`
 * header, so it is visible ASCII only. CR, LF, spaces or non-ASCII are a
 * configuration mistake (often a pasted line break), never a valid key.
 *
 * @returns the index of the first character a key may not hold, or -1 when the key is valid (and not empty)
 */
export function invalidApiKeyAt(key: string): number {
  if (key.length === 0) return 0;
  return key.search(/[^\x21-\x7e]/);
}

/**
 * The placeholder-key rule of the wire contract: substitution keys and image
 * names are 1 to 64 letters, digits, `_`, `-` or `.`, written `{{key}}` on the
 * wire and accepted with or without braces from people. Every check runs in
 * linear time on a length-capped input.
 */

/** Longest placeholder key. */
export const MAX_PLACEHOLDER_KEY = 64;

/** What {@link isPlaceholderKey} allows, for error messages. */
export const PLACEHOLDER_KEY_RULE = `1-${MAX_PLACEHOLDER_KEY} letters, digits, "_", "-" or "."`;

const KEY = /^[A-Za-z0-9_.-]+$/;

/** Whether `key` (without braces) is a valid placeholder key. */
export function isPlaceholderKey(key: string): boolean {
  return key.length > 0 && key.length <= MAX_PLACEHOLDER_KEY && KEY.test(key);
}

/**
 * `{{ key }}` → `key`: trims, then removes one pair of surrounding double
 * braces and the spaces inside them. Text without braces comes back trimmed.
 */
export function stripBraces(text: string): string {
  const trimmed = text.trim();
  if (trimmed.length >= 4 && trimmed.startsWith('{{') && trimmed.endsWith('}}')) return trimmed.slice(2, -2).trim();
  return trimmed;
}

/** `key` → `{{key}}`, the form keys take on the wire. */
export function bracedKey(key: string): string {
  return `{{${key}}}`;
}

/** Whether `text` is a key in its wire form, `{{key}}`, braces included and no spaces. */
export function isBracedPlaceholderKey(text: string): boolean {
  return text.startsWith('{{') && text.endsWith('}}') && isPlaceholderKey(text.slice(2, -2));
}

/**
 * A placeholder in content: `{{key}}`, spaces allowed inside the braces. The
 * character classes are disjoint, so matching stays linear.
 */
export const PLACEHOLDER_PATTERN = /\{\{\s*([^{}\s]+)\s*\}\}/g;
