import type { Job } from 'bullmq';
import type { SendKind } from '../protocol/api-types.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import { EmlApiError, type EmlApiErrorCode } from '../shared/eml-api-error.js';
import type { TraceCarrier } from '../observability/tracing.js';
import { BULLMQ_KEY_NAMES } from './bullmq-internals.js';

/**
 * The error of a failed attempt, kept on the job (in its data, as
 * `lastError`) so that `eml-api queue status` and your tools can show it.
 * The API key never appears in it.
 *
 * @example
 * const job = await transport.queue.getJob(info.queueId);
 * console.log(job?.data.lastError?.apiCode); // 'invalid_address'
 */
export interface OutboxJobError {
  /** The {@link EmlApiError} code, e.g. `EAPI` (another error's own code, or `ERROR`, for failures that are not). */
  code: EmlApiErrorCode | (string & {});
  /** The error's message. */
  message: string;
  /** HTTP status of the service's answer, when there was one. */
  responseCode?: number;
  /** The service's own error code, e.g. `invalid_address`. */
  apiCode?: string;
  /** `true` when the job was failed at once, without retries. */
  permanent: boolean;
  /** The attempt that failed (1 for the first). */
  attempt: number;
  /** When it failed (ISO 8601, Redis's clock). */
  at: string;
  /**
   * Set when the job was failed to wait for a person rather than be tried
   * again: `'stalls'`, it stalled more than `maxStalls` times (a message that
   * crashes workers?); `'idempotency-window'`, an attempt may have been
   * accepted and the service's idempotency window has passed. The message
   * says what to check.
   */
  parked?: OutboxParkReason;
}

/**
 * Why a job was parked (failed for a person to look at): see {@link OutboxJobError.parked}.
 * @example
 * if (job.data.lastError?.parked === 'stalls') alert(`${job.id} crashes workers`);
 */
export type OutboxParkReason = 'stalls' | 'idempotency-window';

/**
 * What a job of the outbox holds in its BullMQ data: where its content is,
 * and what `sendMail` reported. Never the API key (workers have their own),
 * and the message bytes only when they are small (`inline`; see
 * docs/outbox.md, "How messages are stored").
 *
 * @example
 * const job = await transport.queue.getJob(info.queueId);
 * console.log(job?.data.envelope.to, job?.data.size);
 */
export interface OutboxJobData {
  /** The endpoint. */
  kind: SendKind;
  /** The group of a group send. */
  group?: string;
  /**
   * Redis key of the content: the EML bytes, or the JSON request body of a
   * group or tracked send, exactly as every attempt posts them. Content in
   * `inline` is only named by it (its encryption is bound to the name).
   */
  contentKey: string;
  /** Bytes of the content (before encryption). */
  size: number;
  /**
   * The content itself, Base64, when it is small (up to 64 KiB stored);
   * encrypted when the producer encrypts. Removed with the record of its
   * send, or when the service refused it.
   */
  inline?: string;
  /** SHA-256 (hex) of the bytes stored: a worker posts nothing that does not match. */
  sha256: string;
  /**
   * Set when the content is encrypted: the key's id, and the envelope,
   * Message-ID and destination sealed with it (Base64), which `envelope` and
   * `messageId` then do not hold in clear.
   */
  encryption?: { keyId: string; meta: string };
  /** Sender and recipients (a group send has none: its members are). Empty when encrypted. */
  envelope: MailEnvelope;
  /** Message-ID of the EML ('' for JSON sends, whose copies get theirs from the service; '' when encrypted). */
  messageId: string;
  /** `Idempotency-Key` of every attempt. */
  idempotencyKey: string;
  /** The fingerprint of the producer's `account`, when it names one: a worker of another account does not send it. */
  account?: string;
  /** The last failed attempt, if any. */
  lastError?: OutboxJobError;
  /**
   * What the service answered, recorded before the job completes: a job run
   * again after that (a dashboard's "Retry" on a completed job) completes
   * with it and posts nothing.
   */
  sent?: OutboxSendResult;
  /** Set when the service refused these very bytes (400, 413, 422) and they were removed. */
  contentRemoved?: true;
  /** Stalls counted as failed attempts since the job was queued or put back; from the first, it is sent alone. */
  stalls?: number;
  /** Of `stalls`, those of runs alone in their worker, which only the job can have caused (parked past `maxStalls`). */
  aloneStalls?: number;
  /** BullMQ's stall counter as a run alone began: a stall found after it counts in `aloneStalls`. */
  aloneAt?: number;
  /** BullMQ's stall counter of the job (`stalledCounter`) when the outbox last counted its stalls. */
  stallsSeen?: number;
  /**
   * When (ms, Redis's clock) the first attempt started whose outcome is
   * unknown (a timeout after the request was sent, a 5xx other than 503, a
   * stall): the service may remember the key from then.
   */
  possiblyAcceptedAt?: number;
  /**
   * Until when (ms, Redis's clock) sending again is safe: `possiblyAcceptedAt` plus the workers'
   * `idempotencyWindow` less `idempotencyMargin`. After it the job is parked.
   */
  resendUntil?: number;
  /** The `finishedOn` of the failure a producer took over (replaced or put back): racing producers answer duplicate. */
  putBackFrom?: number;
  /** The content key of the producer that put the job back with its own bytes: its change, known as its own. */
  putBackBy?: string;
  /** The W3C trace context of the request that queued the mail: the worker's span continues that trace. */
  trace?: TraceCarrier;
}

