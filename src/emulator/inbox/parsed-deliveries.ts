import type { ParsedMail } from 'mailparser';
import { parseMime } from '../operations/mime-parser.js';
import type { DeliveredMessage } from '../state/records.js';

/** Parsed deliveries kept: the ones someone is looking at (a page, then its frame and files). */
const KEPT = 16;
/** ...and no more of them than this many bytes of message. */
const KEPT_BYTES = 64 * 1024 * 1024;

const recent = new Map<string, { parsed: Promise<ParsedMail>; bytes: number }>();
let keptBytes = 0;

/**
 * A delivery parsed once for the inbox (its HTML with `cid:` images as data:
 * URLs, and its attachments), shared by the requests of its page, frame and
 * downloads. The last few are kept; older ones are parsed again if opened.
 */
export function parsedDelivery(copy: DeliveredMessage): Promise<ParsedMail> {
  let entry = recent.get(copy.id);
  if (entry) {
    // Most recently used last.
    recent.delete(copy.id);
  } else {
    const parsed = parseMime(copy.raw, { skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true });
    entry = { parsed, bytes: copy.raw.length };
    keptBytes += entry.bytes;
    parsed.catch(() => forget(copy.id));
  }
  recent.set(copy.id, entry);
  for (const id of recent.keys()) {
    if (recent.size <= 1 || (recent.size <= KEPT && keptBytes <= KEPT_BYTES)) break;
    forget(id);
  }
  return entry.parsed;
}

function forget(id: string): void {
  const entry = recent.get(id);
  if (!entry) return;
  recent.delete(id);
  keptBytes -= entry.bytes;
}
