import { randomUUID } from 'node:crypto';
import type { Call } from '../http/requester.js';
import type { ServiceResponse } from '../http/service-response.js';
import type { UploadBody } from '../http/upload-body.js';
import { emlBodyLength } from '../body/eml-upload-body.js';
import { API_PATHS, IDEMPOTENCY_KEY_HEADER } from '../protocol/api-paths.js';
import type { GroupSendAcceptedResponse, SendAcceptedResponse } from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { numberOrUndefined, objectOrUndefined, stringOrUndefined } from './answer-fields.js';
import type { GroupSendResult, SendResult } from './client-types.js';

/**
 * The send requests, made within a call the caller opened (the client's
 * methods, or the transport after building a message in the same call).
 * Each posts one logical send with its `Idempotency-Key` (the caller's, or a
 * new UUID) and reads the accepted answer leniently.
 */

/** `POST /v1/send/eml` with a prepared `{"mail": ...}` body. */
export async function postEml(call: Call, body: UploadBody, idempotencyKey: string | undefined): Promise<SendResult> {
  if (body.length <= emlBodyLength(0)) {
    throw new EmlApiError('EMESSAGE', 'sendEml() got an empty message', {
      command: `POST ${API_PATHS.sendEml}`,
      permanent: true,
    });
  }
  return postSend(call, API_PATHS.sendEml, body, idempotencyKey);
}

/** A send to `/v1/send/eml` or `/v1/send/email`. */
export async function postSend(
  call: Call,
  path: string,
  body: string | UploadBody,
  idempotencyKey: string | undefined,
): Promise<SendResult> {
  const { key, res } = await postIdempotent<SendAcceptedResponse>(call, path, body, idempotencyKey);
  const data = objectOrUndefined(res.data);
  return {
    ...res,
    id: stringOrUndefined(data?.id),
    messageId: stringOrUndefined(data?.messageId),
    idempotencyKey: key,
  };
}

/** `POST /v1/send/group/{groupId}` with a JSON group email. */
export async function postGroupSend(
  call: Call,
  groupId: string,
  body: string,
  idempotencyKey: string | undefined,
): Promise<GroupSendResult> {
  const { key, res } = await postIdempotent<GroupSendAcceptedResponse>(
    call,
    API_PATHS.sendGroup(groupId),
    body,
    idempotencyKey,
  );
  const data = objectOrUndefined(res.data);
  return {
    ...res,
    id: stringOrUndefined(data?.id),
    recipients: numberOrUndefined(data?.recipients),
    failed: numberOrUndefined(data?.failed),
    idempotencyKey: key,
  };
}

/** One logical send: a POST carrying its `Idempotency-Key`, the caller's or a new UUID. */
async function postIdempotent<T>(
  call: Call,
  path: string,
  body: string | UploadBody,
  idempotencyKey: string | undefined,
): Promise<{ key: string; res: ServiceResponse<Partial<T>> }> {
  const key = idempotencyKey ?? randomUUID();
  const res = await call.request<Partial<T>>({
    method: 'POST',
    path,
    body,
    headers: { [IDEMPOTENCY_KEY_HEADER]: key },
  });
  return { key, res };
}
