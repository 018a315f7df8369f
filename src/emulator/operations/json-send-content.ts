import { randomUUID } from 'node:crypto';
import type { EmulatorState } from '../state/emulator-state.js';
import { escapeHtml } from '../../shared/escape-html.js';
import { renderPlaceholders } from './render-placeholders.js';
import type { ValidTextContent } from './validate-json-send.js';

/** Subject, html and text of one message after placeholders were replaced. */
export interface RenderedContent {
  subject: string;
  html: string | undefined;
  text: string | undefined;
}

/**
 * Hosts the images of a send (resetting the expiry of ones already hosted).
 * @returns placeholder name → hosted image URL
 */
export function hostImages(state: EmulatorState, content: ValidTextContent, now: Date): Map<string, string> {
  const urls = new Map<string, string>();
  for (const image of content.images) {
    const sha = state.images.put(image.data, image.mimeType, now);
    urls.set(image.name, `${state.baseUrl}/images/${sha}`);
  }
  return urls;
}

/**
 * Replaces placeholders in subject, html and text. Values are HTML-escaped in
 * html, so a member's name can never inject markup.
 */
export function renderContent(
  subject: string,
  content: ValidTextContent,
  values: ReadonlyMap<string, string>,
): RenderedContent {
  const htmlValues = new Map<string, string>();
  for (const [k, v] of values) htmlValues.set(k, escapeHtml(v));
  return {
    // A substituted value must not be able to add header lines.
    subject: renderPlaceholders(subject, values).replace(/[\r\n]+/g, ' '),
    html: content.html === undefined ? undefined : renderPlaceholders(content.html, htmlValues),
    text: content.text === undefined ? undefined : renderPlaceholders(content.text, values),
  };
}

/** A new Message-ID in the emulator's own domain. */
export function newMessageId(): string {
  return `<${randomUUID()}@emulator.eml-api.test>`;
}

/** One composed copy of a JSON or group send, for one recipient. */
export interface ComposedCopy {
  /** The accepted message it belongs to. */
  messageRef: string;
  to: string;
  from: string;
  messageId: string;
  raw: Buffer;
  rendered: RenderedContent;
}

/** Puts a composed copy in its recipient's mailbox. */
export function deliverComposed(state: EmulatorState, copy: ComposedCopy, now: Date): void {
  state.mail.deliver({
    id: `dlv_${randomUUID()}`,
    messageRef: copy.messageRef,
    to: copy.to,
    from: copy.from,
    subject: copy.rendered.subject,
    messageId: copy.messageId,
    raw: copy.raw,
    text: copy.rendered.text,
    html: copy.rendered.html,
    attachments: [],
    deliveredAt: now,
  });
}
