import { API_PATHS } from '../../protocol/api-paths.js';
import type { SendAcceptedResponse } from '../../protocol/api-types.js';
import { decodeBase64Strict } from './decode-base64.js';
import { HttpError } from './http-error.js';
import { newMessageId } from './json-send-content.js';
import { parseEml } from './parse-eml.js';
import { rejectUnknownFields } from './reject-unknown-fields.js';
import type { Operation } from './operation.js';

/**
 * `POST /v1/send/eml`: decodes the Base64 message, parses it, takes the
 * recipients from To, Cc and Bcc and delivers one copy to each, without Bcc.
 */
export const sendEmlOperation: Operation = {
  scopes: ['sender'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const body = await ctx.json();
    rejectUnknownFields(body, ['mail']);
    if (body.mail === undefined) {
      throw new HttpError(400, 'invalid_request', 'mail is required: the complete EML message, Base64-encoded');
    }
    if (typeof body.mail !== 'string') {
      throw new HttpError(
        400,
        'invalid_request',
        `mail must be a string of Base64 text, got ${body.mail === null ? 'null' : typeof body.mail}`,
      );
    }
    let raw = decodeBase64Strict(body.mail, 'mail');
    const parsed = await parseEml(raw);
    if (!parsed.messageId) {
      // Like a real sending service, give a message without a Message-ID one.
      parsed.messageId = newMessageId();
      raw = Buffer.concat([Buffer.from(`Message-ID: ${parsed.messageId}\r\n`), raw]);
    }
    const message = ctx.state.mail.accept(API_PATHS.sendEml, raw, parsed, ctx.now);
    const answer: SendAcceptedResponse = {
      id: message.id,
      messageId: message.messageId,
      recipients: message.recipients.length,
    };
    return { status: 202, body: answer };
  },
};