/**
 * What a job returns when the service accepted its send: its BullMQ return
 * value, and what the worker's `'sent'` event carries.
 *
 * @example
 * outbox.on('sent', (job, result: OutboxSendResult) => log.info({ job: job.id, id: result.id }, result.response));
 */
export interface OutboxSendResult {
  /** HTTP status line of the service's answer, e.g. `202 Accepted`. */
  response: string;
  /** The service's id for the send, when it gave one. */
  id?: string;
  /** The Message-ID the service reported, when it gave one. */
  messageId?: string;
  /** Members a group send went to, when the service said. */
  recipients?: number;
  /** Members whose delivery failed, when the service said. */
  failed?: number;
  /** The `Idempotency-Key` the send carried. */
  idempotencyKey: string;
}

/**
 * A job of the outbox, as BullMQ hands it to workers and events.
 * @example
 * outbox.on('failed', (job: OutboxJob, err) => console.log(job.id, job.data.envelope.to, err.message));
 */
export type OutboxJob = Job<OutboxJobData, OutboxSendResult>;

const KINDS: readonly SendKind[] = ['eml', 'email', 'group'];

/**
 * Reads a job's data back, checking its shape and that its content key lies
 * in this queue's content space (a forged job must not make a worker upload
 * another Redis key).
 *
 * @throws {EmlApiError} `EMESSAGE` (permanent) when the job is not one of this outbox
 */
export function readOutboxJobData(data: unknown, contentKeyPrefix: string): OutboxJobData {
  const o = (typeof data === 'object' && data !== null ? data : {}) as Partial<OutboxJobData>;
  if (Object.keys(o).length === 0) {
    // BullMQ hands a job whose hash is gone (evicted) to a worker with empty data.
    throw new EmlApiError(
      'EMESSAGE',
      'The data of this job is missing from Redis (evicted or removed): nothing to send. ' +
        'Redis must run with maxmemory-policy noeviction (see "What durability relies on in Redis" in docs/outbox.md)',
      { permanent: true },
    );
  }
  const encryption = o.encryption as { keyId?: unknown; meta?: unknown } | undefined;
  const valid =
    (encryption === undefined ||
      (typeof encryption === 'object' &&
        encryption !== null &&
        typeof encryption.keyId === 'string' &&
        typeof encryption.meta === 'string')) &&
    typeof o.sha256 === 'string' &&
    /^[0-9a-f]{64}$/.test(o.sha256) &&
    (o.inline === undefined || typeof o.inline === 'string') &&
    KINDS.includes(o.kind as SendKind) &&
    (o.kind !== 'group' || (typeof o.group === 'string' && o.group.length > 0)) &&
    typeof o.contentKey === 'string' &&
    o.contentKey.startsWith(contentKeyPrefix) &&
    Number.isSafeInteger(o.size) &&
    typeof o.idempotencyKey === 'string' &&
    (o.account === undefined || typeof o.account === 'string') &&
    typeof o.messageId === 'string' &&
    typeof o.envelope === 'object' &&
    o.envelope !== null &&
    Array.isArray(o.envelope.to);
  if (!valid) {
    throw new EmlApiError(
      'EMESSAGE',
      "This job was not queued by this outbox's producers: its data is not an outbox job's of this queue",
      { permanent: true },
    );
  }
  return o as OutboxJobData;
}

/**
 * The BullMQ job id of a queued send: its idempotency key, written so that
 * BullMQ takes it. BullMQ refuses custom ids that contain `:` or are whole
 * numbers, so `%` and `:` are percent-encoded, and so is the first character
 * of an all-digit key, of a negative whole number (`-5`) and of a key named like one of BullMQ's own keys of the
 * queue (`meta`, `wait`, `completed`...). The mapping is one to one: two keys
 * never share an id, and the same key always gives the same id, which is how
 * queueing the same logical message twice stores it once.
 *
 * @param idempotencyKey a valid idempotency key (1 to 255 printable ASCII characters, no spaces)
 * @returns the job id, e.g. `order-1042` for `order-1042`, `a%3Ab` for `a:b`, `%342` for `42`, `%6Deta` for `meta`
 * @example
 * const job = await transport.queue.getJob(outboxJobId('receipt-1042'));
 */
export function outboxJobId(idempotencyKey: string): string {
  const escaped = idempotencyKey.replace(/[%:]/g, (c) => (c === '%' ? '%25' : '%3A'));
  // Escaping the first character keeps the id decodable and distinct from every other key's:
  // a literal '%' is always '%25', so no other key yields '%3' + digit or '%6D' + 'eta'.
  // BullMQ refuses an id that reads as an integer (`${parseInt(id)}` === id: `42`, but `-5` too).
  if (/^\d+$/.test(escaped) || `${parseInt(escaped, 10)}` === escaped || BULLMQ_KEY_NAMES.has(escaped))
    return `${percentEncoded(escaped[0]!)}${escaped.slice(1)}`;
  return escaped;
}

function percentEncoded(char: string): string {
  return `%${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`;
}
