/**
 * Request and response shapes of the email service, shared by the client and
 * the emulator so both always agree on the wire format.
 *
 * The service specification leaves response bodies open; the shapes here are
 * the project's contract (see docs/contract.md). The client reads
 * them leniently, the emulator produces them exactly.
 *
 * @packageDocumentation
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
