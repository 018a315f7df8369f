import type { Readable } from 'node:stream';
import { emlBodyLength } from '../body/eml-upload-body.js';
import type { SpoolSettings } from '../body/spool-options.js';
import { checkGroupId } from '../client/input-checks.js';
import { toGroupEmailRequest, toStandardEmailRequest } from '../client/request-bodies.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { buildMessage, type BuildThreads } from '../transport/build-message.js';
import type { JsonRoute, SendRoute } from '../transport/json-route.js';
import { jsonSendFromMail } from '../transport/json-send-from-mail.js';
import type { MailEnvelope, NodemailerMail } from '../transport/nodemailer-types.js';
import type { SendKind } from '../protocol/api-paths.js';

/**
 * What a queued send stores: the exact bytes every attempt will post, built
 * and checked once, before anything reaches Redis.
 *
 * @example
 * const content: QueuedContent = await prepareQueuedContent(mail, { kind: 'eml' }, spool, signal);
 * await writeContent(redis, key, content.open());
 * await content.dispose();
 */
export interface QueuedContent {
  kind: SendKind;
  /** The group of a group send. */
  group?: string;
  envelope: MailEnvelope;
  messageId: string;
  /** Bytes of the content. */
  size: number;
  /** Bytes of the request a worker will make with it (an EML travels Base64-encoded in JSON). */
  requestBytes: number;
  /** Whether the envelope sender differs from From (logged; the service sets its own return path). */
  fromDiffers: boolean;
  /** The content, to store: a stream for a built EML (memory or spool file), bytes for JSON. */
  open(): Readable | Buffer;
  /** Removes the spool file, if any. */
  dispose(): Promise<void>;
}

/**
 * Builds the content of a send exactly as {@link EmlApiTransport} would post
 * it, with the same checks: an EML through `buildMessage` (plugins and DKIM
 * applied, Bcc kept, envelope checked), a group or tracked send as its JSON
 * request body (the normalized content: contents resolved, inline images
 * Base64-encoded, every field checked), so that replaying it later sends the
 * same request, under the same idempotency key, on every attempt.
 *
 * @param route where the message goes (its `group`/`tracking` fields)
 * @param threads build threads to build an EML on (`buildThreads`)
 * @throws {EmlApiError} `EENVELOPE` or `EMESSAGE`, as the direct transport; the signal's reason when it aborts
 * @example
 * const content = await prepareQueuedContent(mail, sendRouteOf(mail.data), spool, signal);
 */
export async function prepareQueuedContent(
  mail: NodemailerMail,
  route: SendRoute,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads?: BuildThreads,
): Promise<QueuedContent> {
  if (route.kind !== 'eml') return prepareJson(mail, route, signal);
  const built = await buildMessage(mail, spool, signal, threads);
  const { spooled } = built;
  if (spooled.size === 0) {
    await spooled.body.dispose();
    throw new EmlApiError('EMESSAGE', 'sendMail() got an empty message', { permanent: true });
  }
  return {
    kind: 'eml',
    envelope: built.envelope,
    messageId: built.messageId,
    size: spooled.size,
    requestBytes: emlBodyLength(spooled.size),
    fromDiffers: built.fromDiffers,
    open: () => spooled.open(),
    dispose: () => spooled.body.dispose(),
  };
}

async function prepareJson(mail: NodemailerMail, route: JsonRoute, signal: AbortSignal): Promise<QueuedContent> {
  if (route.kind === 'group') checkGroupId(route.groupId, 'sendMail: group');
  const input = await jsonSendFromMail(mail, route, signal);
  let json: Buffer;
  let envelope: MailEnvelope;
  if (route.kind === 'group') {
    const body = toGroupEmailRequest(
      { from: input.from, subject: input.subject, textContent: input.textContent },
      'sendMail',
    );
    json = Buffer.from(JSON.stringify(body));
    envelope = { from: body.from.email, to: [] };
  } else {
    const body = toStandardEmailRequest(input, 'sendMail');
    json = Buffer.from(JSON.stringify(body));
    envelope = { from: body.from.email, to: body.to.map((a) => a.email) };
  }
  return {
    kind: route.kind,
    ...(route.kind === 'group' ? { group: route.groupId } : {}),
    envelope,
    messageId: '',
    size: json.length,
    requestBytes: json.length,
    fromDiffers: false,
    open: () => json,
    dispose: () => Promise.resolve(),
  };
}
