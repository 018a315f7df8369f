import { simpleParser } from 'mailparser';

/**
 * Parses a message and keeps what a recipient sees, leaving out what differs
 * between any two builds of the same message (MIME boundaries) and what the
 * delivery path itself adds (Received lines).
 */
export async function normalizeMessage(raw: Buffer) {
  const parsed = await simpleParser(raw, { skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true });
  const headerLines = parsed.headerLines
    .filter((h) => !['received', 'x-mailer'].includes(h.key))
    .map((h) => (h.key === 'content-type' ? h.line.replace(/boundary="?[^";\s]+"?/gi, 'boundary=*') : h.line));
  return {
    headerLines,
    subject: parsed.subject,
    from: parsed.from?.value,
    to: [parsed.to ?? []].flat().flatMap((a) => a.value),
    cc: [parsed.cc ?? []].flat().flatMap((a) => a.value),
    bcc: [parsed.bcc ?? []].flat().flatMap((a) => a.value),
    replyTo: parsed.replyTo?.value,
    messageId: parsed.messageId,
    date: parsed.date?.toISOString(),
    text: parsed.text,
    html: parsed.html,
    list: parsed.headers.get('list'),
    attachments: parsed.attachments.map((a) => ({
      filename: a.filename,
      contentType: a.contentType,
      contentDisposition: a.contentDisposition,
      cid: a.cid,
      related: a.related,
      size: a.size,
      checksum: a.checksum,
      method: (a as { method?: string }).method,
    })),
  };
}
