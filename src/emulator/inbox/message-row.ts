import type { DeliveredMessage } from '../state/records.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { html, raw, type SafeHtml } from '../pages/html.js';
import { plural, timeElement } from './display-format.js';

/** A delivery as the inbox feed reports it. */
export interface DeliverySummary {
  /** Change number of the delivery (the feed's cursor). */
  seq: number;
  id: string;
  to: string;
  from: string;
  subject: string;
  /** ISO timestamp from the emulator's clock. */
  deliveredAt: string;
  /** The group of a group send, else null. */
  group: string | null;
  /** Attachments, inline parts excluded. */
  attachments: number;
  /** Path of the message view. */
  url: string;
  /** The list row, escaped HTML (`<tr>…</tr>`). */
  row: string;
}

/** Path of a delivery's message view. */
export function messagePath(id: string): string {
  return `/inbox/messages/${encodeURIComponent(id)}`;
}

/** Attachments a person would call attachments: not the inline parts of an HTML body. */
export function countAttachments(copy: DeliveredMessage): number {
  return copy.attachments.filter((a) => a.disposition !== 'inline').length;
}

/** The group a delivery was sent to, when it came from a group send. */
export function groupOf(state: EmulatorState, copy: DeliveredMessage): string | undefined {
  return state.mail.message(copy.messageRef)?.group;
}

/** One row of the message list; every value is escaped. */
export function messageRow(state: EmulatorState, copy: DeliveredMessage, fresh = false): SafeHtml {
  const group = groupOf(state, copy);
  const attachments = countAttachments(copy);
  const badges = html`${group === undefined ? '' : html`<span class="badge" title="Group send">group: ${group}</span>`}${attachments === 0 ? '' : html`<span class="badge">${plural(attachments, 'attachment')}</span>`}`;
  return html`<tr id="${copy.id}"${fresh ? raw(' class="new"') : ''}>
<td class="addr to">${copy.to}</td>
<td class="addr from">${copy.from}</td>
<td class="subject"><a href="${messagePath(copy.id)}">${copy.subject || '(no subject)'}</a>${badges}</td>
<td class="time">${timeElement(copy.deliveredAt)}</td>
</tr>`;
}

/** The feed's record of one delivery. */
export function deliverySummary(state: EmulatorState, seq: number, copy: DeliveredMessage): DeliverySummary {
  return {
    seq,
    id: copy.id,
    to: copy.to,
    from: copy.from,
    subject: copy.subject,
    deliveredAt: Number.isNaN(copy.deliveredAt.getTime()) ? '' : copy.deliveredAt.toISOString(),
    group: groupOf(state, copy) ?? null,
    attachments: countAttachments(copy),
    url: messagePath(copy.id),
    row: messageRow(state, copy, true).value,
  };
}
