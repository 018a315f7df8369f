import { randomUUID } from 'node:crypto';
import { API_PATHS } from '../../protocol/api-paths.js';
import type { GroupSendAcceptedResponse } from '../../protocol/api-types.js';
import { composeMessage } from './compose-message.js';
import { isUndeliverable } from './undeliverable.js';
import type { GroupMember } from '../state/group-store.js';
import { HttpError } from './http-error.js';
import { deliverComposed, hostImages, newMessageId, renderContent } from './json-send-content.js';
import { rejectUnknownFields } from './reject-unknown-fields.js';
import type { Operation } from './operation.js';
import { requirePlusForImages } from './require-plan.js';
import { validateAddress, validateSubject, validateTextContent } from './validate-json-send.js';
import { requireGroup } from './require-group.js';
import { stripBraces } from '../../protocol/placeholder-key.js';

/**
 * `POST /v1/send/group/{groupId}`: one personalised copy per member, with the
 * member's substitutions, an unsubscribe link and List-Unsubscribe headers.
 * Members whose delivery fails are removed from the group.
 */
export const sendGroupOperation: Operation = {
  scopes: ['group.sender'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const [groupId] = ctx.params as [string];
    requireGroup(ctx.state, groupId);
    const body = await ctx.json();
    if ('to' in body)
      throw new HttpError(400, 'invalid_request', 'A group send has no "to": the recipients are the group members');
    rejectUnknownFields(body, ['from', 'subject', 'textContent']);
    const from = validateAddress(body.from, 'from');
    const subject = validateSubject(body.subject, 'subject');
    const content = validateTextContent(body.textContent, 'textContent');
    requirePlusForImages(ctx.key, content);

    const urls = hostImages(ctx.state, content, ctx.now);
    const members = ctx.state.groups.members(groupId)!;
    const id = `msg_${randomUUID()}`;
    const template = renderContent(subject, content, urls);
    const templateId = newMessageId();
    const delivered: string[] = [];
    const failed: string[] = [];
    const copies: {
      member: GroupMember;
      raw: Buffer;
      messageId: string;
      rendered: ReturnType<typeof renderContent>;
    }[] = [];
    for (const member of members) {
      if (isUndeliverable(member.email)) {
        // The spec: a failed delivery removes the address from the group.
        ctx.state.groups.remove(groupId, member.email);
        failed.push(member.email);
        continue;
      }
      const token = ctx.state.groups.issueUnsubscribeToken(groupId, member.email);
      const unsubscribeUrl = `${ctx.state.baseUrl}/unsubscribe/${token}`;
      const values = new Map<string, string>();
      for (const [key, value] of Object.entries(member.substitutions)) values.set(stripBraces(key), value);
      values.set('unsubscribe', unsubscribeUrl);
      for (const [name, url] of urls) values.set(name, url);
      const rendered = renderContent(subject, content, values);
      const messageId = newMessageId();
      const raw = await composeMessage({
        from,
        to: [{ email: member.email, ...(member.name ? { name: member.name } : {}) }],
        subject: rendered.subject,
        html: rendered.html,
        text: rendered.text,
        messageId,
        date: ctx.now,
        headers: {
          'List-Unsubscribe': `<${unsubscribeUrl}>, <mailto:unsubscribe@emulator.eml-api.test?subject=unsubscribe%20${token}>`,
          'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
          'X-Group-Id': groupId,
        },
      });
      copies.push({ member, raw, messageId, rendered });
      delivered.push(member.email);
    }
    const templateRaw = await composeMessage({
      from,
      to: [],
      subject: template.subject,
      html: template.html,
      text: template.text,
      messageId: templateId,
      date: ctx.now,
      headers: { 'X-Group-Id': groupId },
    });
    ctx.state.mail.record({
      id,
      endpoint: API_PATHS.sendGroup(groupId),
      from: from.email,
      recipients: delivered,
      subject: template.subject,
      messageId: templateId,
      raw: templateRaw,
      text: template.text,
      html: template.html,
      attachments: [],
      acceptedAt: ctx.now,
      group: groupId,
      tracking: content.tracking,
      failed,
    });
    for (const copy of copies) {
      deliverComposed(ctx.state, { messageRef: id, to: copy.member.email, from: from.email, ...copy }, ctx.now);
    }
    const answer: GroupSendAcceptedResponse = { id, recipients: delivered.length, failed: failed.length };
    return { status: 202, body: answer };
  },
};
