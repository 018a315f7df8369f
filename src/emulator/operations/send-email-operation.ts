import { randomUUID } from 'node:crypto';
import { API_PATHS } from '../../protocol/api-paths.js';
import type { SendAcceptedResponse } from '../../protocol/api-types.js';
import { composeMessage } from './compose-message.js';
import { isUndeliverable } from './undeliverable.js';
import { HttpError } from './http-error.js';
import { deliverComposed, hostImages, newMessageId, renderContent } from './json-send-content.js';
import { rejectUnknownFields } from './reject-unknown-fields.js';
import type { Operation } from './operation.js';
import { requirePlusForImages } from './require-plan.js';
import { validateAddress, validateSubject, validateTextContent } from './validate-json-send.js';

/** Most recipients of one standard send. */
export const MAX_STANDARD_RECIPIENTS = 50;

/**
 * `POST /v1/send/email`: one message to the listed recipients, with hosted
 * images (plus plan) and optional tracking.
 */
export const sendEmailOperation: Operation = {
  scopes: ['sender'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const body = await ctx.json();
    rejectUnknownFields(body, ['to', 'from', 'subject', 'textContent']);
    if (!Array.isArray(body.to) || body.to.length === 0) {
      throw new HttpError(400, 'no_recipients', 'to is required: an array of at least one { "email", "name" }');
    }
    if (body.to.length > MAX_STANDARD_RECIPIENTS) {
      throw new HttpError(
        400,
        'invalid_request',
        `to has ${body.to.length} recipients; at most ${MAX_STANDARD_RECIPIENTS}`,
      );
    }
    const to = body.to.map((entry, i) => validateAddress(entry, `to[${i}]`));
    const from = validateAddress(body.from, 'from');
    const subject = validateSubject(body.subject, 'subject');
    const content = validateTextContent(body.textContent, 'textContent');
    requirePlusForImages(ctx.key, content);

    const urls = hostImages(ctx.state, content, ctx.now);
    const rendered = renderContent(subject, content, urls);
    const messageId = newMessageId();
    const unique = [...new Map(to.map((a) => [a.email.toLowerCase(), a])).values()];
    const raw = await composeMessage({
      from,
      to: unique,
      subject: rendered.subject,
      html: rendered.html,
      text: rendered.text,
      messageId,
      date: ctx.now,
    });
    const id = `msg_${randomUUID()}`;
    const delivered = unique.filter((a) => !isUndeliverable(a.email));
    const failed = unique.filter((a) => isUndeliverable(a.email)).map((a) => a.email);
    ctx.state.mail.record({
      id,
      endpoint: API_PATHS.sendEmail,
      from: from.email,
      recipients: delivered.map((a) => a.email),
      subject: rendered.subject,
      messageId,
      raw,
      text: rendered.text,
      html: rendered.html,
      attachments: [],
      acceptedAt: ctx.now,
      tracking: content.tracking,
      failed,
    });
    for (const recipient of delivered) {
      deliverComposed(
        ctx.state,
        { messageRef: id, to: recipient.email, from: from.email, messageId, raw, rendered },
        ctx.now,
      );
    }
    const answer: SendAcceptedResponse = { id, messageId, recipients: unique.length };
    return { status: 202, body: answer };
  },
};
