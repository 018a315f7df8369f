import { randomUUID } from 'node:crypto';
import { removeHeaderFields } from '../../protocol/header-fields.js';
import type { DeliveredMessage, EmulatorMessage, ReadMessage } from './records.js';

/**
 * One change of the delivered mail, numbered: `seq` grows by one per change,
 * survives {@link MailStore.clear} and is never reused, so a reader that
 * remembers the last `seq` it saw can ask for what came after it.
 */
export type MailChange = DeliveryChange | { kind: 'reset'; seq: number };

/** A delivery, numbered as a {@link MailChange}. */
export interface DeliveryChange {
  kind: 'delivery';
  seq: number;
  copy: DeliveredMessage;
}

/**
 * Accepted messages and per-recipient mailboxes of the emulator, plus every
 * delivery in order for the web inbox.
 */
export class MailStore {
  readonly #messages: EmulatorMessage[] = [];
  readonly #messagesById = new Map<string, EmulatorMessage>();
  readonly #mailboxes = new Map<string, DeliveredMessage[]>();
  /** Every delivery, oldest first, with its change number. */
  readonly #deliveries: DeliveryChange[] = [];
  readonly #deliveriesById = new Map<string, DeliveredMessage>();
  readonly #listeners = new Set<(change: MailChange) => void>();
  #seq = 0;
  /** Change number of the last {@link clear}; 0 before any. */
  #clearedAt = 0;

  /**
   * Records an accepted message and delivers one copy per recipient, each
   * without a Bcc header.
   */
  accept(endpoint: string, raw: Buffer, parsed: ReadMessage, now: Date): EmulatorMessage {
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
    this.record(message);
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
    this.#messagesById.set(message.id, message);
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
    const change: DeliveryChange = { kind: 'delivery', seq: ++this.#seq, copy };
    this.#deliveries.push(change);
    this.#deliveriesById.set(copy.id, copy);
    this.#emit(change);
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

  /** An accepted message by its id. */
  message(id: string): EmulatorMessage | undefined {
    return this.#messagesById.get(id);
  }

  /** A delivered copy by its id (`dlv_…`). */
  delivery(id: string): DeliveredMessage | undefined {
    return this.#deliveriesById.get(id);
  }

  /** How many copies have been delivered since the last clear. */
  deliveryCount(): number {
    return this.#deliveries.length;
  }

  /** The newest `limit` deliveries, newest first. */
  latestDeliveries(limit: number): DeliveredMessage[] {
    return this.#deliveries
      .slice(-limit)
      .reverse()
      .map((d) => d.copy);
  }

  /** Number of the latest change: a cursor for {@link changesSince}. */
  cursor(): number {
    return this.#seq;
  }

  /**
   * The changes after cursor `since`, oldest first, at most `limit`
   * deliveries. A reader whose cursor is from before the last clear (or from
   * another run, when larger than the current cursor), or that is more than
   * `limit` deliveries behind, gets a reset and then the newest `limit`
   * deliveries: the list it shows is rebuilt rather than replayed in full.
   */
  changesSince(since: number, limit = Infinity): MailChange[] {
    let first = this.#deliveries.length;
    const stale = since < this.#clearedAt || since > this.#seq;
    if (!stale) {
      while (first > 0 && this.#deliveries[first - 1]!.seq > since) first--;
      if (this.#deliveries.length - first <= limit) return this.#deliveries.slice(first);
    }
    const kept = this.#deliveries.slice(Math.max(0, this.#deliveries.length - limit));
    const resetSeq = kept.length > 0 ? kept[0]!.seq - 1 : this.#seq;
    return [{ kind: 'reset', seq: stale ? this.#clearedAt : resetSeq }, ...kept];
  }

  /** Calls `listener` with every change from now on. @returns a function that stops it */
  subscribe(listener: (change: MailChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  clear(): void {
    this.#messages.length = 0;
    this.#messagesById.clear();
    this.#mailboxes.clear();
    this.#deliveries.length = 0;
    this.#deliveriesById.clear();
    this.#clearedAt = ++this.#seq;
    this.#emit({ kind: 'reset', seq: this.#clearedAt });
  }

  #emit(change: MailChange): void {
    for (const listener of [...this.#listeners]) listener(change);
  }
}
