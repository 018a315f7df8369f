import type { Job } from 'bullmq';
import type { SendKind } from '../protocol/api-types.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import { EmlApiError, type EmlApiErrorCode } from '../shared/eml-api-error.js';
import type { TraceCarrier } from '../observability/tracing.js';

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
  /** When it failed (ISO 8601; written by a worker: Redis's clock). */
  at: string;
  /**
   * Set when the job was failed to wait for a person rather than be tried
   * again: `'stalls'`, it stalled more than `maxStalls` times (a message that
   * crashes workers?); `'idempotency-window'`, an attempt may have been
   * accepted and the service's idempotency window has passed (a resend could
   * deliver it twice). The message says what to check.
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
 * never the message bytes, but when they are small (`inline`; larger ones are
 * under `contentKey`, see docs/outbox.md, "How messages are stored").
 *
 * @example
 * const job = await transport.queue.getJob(info.queueId);
 * console.log(job?.data.envelope.to, job?.data.size);
 */
export interface OutboxJobData {
  /**
   * Format version of this record: 3 for content inline (in `inline`,
   * encrypted or not), 2 for encrypted content under `contentKey`, 1
   * otherwise. Workers before 0.2 refuse 2 and 3 rather than post ciphertext
   * or find no content.
   */
  v: 1 | 2 | 3;
  /** The endpoint. */
  kind: SendKind;
  /** The group of a group send. */
  group?: string;
  /**
   * Redis key of the content: the EML bytes, or the JSON request body of a
   * group or tracked send, exactly as they will be posted on every attempt
   * (small content is in `inline` instead; this then only names it).
   */
  contentKey: string;
  /** Bytes of the content (before encryption). */
  size: number;
  /**
   * The content itself, Base64, when it is small (up to 64 KiB stored): kept
   * in the job instead of under `contentKey`, which then names it (for the
   * SHA-256 check's messages and encryption's bindings) but holds nothing.
   * Removed from the job with the record of its send, or when the service
   * refused it. Encrypted (records of `encryption.keyId`) when the producer
   * encrypts.
   */
  inline?: string;
  /**
   * SHA-256 (hex) of the bytes stored (under `contentKey`, or `inline`),
   * written by the producer as it stored them: a worker posts nothing that
   * does not match. Jobs queued by versions before 0.2 have none.
   */
  sha256?: string;
  /**
   * Set when the content is encrypted (the producer's `encryption` option):
   * the id of the key, and the envelope and Message-ID sealed with it
   * (Base64), which `envelope` and `messageId` then do not hold in clear.
   */
  encryption?: { keyId: string; meta: string };
  /**
   * Sender and recipients (for a group send, no recipients: the members are).
   * Empty when the content is encrypted: sealed in `encryption.meta`.
   */
  envelope: MailEnvelope;
  /** Message-ID of the EML ('' for JSON sends: the service gives each copy its own; '' when encrypted). */
  messageId: string;
  /** `Idempotency-Key` of every attempt. */
  idempotencyKey: string;
  /**
   * The fingerprint of the producer's `account` option, when it names one: a
   * worker of another account does not send the job.
   */
  account?: string;
  /** The last failed attempt, if any. */
  lastError?: OutboxJobError;
  /**
   * What the service answered when it accepted the send, recorded before the
   * job completes: a job run again after that (a worker that died before
   * completing it, Bull Board's "Retry" on a completed job) completes with
   * this result and posts nothing.
   */
  sent?: OutboxSendResult;
  /**
   * `true` when the content was removed because the service refused these
   * very bytes (400, 413, 422): the job is kept to be looked at, and cannot be
   * put back (a `sendMail` with the same `idempotencyKey` replaces it).
   */
  contentRemoved?: true;
  /**
   * Stalls counted as failed attempts since the job was queued or put back:
   * each time, the worker sending it stopped before it finished. A job that
   * has stalled is sent alone in its worker from then on.
   */
  stalls?: number;
  /**
   * Of `stalls`, those of runs alone in their worker (nothing else in
   * flight), which only the job itself can have caused. Past the workers'
   * `maxStalls` the job is parked.
   */
  aloneStalls?: number;
  /**
   * Set as a run alone begins (BullMQ's stall counter then): a stall found
   * after it is counted in `aloneStalls`.
   */
  aloneAt?: number;
  /** BullMQ's stall counter of the job (`stalledCounter`) when the outbox last counted its stalls. */
  stallsSeen?: number;
  /**
   * When (ms since the epoch, Redis's clock: workers on machines whose clocks
   * differ read it alike) the first attempt started
   * whose outcome the worker could not learn: a timeout or a connection lost
   * after the request was sent, a 5xx other than 503, a worker that stopped
   * mid-send (then the earliest it can have started). The service may have
   * accepted it, and remembers its idempotency key from then.
   */
  possiblyAcceptedAt?: number;
  /**
   * Until when (ms since the epoch, Redis's clock) sending again is safe: `possiblyAcceptedAt`
   * plus the workers' `idempotencyWindow` less `idempotencyMargin`. After it,
   * the job is parked, not sent again; `eml-api queue retry <id>` (a person
   * who checked) clears both.
   */
  resendUntil?: number;
  /**
   * The `finishedOn` of the failure a `sendMail` with this job's key took
   * over (replacing the job or putting it back): other producers racing with
   * the same key see that this failure is taken, and answer duplicate.
   */
  putBackFrom?: number;
  /**
   * Set when a `sendMail` put the job back with its own bytes (it may have
   * been accepted): the content key that `sendMail` stored and dropped. It
   * makes the change that producer's alone, so that the change, made again
   * when its reply was lost, is known as its own.
   */
  putBackBy?: string;
  /**
   * The trace context of the request that queued the mail (W3C Trace Context,
   * written when an OpenTelemetry span was active): the worker's span of the
   * job continues that trace. No secret: two random ids and flags.
   */
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
 * in this queue's content space (so a forged job cannot make a worker upload
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
  const sealed =
    typeof encryption === 'object' &&
    encryption !== null &&
    typeof encryption.keyId === 'string' &&
    typeof encryption.meta === 'string' &&
    typeof o.sha256 === 'string';
  const valid =
    ((o.v === 1 && encryption === undefined && o.inline === undefined) ||
      (o.v === 2 && sealed && o.inline === undefined) ||
      // Content removed from a job (sent, or refused) leaves it without `inline`.
      (o.v === 3 && (encryption === undefined || sealed) && typeof o.sha256 === 'string')) &&
    (o.inline === undefined || typeof o.inline === 'string') &&
    KINDS.includes(o.kind as SendKind) &&
    (o.kind !== 'group' || (typeof o.group === 'string' && o.group.length > 0)) &&
    typeof o.contentKey === 'string' &&
    o.contentKey.startsWith(contentKeyPrefix) &&
    Number.isSafeInteger(o.size) &&
    typeof o.idempotencyKey === 'string' &&
    (o.account === undefined || typeof o.account === 'string') &&
    typeof o.messageId === 'string' &&
    (o.sha256 === undefined || (typeof o.sha256 === 'string' && /^[0-9a-f]{64}$/.test(o.sha256))) &&
    typeof o.envelope === 'object' &&
    o.envelope !== null &&
    Array.isArray(o.envelope.to);
  if (!valid) {
    throw new EmlApiError(
      'EMESSAGE',
      'This job was not queued by EmlApiQueueTransport (or by another version of it): its data has no content key of this queue',
      { permanent: true },
    );
  }
  return o as OutboxJobData;
}

/**
 * The names of BullMQ's own keys of a queue (`{prefix}:{queue}:{name}`, from
 * BullMQ 5 and 6's `QueueKeys`). A job's hash is `{prefix}:{queue}:{jobId}`,
 * so a job id equal to one of them would be written over (or read as) the
 * queue's own bookkeeping: BullMQ then takes the job for a duplicate, fails
 * with WRONGTYPE, or turns `completed`/`failed` into a hash and breaks the
 * queue for every later job.
 */
const BULLMQ_KEY_NAMES: ReadonlySet<string> = new Set([
  'active',
  'wait',
  'waiting-children',
  'paused',
  'id',
  'delayed',
  'prioritized',
  'stalled-check',
  'completed',
  'failed',
  'stalled',
  'repeat',
  'limiter',
  'meta',
  'events',
  'pc',
  'marker',
  'de',
]);

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
