// Request and response shapes of the service, shared by client and emulator so both agree on the wire. Response
// bodies are the project's contract (docs/contract.md): the client reads them leniently, the emulator writes them exactly.

/**
 * A permission of an API key: `sender` (send/eml, send/email), `group.sender` (send/group), `group:insert` and
 * `group:remove` (POST and DELETE /v1/group/{id}).
 * @example const scopes: ApiScope[] = ['sender', 'group.sender'];
 */
export type ApiScope = 'sender' | 'group.sender' | 'group:insert' | 'group:remove';

/**
 * Every scope the service knows, in the order of the specification.
 * @example API_SCOPES.includes('sender'); // true
 */
export const API_SCOPES: readonly ApiScope[] = ['sender', 'group.sender', 'group:insert', 'group:remove'];

/**
 * Account plan of an API key. Hosted (embedded) images need `plus`.
 * @example const plan: ApiPlan = 'plus';
 */
export type ApiPlan = 'free' | 'plus';

/**
 * Address object used for `to` and `from` in the JSON send forms.
 * @example const from: ApiAddress = { email: 'shop@example.test', name: 'Shop' };
 */
export interface ApiAddress {
  email: string;
  name?: string;
}

/**
 * Image embedded in a JSON send, hosted by the service (plus plan).
 * @example const logo: ApiImage = { name: 'logo', data: pngBase64, mimeType: 'PNG' };
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
 * @example const content: ApiTextContent = { html: '<p>Hi</p>', text: 'Hi', tracking: false };
 */
export interface ApiTextContent {
  html?: string;
  text?: string;
  tracking?: boolean;
  images?: ApiImage[];
}

/**
 * Body of `POST /v1/send/eml`: the complete message, Base64-encoded.
 * @example const body: EmlSendRequest = { mail: Buffer.from(eml).toString('base64') };
 */
export interface EmlSendRequest {
  mail: string;
}

/**
 * Body of `POST /v1/send/email`.
 * @example const body: StandardEmailRequest = { to: [{ email: 'ann@example.net' }], from: { email: 'shop@example.com' }, subject: 'Hi', textContent: { text: 'Hello' } };
 */
export interface StandardEmailRequest {
  to: ApiAddress[];
  from: ApiAddress;
  subject: string;
  textContent: ApiTextContent;
}

/**
 * Body of `POST /v1/send/group/{groupId}`.
 * @example const body: GroupEmailRequest = { from: { email: 'news@example.com' }, subject: 'Hello {{first_name}}', textContent: { html: '<p>…</p>' } };
 */
export interface GroupEmailRequest {
  from: ApiAddress;
  subject: string;
  textContent: ApiTextContent;
}

/**
 * One member entry of an add-to-group request. Substitution keys are written `{{key}}`.
 * @example const entry: GroupMemberEntry = { email: 'ann@example.net', name: 'Ann', substitutions: { first_name: 'Ann' } };
 */
export interface GroupMemberEntry {
  email: string;
  name?: string;
  substitutions?: Record<string, string>;
}

/**
 * For an add request's entries that cannot be added: skip them and add the others, or add none.
 * @example await client.addToGroup('newsletter', members, { onFailure: 'SKIP' });
 */
export type OnFailure = 'SKIP' | 'ABORT';

/**
 * Body of `POST /v1/group/{groupId}`.
 * @example const body: AddToGroupRequest = { groupId: 'newsletter', entries: [{ email: 'ann@example.net' }], onFailure: 'SKIP' };
 */
export interface AddToGroupRequest {
  entries: GroupMemberEntry[];
  groupId: string;
  onFailure?: OnFailure;
}

/**
 * Body of `DELETE /v1/group/{groupId}`.
 * @example const body: RemoveFromGroupRequest = { email: 'ann@example.net' };
 */
export interface RemoveFromGroupRequest {
  email: string;
}

/**
 * 202 answer of `POST /v1/send/eml` and `POST /v1/send/email`.
 * @example const answer: SendAcceptedResponse = { id: 'snd_1', messageId: '<a1@example.com>', recipients: 2 };
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
 * @example const answer: GroupSendAcceptedResponse = { id: 'grp_1', recipients: 120, failed: 0 };
 */
export interface GroupSendAcceptedResponse {
  id: string;
  recipients: number;
  failed: number;
}

/**
 * 200 answer of `POST /v1/group/{groupId}`.
 * @example const answer: AddToGroupResponse = { added: ['ann@example.net'], skipped: [{ email: 'x', reason: 'entries[1].email is not a valid address: "x"' }] };
 */
export interface AddToGroupResponse {
  added: string[];
  /** Entries not added (`onFailure: 'SKIP'`), each with a human-readable reason naming the entry and its field. */
  skipped: { email: string; reason: string }[];
}

/**
 * 200 answer of `DELETE /v1/group/{groupId}`.
 * @example const answer: RemoveFromGroupResponse = { removed: true };
 */
export interface RemoveFromGroupResponse {
  removed: true;
}

