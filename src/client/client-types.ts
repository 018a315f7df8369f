import type { GroupSendAcceptedResponse, OnFailure, SendAcceptedResponse } from '../protocol/api-types.js';
import type { ServiceResponse } from '../http/request-error.js';
import type { AddressInput, TextContentInput } from './client-input.js';

/**
 * Per-call options of the client's methods.
 * @example await client.sendEml(eml, { signal: AbortSignal.timeout(10_000) });
 */
export interface RequestOptions {
  /** Aborts the request; the call rejects with `EABORT`. */
  signal?: AbortSignal;
}

/**
 * Per-call options of sends.
 * @example await client.sendEml(eml, { idempotencyKey: `order-${order.id}-receipt`, signal: AbortSignal.timeout(30_000) });
 */
export interface SendOptions extends RequestOptions {
  /** `Idempotency-Key` of this logical send (1 to 255 printable ASCII, no spaces). @default a new random UUID per call */
  idempotencyKey?: string;
}

/**
 * Result of an accepted send; `data` is the service's JSON answer, read leniently.
 * @example const { id, messageId, response } = await client.sendEml(eml); // response: '202 Accepted'
 */
export interface SendResult extends ServiceResponse<Partial<SendAcceptedResponse>> {
  /** The service's id for the send, when it gave one. */
  id: string | undefined;
  /** The Message-ID the service reported, when it gave one. */
  messageId: string | undefined;
  /** The `Idempotency-Key` the send carried. */
  idempotencyKey: string;
  /** Set (and logged) when the 2xx was not the service's JSON, e.g. a page behind a wrong `baseUrl`: the message may not have gone. */
  warning?: string;
}

/**
 * A standard JSON email for {@link EmlApiClient.sendEmail}.
 * @example const email: EmailInput = { from: 'Shop <shop@example.com>', to: 'ann@example.net', subject: 'Hi', textContent: { html: '<p>Hi</p>', tracking: true } };
 */
export interface EmailInput {
  /** One recipient or several, in any Nodemailer address form. */
  to: AddressInput | AddressInput[];
  from: AddressInput;
  subject: string;
  textContent: TextContentInput;
}

/**
 * A group email for {@link EmlApiClient.sendToGroup}: the recipients are the group's members.
 * @example const newsletter: GroupEmailInput = { from: 'news@example.com', subject: 'Hello {{first_name}}', textContent: { html: '<p>…</p><a href="{{unsubscribe}}">Unsubscribe</a>' } };
 */
export interface GroupEmailInput {
  from: AddressInput;
  subject: string;
  textContent: TextContentInput;
}

/**
 * Result of an accepted group send.
 * @example const { id, recipients, failed } = await client.sendToGroup('newsletter', newsletter);
 */
export interface GroupSendResult extends ServiceResponse<Partial<GroupSendAcceptedResponse>> {
  id: string | undefined;
  /** Members the email went to, when the service said. */
  recipients: number | undefined;
  /** Members whose delivery failed (and who were removed from the group), when the service said. */
  failed: number | undefined;
  idempotencyKey: string;
  /** As {@link SendResult.warning}. */
  warning?: string;
}

/**
 * One member: an address in any Nodemailer form, or `{ email, name, substitutions }` (keys with or without braces).
 * @example const member: MemberInput = { email: 'ann@example.net', name: 'Ann', substitutions: { first_name: 'Ann' } };
 */
export type MemberInput =
  | string
  | { email: string; name?: string; substitutions?: Record<string, string | number | boolean> }
  | { address: string; name?: string; substitutions?: Record<string, string | number | boolean> };

/**
 * Options of {@link EmlApiClient.addToGroup}.
 * @example await client.addToGroup('newsletter', members, { onFailure: 'SKIP', batchSize: 200 });
 */
export interface AddToGroupOptions extends RequestOptions {
  /** `SKIP` adds the valid entries and reports the others; `ABORT` adds nothing from a request with a bad entry. @default 'ABORT' */
  onFailure?: OnFailure;
  /** Entries per request. @default 500 */
  batchSize?: number;
  /** Called after each batch the service accepted, e.g. for a progress bar. @default undefined */
  onBatch?: (progress: {
    /** Batches done so far (1 after the first). */
    batch: number;
    /** Batches in all. */
    batches: number;
    /** Entries sent so far, over all batches done. */
    entriesDone: number;
    /** Entries in all. */
    entries: number;
    /** What this batch added. */
    added: string[];
    /** What this batch skipped, with the service's reasons. */
    skipped: { email: string; reason: string }[];
  }) => void;
}

/**
 * Result of {@link EmlApiClient.addToGroup}, over every batch.
 * @example const { added, skipped, batches } = await client.addToGroup('newsletter', members, { onFailure: 'SKIP' });
 */
export interface AddToGroupResult {
  /** Addresses added (or updated, when already members). */
  added: string[];
  /** Entries the service skipped, with its reasons. */
  skipped: { email: string; reason: string }[];
  /** Requests made. */
  batches: number;
}

export const DEFAULT_ADD_BATCH_SIZE = 500;
