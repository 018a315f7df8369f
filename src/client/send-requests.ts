import type { SpoolSettings } from '../body/spool-options.js';
import type { Call } from '../http/requester.js';
import type { ServiceResponse } from '../http/service-response.js';
import type { UploadBody } from '../http/upload-body.js';
import type { SendKind } from '../protocol/api-paths.js';
import type { GroupSendAcceptedResponse, SendAcceptedResponse } from '../protocol/api-types.js';
import type { EmlApiLogger } from '../shared/logger.js';
import { numberOrUndefined, objectOrUndefined, stringOrUndefined } from './answer-fields.js';
import type { GroupSendResult, SendResult } from './client-types.js';

/**
 * The one send path of the package: what the client's own send methods, the
 * transport, the outbox worker and the relay hand to the client's `send`.
 * A send either brings its request body (`body`: the caller keeps and
 * disposes it) or builds it once its call holds a connection slot (`build`:
 * the client disposes what it returns), so that memory is bounded by
 * `maxConnections`, not by the sends waiting.
 *
 * @internal Package-internal; not in the published types.
 */
export type SendRequest<B extends SendBody = SendBody> = {
  /** What is posted, and so where to. */
  readonly kind: SendKind;
  /** The group of a `group` send. */
  readonly groupId?: string | undefined;
  /** The send's `Idempotency-Key` (checked by the caller); a new UUID when undefined. */
  readonly idempotencyKey?: string | undefined;
  /** Aborts the send wherever it is: waiting, building or uploading. */
  readonly signal?: AbortSignal | undefined;
} & (
  | { readonly body: UploadBody | string; readonly build?: never }
  | { readonly build: (context: BuildContext) => Promise<B>; readonly body?: never }
);

/**
 * A request body made by a send's `build`, with whatever the builder wants
 * back with the answer (an envelope, a Message-ID).
 * @internal
 */
export interface SendBody {
  /** The JSON text or the replayable `{"mail": ...}` body to post. */
  readonly body: UploadBody | string;
}

/**
 * What a send's `build` gets: the call's signal and the client's settings a
 * build needs.
 * @internal
 */
export interface BuildContext {
  /** Aborted by the caller's signal, `timeouts.total` or `close({ abort: true })`. */
  readonly signal: AbortSignal;
  /** Where large messages are spooled (the client's `spool` option). */
  readonly spool: SpoolSettings;
  /** The client's logger. */
  readonly logger: EmlApiLogger;
}

/**
 * An accepted send: the service's answer read for the send's kind, and what
 * `build` made (undefined for a send that brought its body).
 * @internal
 */
export interface AcceptedSend<R, B> {
  readonly result: R;
  readonly built: B;
}

/** The answer to a send of `kind`: a group send's counts, or an EML or JSON email's ids. */
export type SendAnswer<K extends SendKind> = K extends 'group' ? GroupSendResult : SendResult;

/**
 * Reads the accepted answer of a send leniently (a real service may omit
 * fields), with a warning when the body is not the service's JSON.
 */
export function readSendAnswer(
  kind: SendKind,
  res: ServiceResponse<Partial<SendAcceptedResponse & GroupSendAcceptedResponse>>,
  idempotencyKey: string,
  call: Call,
): SendResult | GroupSendResult {
  const data = objectOrUndefined(res.data);
  const result: SendResult | GroupSendResult =
    kind === 'group'
      ? {
          ...res,
          id: stringOrUndefined(data?.id),
          recipients: numberOrUndefined(data?.recipients),
          failed: numberOrUndefined(data?.failed),
          idempotencyKey,
        }
      : { ...res, id: stringOrUndefined(data?.id), messageId: stringOrUndefined(data?.messageId), idempotencyKey };
  return withWarning(result, call);
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