/**
 * 200 answer of `GET /v1/group/{groupId}/check/{email}`.
 * @example const answer: GroupCheckResponse = { member: true };
 */
export interface GroupCheckResponse {
  member: boolean;
}

/**
 * Error codes the emulator answers with (the service's own codes where it has them).
 * @example const code: ApiErrorCode = 'group_not_found'; // an EmlApiError's apiCode
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
 * @example const body: ApiErrorBody = { error: { code: 'invalid_api_key', message: 'The API key is not valid' } };
 */
export interface ApiErrorBody {
  error: { code: ApiErrorCode | (string & {}); message: string };
}

// Where the operations live and the headers every request carries (client, emulator and CLI).
/**
 * Header carrying the API key (lower case, as Node.js gives header names).
 * @example fetch(url, { headers: { [API_KEY_HEADER]: process.env.EML_API_KEY! } });
 */
export const API_KEY_HEADER = 'x-api-key';

/**
 * Header carrying the idempotency key of a logical send.
 * @example const key = request.headers[IDEMPOTENCY_KEY_HEADER];
 */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/**
 * Paths of the service's operations under the base URL, path parameters percent-encoded so no value changes the path.
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
 * What a send posts, and so where: a complete message (`eml`), a standard JSON email (`email`) or a JSON email to a
 * group's members (`group`).
 * @example const counts = { eml: 0, email: 0, group: 0 } satisfies Record<SendKind, number>;
 */
export type SendKind = 'eml' | 'email' | 'group';

/** The path a send of `kind` is posted to. */
export function sendPath(kind: SendKind, groupId?: string): string {
  if (kind === 'group') return API_PATHS.sendGroup(groupId ?? '');
  return kind === 'eml' ? API_PATHS.sendEml : API_PATHS.sendEmail;
}

/**
 * `encodeURIComponent`, and a segment of dots only encoded too: URL parsers and proxies resolve `.` and `..`.
 * @example
 * encodePathSegment('../admin'); // '..%2Fadmin'
 * encodePathSegment('..');       // '%2E%2E'
 */
export function encodePathSegment(value: string): string {
  const encoded = encodeURIComponent(value);
  return /^\.+$/.test(encoded) ? encoded.replace(/\./g, '%2E') : encoded;
}

// The service's limits as docs/contract.md states them and the emulator enforces them, for every component's defaults.
/** The largest request the service accepts: 50 MiB, so a Base64 message in JSON is a little under 37.5 MiB. */
export const MAX_REQUEST_SIZE = 50 * 1024 * 1024;

export const MAX_IDEMPOTENCY_KEY = 255;

/** 1 to 255 printable ASCII characters without spaces: it can neither inject a header nor be refused. */
export function isValidIdempotencyKey(key: unknown): key is string {
  return typeof key === 'string' && key.length > 0 && key.length <= MAX_IDEMPOTENCY_KEY && /^[\x21-\x7e]+$/.test(key);
}

/**
 * A key travels in `X-API-KEY`, so it is visible ASCII only; CR, LF, spaces or non-ASCII are a mistake (often a pasted
 * line break). @returns the index of the first character a key may not hold, or -1 for a valid key
 */
export function invalidApiKeyAt(key: string): number {
  if (key.length === 0) return 0;
  return key.search(/[^\x21-\x7e]/);
}

// Substitution keys and image names: 1 to 64 letters, digits, `_`, `-` or `.`, `{{key}}` on the wire, with or
// without braces from people; every check is linear on a length-capped input.
export const MAX_PLACEHOLDER_KEY = 64;

/** What {@link isPlaceholderKey} allows, for error messages. */
export const PLACEHOLDER_KEY_RULE = `1-${MAX_PLACEHOLDER_KEY} letters, digits, "_", "-" or "."`;

const KEY = /^[A-Za-z0-9_.-]+$/;

export function isPlaceholderKey(key: string): boolean {
  return key.length > 0 && key.length <= MAX_PLACEHOLDER_KEY && KEY.test(key);
}

/** `{{ key }}` → `key`: trimmed, one pair of surrounding braces and the spaces inside removed. */
export function stripBraces(text: string): string {
  const trimmed = text.trim();
  if (trimmed.length >= 4 && trimmed.startsWith('{{') && trimmed.endsWith('}}')) return trimmed.slice(2, -2).trim();
  return trimmed;
}

/** `key` → `{{key}}`, the wire form. */
export function bracedKey(key: string): string {
  return `{{${key}}}`;
}

/** Whether `text` is `{{key}}`, braces included and no spaces. */
export function isBracedPlaceholderKey(text: string): boolean {
  return text.startsWith('{{') && text.endsWith('}}') && isPlaceholderKey(text.slice(2, -2));
}

/** `{{key}}` in content, spaces allowed inside; disjoint character classes keep matching linear. */
export const PLACEHOLDER_PATTERN = /\{\{\s*([^{}\s]+)\s*\}\}/g;
