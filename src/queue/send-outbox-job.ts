import type { EmlApiClient } from '../client/eml-api-client.js';
import { sendPath } from '../protocol/api-paths.js';
import { MAY_HAVE_BEEN_ACCEPTED } from '../http/request-error.js';
import type { ServiceResponse } from '../http/service-response.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { ContentStore } from './content-store.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { redisFailure } from './redis-failure.js';

/**
 * Posts one queued send through the client's send path, with the
 * job's idempotency key and exactly the stored bytes, so that a job run
 * again (a retry, or after a worker crashed) is the same request and the
 * service delivers it once.
 *
 * Only the service's answer counts as sent: a 2xx whose body is not JSON
 * with the send's `id` (CONTRACT.md) is an unknown outcome, thrown as a
 * passing `EAPI` that may have been accepted (see {@link unrecognisedAnswer}).
 *
 * @throws {EmlApiError} the client's errors; `EMESSAGE` when the stored content is gone, cut or
 *   does not match its SHA-256; `ECONNECTION` when Redis fails while the content is read; `EAPI`
 *   (not permanent, `mayHaveBeenAccepted`) for a 2xx that is not the service's answer
 * @example
 * const result = await sendOutboxJob(client, store, readOutboxJobData(job.data, prefix));
 */
export async function sendOutboxJob(
  client: EmlApiClient,
  store: ContentStore,
  job: OutboxJobData,
): Promise<OutboxSendResult> {
  const key = job.idempotencyKey;
  // An encrypted job is posted only where, and under the key, its producer sealed it for.
  await readContent(() => store.checkBinding(job));
  // An EML is streamed from Redis into its {"mail": ...} body; a JSON send is its stored request body.
  const body =
    job.kind === 'eml' ? await readContent(() => store.emlBody(job)) : await readContent(() => store.jsonBody(job));
  try {
    const { result } = await client.send({ kind: job.kind, groupId: job.group, body, idempotencyKey: key });
    checkAnswer(job, result);
    return clean({
      response: result.response,
      id: result.id,
      messageId: 'messageId' in result ? result.messageId : undefined,
      recipients: 'recipients' in result ? result.recipients : undefined,
      failed: 'failed' in result ? result.failed : undefined,
      idempotencyKey: key,
    });
  } finally {
    if (typeof body !== 'string') await body.dispose();
  }
}

/**
 * The answer of a send, if it is the service's: a 2xx whose body is JSON
 * with the send's `id`. The client (and the direct transport) take any 2xx
 * for success, with a `warning` when the body is not JSON, since the caller
 * sees the result; the outbox deletes the only copy of a message once it
 * counts it sent, so it does that only on an answer it recognises
 * (CONTRACT.md: "strict where a wrong guess would do harm").
 */
function checkAnswer(job: OutboxJobData, result: ServiceResponse & { id: string | undefined }): void {
  if (typeof result.id === 'string' && result.id !== '') return;
  throw unrecognisedAnswer(`POST ${sendPath(job.kind, job.group)}`, result);
}

/**
 * A 2xx that is not the service's answer: an HTML page, a body that is not
 * JSON, JSON without the send's id, an empty body. It may be a web server or
 * single-page app behind a wrong `baseUrl` (then nothing was sent), or a
 * service answering in a form the outbox does not know (then it was): an
 * unknown outcome, retried under the same Idempotency-Key on the job's
 * schedule, its content kept, and parked rather than sent after the
 * service's idempotency window.
 */
function unrecognisedAnswer(command: string, res: ServiceResponse): EmlApiError {
  const body = res.text.trim();
  const what =
    body === ''
      ? 'an empty body'
      : res.data === undefined
        ? body.startsWith('<')
          ? 'an HTML page'
          : 'a body that is not JSON'
        : 'JSON without the id of the send';
  return new EmlApiError(
    'EAPI',
    `${command} answered ${res.response} with ${what}, not the service's answer (JSON with the id of the send): ` +
      'whether the message was taken is unknown, so the outbox does not count it as sent and keeps it; check ' +
      `baseUrl (a web server or single-page app there answers every path); ${MAY_HAVE_BEEN_ACCEPTED}`,
    { responseCode: res.statusCode, response: res.text, command, permanent: false, mayHaveBeenAccepted: true },
  );
}

async function readContent<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    throw redisFailure(err, 'Could not read the queued content from Redis', false);
  }
}

/** Without undefined fields: the result is stored as JSON on the job. */
function clean(result: { [K in keyof OutboxSendResult]: OutboxSendResult[K] | undefined }): OutboxSendResult {
  return Object.fromEntries(Object.entries(result).filter(([, v]) => v !== undefined)) as unknown as OutboxSendResult;
}
