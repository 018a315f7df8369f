/**
 * The BullMQ job id of a queued send: its idempotency key, written so that
 * BullMQ takes it. BullMQ refuses custom ids that contain `:` or are whole
 * numbers, so `%` and `:` are percent-encoded, and so is the first digit of
 * an all-digit key. The mapping is one to one: two keys never share an id,
 * and the same key always gives the same id, which is how queueing the same
 * logical message twice stores it once.
 *
 * @param idempotencyKey a valid idempotency key (1 to 255 printable ASCII characters, no spaces)
 * @returns the job id, e.g. `order-1042` for `order-1042`, `a%3Ab` for `a:b`, `%342` for `42`
 * @example
 * const job = await transport.queue.getJob(outboxJobId('receipt-1042'));
 */
export function outboxJobId(idempotencyKey: string): string {
  const escaped = idempotencyKey.replace(/[%:]/g, (c) => (c === '%' ? '%25' : '%3A'));
  // Digits are 0x30-0x39: "%3" followed by the digit is its percent-encoding.
  return /^\d+$/.test(escaped) ? `%3${escaped}` : escaped;
}
