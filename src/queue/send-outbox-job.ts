import { postEml, postGroupSend, postSend } from '../client/send-requests.js';
import type { Requester } from '../http/requester.js';
import type { UploadBody } from '../http/upload-body.js';
import { API_PATHS } from '../protocol/api-paths.js';
import type { ContentStore } from './content-store.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { redisFailure } from './redis-failure.js';

/**
 * Posts one queued send through the client's request engine, with the
 * job's idempotency key and exactly the stored bytes, so that a job run
 * again (a retry, or after a worker crashed) is the same request and the
 * service delivers it once.
 *
 * @throws {EmlApiError} the client's errors; `EMESSAGE` when the stored content is gone, cut or
 *   does not match its SHA-256; `ECONNECTION` when Redis fails while the content is read
 * @example
 * const result = await sendOutboxJob(clientInternals(client).requester, store, readOutboxJobData(job.data, prefix));
 */
export async function sendOutboxJob(
  requester: Requester,
  store: ContentStore,
  job: OutboxJobData,
): Promise<OutboxSendResult> {
  const key = job.idempotencyKey;
  if (job.kind === 'eml') {
    const body = await readContent(() => store.emlBody(job));
    try {
      const result = await requester.run(`POST ${API_PATHS.sendEml}`, { paced: true }, (call) =>
        postEml(call, body, key),
      );
      return clean({ response: result.response, id: result.id, messageId: result.messageId, idempotencyKey: key });
    } finally {
      await body.dispose();
    }
  }
  const json = await readContent(() => store.jsonBody(job));
  if (job.kind === 'group') {
    const groupId = job.group!;
    const result = await requester.run(`POST ${API_PATHS.sendGroup(groupId)}`, { paced: true }, (call) =>
      postGroupSend(call, groupId, json, key),
    );
    return clean({
      response: result.response,
      id: result.id,
      recipients: result.recipients,
      failed: result.failed,
      idempotencyKey: key,
    });
  }
  const result = await requester.run(`POST ${API_PATHS.sendEmail}`, { paced: true }, (call) =>
    postSend(call, API_PATHS.sendEmail, json, key),
  );
  return clean({ response: result.response, id: result.id, messageId: result.messageId, idempotencyKey: key });
}

async function readContent<T extends UploadBody | string>(read: () => Promise<T>): Promise<T> {
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
