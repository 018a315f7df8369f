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
 * of an all-digit key and of a key named like one of BullMQ's own keys of the
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
  if (/^\d+$/.test(escaped) || BULLMQ_KEY_NAMES.has(escaped))
    return `${percentEncoded(escaped[0]!)}${escaped.slice(1)}`;
  return escaped;
}

function percentEncoded(char: string): string {
  return `%${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`;
}
