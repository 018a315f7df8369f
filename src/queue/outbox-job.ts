import type { Job, Queue } from 'bullmq';
import type { SendKind } from '../protocol/api-types.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import { EmlApiError, type EmlApiErrorCode } from '../shared/eml-api-error.js';
import type { TraceCarrier } from '../observability/tracing.js';
import { BULLMQ_KEY_NAMES } from './bullmq-internals.js';

/**
 * The error of a failed attempt, kept on the job (`lastError`) for `eml-api queue status` and your
 * tools. Never holds the API key.
 * @example
 * const job = await transport.queue.getJob(info.queueId);
 * console.log(job?.data.lastError?.apiCode); // 'invalid_address'
 */
export interface OutboxJobError {
  /** The {@link EmlApiError} code, e.g. `EAPI` (another error's own code, or `ERROR`). */
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
   * Set when the job was failed to wait for a person: `'stalls'` (more than `maxStalls`: a message that crashes
   * workers?), or `'idempotency-window'` (an attempt may have been accepted and the window has passed).
   */
  parked?: 'stalls' | 'idempotency-window';
}

/**
 * What an outbox job's BullMQ data tells about its message: what `sendMail` reported, and the last
 * failed attempt. Never the API key.
 * @example
 * const job = await transport.queue.getJob(info.queueId);
 * console.log(job?.data.envelope.to, job?.data.size);
 */
export interface OutboxJobData {
  /** The endpoint. */
  kind: SendKind;
  /** The group of a group send. */
  group?: string;
  /** Bytes of the content (before encryption). */
  size: number;
  /** Sender and recipients (a group send has none: its members are). Empty when encrypted. */
  envelope: MailEnvelope;
  /** Message-ID of the EML ('' for JSON sends, whose copies get theirs from the service, and when encrypted). */
  messageId: string;
  /** `Idempotency-Key` of every attempt. */
  idempotencyKey: string;
  /** The last failed attempt, if any. */
  lastError?: OutboxJobError;
}

/** A job's whole data: {@link OutboxJobData} and the outbox's bookkeeping. */
export interface OutboxJobRecord extends OutboxJobData {
  /** Redis key of the content; content in `inline` is only named by it (its encryption is bound to the name). */
  contentKey: string;
  /** The content itself, Base64 (encrypted when the producer encrypts), when small. */
  inline?: string;
  /** SHA-256 (hex) of the bytes stored: a worker posts nothing that does not match. */
  sha256: string;
  /** Set when the content is encrypted: the key's id, and the envelope, Message-ID and destination sealed with it. */
  encryption?: { keyId: string; meta: string };
  /** The fingerprint of the producer's `account`: a worker of another account does not send it. */
  account?: string;
  /** What the service answered, recorded before the job completes: a job run again completes with it, posting none. */
  sent?: OutboxSendResult;
  /** Set when the service refused these very bytes (400, 413, 422) and they were removed. */
  contentRemoved?: true;
  /** Stalls counted as failed attempts since the job was queued or put back; from the first, it is sent alone. */
  stalls?: number;
  /** Of `stalls`, those of runs alone in their worker, which only the job can have caused. */
  aloneStalls?: number;
  /** BullMQ's stall counter as a run alone began. */
  aloneAt?: number;
  /** BullMQ's stall counter when the outbox last counted the job's stalls. */
  stallsSeen?: number;
  /** When (ms, Redis's clock) the first attempt of unknown outcome started: the service may know the key from then. */
  possiblyAcceptedAt?: number;
  /** Until when (ms, Redis's clock) sending again is safe; after it the job is parked. */
  resendUntil?: number;
  /** The `finishedOn` of the failure a producer took over: racing producers answer duplicate. */
  putBackFrom?: number;
  /** The content key of the producer that put the job back with its own bytes. */
  putBackBy?: string;
  /** The W3C trace context the mail was queued in: the worker's span continues that trace. */
  trace?: TraceCarrier;
}

/**
 * What a job returns when the service accepted its send, and what the worker's `'sent'` event carries.
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

/** A job as the outbox itself reads it, bookkeeping included. */
export type OutboxRecordJob = Job<OutboxJobRecord, OutboxSendResult>;

export const SEND_KINDS: readonly SendKind[] = ['eml', 'email', 'group'];

/**
 * Reads a job's data back, checking its shape and that its content key lies in this queue's content space (a forged
 * job must not make a worker upload another Redis key).
 */
export function readOutboxJobData(data: unknown, contentKeyPrefix: string): OutboxJobRecord {
  const o = (typeof data === 'object' && data !== null ? data : {}) as Partial<OutboxJobRecord>;
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
    SEND_KINDS.includes(o.kind as SendKind) &&
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
  return o as OutboxJobRecord;
}

/**
 * The BullMQ job id of a queued send: its idempotency key, escaped one to one so that BullMQ takes it (it refuses `:`,
 * whole numbers and its own key names): the same key always gives the same id, so a message queued twice is kept once.
 * @returns the job id, e.g. `order-1042` for `order-1042`, `a%3Ab` for `a:b`, `%342` for `42`, `%6Deta` for `meta`
 * @example
 * const job = await transport.queue.getJob(outboxJobId('receipt-1042'));
 */
export function outboxJobId(idempotencyKey: string): string {
  const escaped = idempotencyKey.replace(/[%:]/g, (c) => (c === '%' ? '%25' : '%3A'));
  // A literal '%' is always '%25', so an escaped first character never collides; BullMQ refuses `-5` too.
  if (/^\d+$/.test(escaped) || `${parseInt(escaped, 10)}` === escaped || BULLMQ_KEY_NAMES.has(escaped))
    return `${percentEncoded(escaped[0]!)}${escaped.slice(1)}`;
  return escaped;
}

function percentEncoded(char: string): string {
  return `%${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`;
}

/** The outbox's own view of a queue whose public type shows {@link OutboxJobData} only. */
export function recordQueue(queue: Queue<OutboxJobData, OutboxSendResult>): Queue<OutboxJobRecord, OutboxSendResult> {
  return queue as unknown as Queue<OutboxJobRecord, OutboxSendResult>;
}

/**
 * Lua: `decodeJobData(data)`, a job's data as a table, or nil when it is not a JSON object. cjson refuses the escape of
 * a lone UTF-16 surrogate, which JSON.stringify writes (`\ud800`): read again with each surrogate escape as U+FFFD, the
 * data still says which content it points at. A script that took it for unreadable would free a queued job's content.
 */
export const DECODE_JOB_DATA = `
local function decodeJobData(data)
  local ok, job = pcall(cjson.decode, data)
  if not ok then ok, job = pcall(cjson.decode, (string.gsub(data, '\\\\u[dD][89a-fA-F]%x%x', '\\\\uFFFD'))) end
  if ok and type(job) == 'table' then return job end
  return nil
end
`;
