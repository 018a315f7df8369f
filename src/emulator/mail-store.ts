import { randomUUID } from 'node:crypto';
import { removeHeaderFields } from '../eml-headers.js';
import type { DeliveredMessage, EmulatorMessage } from './emulator-records.js';
import type { ParsedEml } from './parse-eml.js';

/**
 * Accepted messages and per-recipient mailboxes of the emulator.
 */
export class MailStore {
  readonly #messages: EmulatorMessage[] = [];
  readonly #mailboxes = new Map<string, DeliveredMessage[]>();

  /**
   * Records an accepted message and delivers one copy per recipient, each
   * without a Bcc header.
   */
  accept(endpoint: string, raw: Buffer, parsed: ParsedEml, now: Date): EmulatorMessage {
    const message: EmulatorMessage = {
      id: `msg_${randomUUID()}`,
      endpoint,
      from: parsed.from,
      recipients: parsed.recipients,
      subject: parsed.subject,
      messageId: parsed.messageId,
      raw,
      text: parsed.text,
      html: parsed.html,
      attachments: parsed.attachments,
      acceptedAt: now,
      failed: [],
    };
    this.#messages.push(message);
    const delivered = removeHeaderFields(raw, 'bcc');
    for (const to of parsed.recipients) {
      this.deliver({
        id: `dlv_${randomUUID()}`,
        messageRef: message.id,
        to,
        from: parsed.from,
        subject: parsed.subject,
        messageId: parsed.messageId,
        raw: delivered,
        text: parsed.text,
        html: parsed.html,
        attachments: parsed.attachments,
        deliveredAt: now,
      });
    }
    return message;
  }

  /** Records a message accepted through a JSON endpoint; its copies are delivered separately. */
  record(message: EmulatorMessage): void {
    this.#messages.push(message);
  }

  /** Puts one copy in a mailbox. */
  deliver(copy: DeliveredMessage): void {
    const key = copy.to.toLowerCase();
    let box = this.#mailboxes.get(key);
    if (!box) {
      box = [];
      this.#mailboxes.set(key, box);
    }
    box.push(copy);
  }

  /** Accepted messages, oldest first (a copy of the list). */
  messages(): EmulatorMessage[] {
    return [...this.#messages];
  }

  /** Copies delivered to one address (case-insensitive), oldest first. */
  mailbox(address: string): DeliveredMessage[] {
    return [...(this.#mailboxes.get(address.trim().toLowerCase()) ?? [])];
  }

  /** Every address that has received mail. */
  addresses(): string[] {
    return [...this.#mailboxes.keys()];
  }

  clear(): void {
    this.#messages.length = 0;
    this.#mailboxes.clear();
  }
}
