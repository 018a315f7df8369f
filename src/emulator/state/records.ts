/**
 * Summary of one attachment of a message the emulator accepted.
 * @example const [pdf]: EmulatorAttachment[] = emu.mailbox('ann@example.net')[0]!.attachments; // { filename: 'invoice.pdf', contentType: 'application/pdf', ... }
 */
export interface EmulatorAttachment {
  filename: string | undefined;
  contentType: string;
  /** Decoded size in bytes. */
  size: number;
  /** Content-ID without angle brackets, for inline parts. */
  cid: string | undefined;
  /** `attachment` or `inline`. */
  disposition: string | undefined;
}

/**
 * A message the emulator accepted, as it was uploaded.
 * @example
 * const [msg] = emu.messages();
 * expect(msg.recipients).toEqual(['ann@example.test']);
 */
export interface EmulatorMessage {
  /** The id the emulator answered with. */
  id: string;
  /** Endpoint the message came through, e.g. `/v1/send/eml`. */
  endpoint: string;
  /** Address of the From header. */
  from: string;
  /** Every recipient the message was delivered to (To, Cc and Bcc for EML), lower-cased duplicates removed. */
  recipients: string[];
  /** Decoded subject. */
  subject: string;
  /** Message-ID header with angle brackets. */
  messageId: string;
  /** The message as uploaded (for EML: with its Bcc header). */
  raw: Buffer;
  /** Plain-text body, when there is one. */
  text: string | undefined;
  /** HTML body, when there is one. */
  html: string | undefined;
  /** Attachments and inline parts. */
  attachments: EmulatorAttachment[];
  /** When the emulator accepted it (from the `now` clock). */
  acceptedAt: Date;
  /** The group a group send went to. */
  group?: string;
  /** Whether tracking was requested (JSON sends). */
  tracking?: boolean;
  /** Recipients whose delivery failed (undeliverable domains ending in `.invalid`). */
  failed: string[];
}

/**
 * One copy of a message delivered to one recipient's mailbox. The Bcc header is removed from `raw`, as a real delivery
 * would.
 * @example
 * const [copy] = emu.mailbox('ann@example.test');
 * expect(copy.raw.toString()).not.toMatch(/^Bcc:/im);
 */
export interface DeliveredMessage {
  /** Id of this delivery. */
  id: string;
  /** Id of the accepted message it is a copy of ({@link EmulatorMessage.id}). */
  messageRef: string;
  /** The mailbox address. */
  to: string;
  from: string;
  subject: string;
  messageId: string;
  /** The delivered bytes, without a Bcc header. */
  raw: Buffer;
  text: string | undefined;
  html: string | undefined;
  attachments: EmulatorAttachment[];
  deliveredAt: Date;
}

/**
 * A group member as `emu.members(groupId)` returns it.
 * @example const [ann] = emu.members('newsletter'); // { email: 'ann@x.test', name: 'Ann', substitutions: { '{{first_name}}': 'Ann' } }
 */
export interface EmulatorMember {
  email: string;
  name: string | undefined;
  /** Keys written `{{key}}`. */
  substitutions: Record<string, string>;
}

/** What the mail store needs of an uploaded message to deliver it: the parser's reading of it. */
export interface ReadMessage {
  from: string;
  /** To, Cc and Bcc addresses in order, duplicates (case-insensitive) removed. */
  recipients: string[];
  subject: string;
  messageId: string;
  text: string | undefined;
  html: string | undefined;
  attachments: EmulatorAttachment[];
}
