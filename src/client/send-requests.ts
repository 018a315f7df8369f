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
  return withWarning(
    { ...res, id: stringOrUndefined(data?.id), messageId: stringOrUndefined(data?.messageId), idempotencyKey: key },
    call,
  );
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
  return withWarning(
    {
      ...res,
      id: stringOrUndefined(data?.id),
      recipients: numberOrUndefined(data?.recipients),
      failed: numberOrUndefined(data?.failed),
      idempotencyKey: key,
    },
    call,
  );
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

/**
 * Adds a warning to an accepted send whose body is not the service's JSON
 * (an empty body is fine: a service may answer 202 with none). The contract
 * takes any 2xx as success, but a page from a web server or a single-page app
 * behind a wrong baseUrl answers every path with 200.
 */
function withWarning<T extends SendResult | GroupSendResult>(result: T, call: Call): T {
  const { data, text } = result;
  if (text.trim() === '' || (typeof data === 'object' && data !== null && !Array.isArray(data))) return result;
  const what =
    data === undefined
      ? text.trimStart().startsWith('<')
        ? 'an HTML page'
        : 'a body that is not JSON'
      : 'JSON that is not an object';
  const warning = `The service answered ${result.response}, but with ${what}, not the service's JSON: the message may not have been sent; check baseUrl (a web server or single-page app may answer every path)`;
  call.log('warn', { command: call.command, responseCode: result.statusCode }, warning);
  return { ...result, warning };
}
