import { headerSectionLength, parseHeaderFields, type HeaderField } from '../../protocol/message-format.js';

/**
 * The MIME structure of a stored message, read the way Mailpit reads it (its parser, enmime): part ids, which parts are
 * attachments and which are inline, their names and decoded bytes. Only structure is read here; text and HTML bodies
 * come from the emulator's MIME parser.
 */

/** One leaf part of a message. */
export interface MimePart {
  /** Position in the tree as enmime numbers it: `1`, `1.2`, `0` for a message that is one part. */
  partId: string;
  /** Media type, lower case (`image/png`); `text/plain` when absent. */
  contentType: string;
  /** Parameters of Content-Type, names lower case, RFC 2231 and RFC 2047 decoded. */
  params: Record<string, string>;
  /** `attachment`, `inline` or '' when there is no Content-Disposition. */
  disposition: string;
  /** The file name (Content-Disposition's, else Content-Type's `name`), decoded; '' when none. */
  fileName: string;
  /** Content-ID without angle brackets; '' when none. */
  contentId: string;
  /** Content-Transfer-Encoding, lower case. */
  encoding: string;
  /** Byte range of the encoded body in the message. */
  bodyStart: number;
  bodyEnd: number;
}

/** The parts Mailpit lists, with the counts its list summaries show. */
export interface MimeSummary {
  /** Every leaf part, in tree order. */
  parts: MimePart[];
  /** Parts Mailpit lists as attachments (named or with a Content-ID). */
  attachments: MimePart[];
  /** Parts Mailpit lists as inline (named or with a Content-ID). */
  inline: MimePart[];
  /** Attachments counted as Mailpit's list counts them (named or not). */
  attachmentCount: number;
  /** Inline parts counted the same way. */
  inlineCount: number;
}

/** Deepest nesting read; deeper parts are left out (no real message nests this far). */
const MAX_DEPTH = 32;
/** Most parts read from one message. */
const MAX_PARTS = 2000;

interface Node {
  partId: string;
  part?: MimePart;
  children: Node[];
}

/**
 * Reads the part tree of a message.
 * @example const { attachments } = mimeSummary(raw); // [{ partId: '2', fileName: 'invoice.pdf', ... }]
 */
export function mimeSummary(raw: Buffer): MimeSummary {
  const parts: MimePart[] = [];
  const root = readNode(raw, 0, raw.length, '0', 0, parts, true);
  const breadthFirst: MimePart[] = [];
  const queue: Node[] = [root];
  for (let i = 0; i < queue.length; i++) {
    const node = queue[i]!;
    if (node.part) breadthFirst.push(node.part);
    queue.push(...node.children);
  }
  let attachments: MimePart[];
  let inline: MimePart[];
  if (root.part) {
    // A message that is one part: an attachment only when its body is not text.
    const only = root.part;
    const binary = only.disposition === 'attachment' || !only.contentType.startsWith('text/');
    attachments = binary && only.disposition !== 'inline' ? [only] : [];
    inline = binary && only.disposition === 'inline' ? [only] : [];
  } else {
    attachments = breadthFirst.filter((p) => p.disposition === 'attachment' || p.contentType === OCTET_STREAM);
    const inlines = breadthFirst.filter((p) => p.disposition === 'inline' && p.contentType !== OCTET_STREAM);
    const others = breadthFirst.filter(
      (p) => p.disposition === '' && p.contentType !== OCTET_STREAM && !isBodyType(p.contentType),
    );
    inline = [...inlines, ...others];
    attachments = attachments.filter((p) => !(p.disposition === 'inline' && p.contentType === OCTET_STREAM));
  }
  const named = (p: MimePart) => p.fileName !== '' || p.contentId !== '';
  return {
    parts,
    attachments: attachments.filter(named),
    inline: inline.filter(named),
    attachmentCount: attachments.length,
    inlineCount: inline.length,
  };
}

const OCTET_STREAM = 'application/octet-stream';

function isBodyType(type: string): boolean {
  return type === 'text/plain' || type === 'text/html';
}

function readNode(
  raw: Buffer,
  start: number,
  end: number,
  partId: string,
  depth: number,
  parts: MimePart[],
  isRoot: boolean,
): Node {
  const slice = raw.subarray(start, end);
  const headEnd = headerSectionLength(slice);
  const fields = parseHeaderFields(slice);
  const type = fieldValue(fields, 'content-type');
  const { value: mediaType, params } = parseStructured(type ?? '');
  const contentType = mediaType || 'text/plain';
  const boundary = params.boundary;
  if (contentType.startsWith('multipart/') && boundary && depth < MAX_DEPTH) {
    const node: Node = { partId, children: [] };
    const bodies = splitMultipart(raw, start + headEnd, end, boundary);
    bodies.forEach(([s, e], i) => {
      if (parts.length >= MAX_PARTS) return;
      const childId = isRoot ? String(i + 1) : `${partId}.${i + 1}`;
      node.children.push(readNode(raw, s, e, childId, depth + 1, parts, false));
    });
    return node;
  }
  const disposition = parseStructured(fieldValue(fields, 'content-disposition') ?? '');
  const part: MimePart = {
    partId,
    contentType,
    params,
    disposition: disposition.value,
    fileName: (disposition.params.filename ?? params.name ?? '').trim(),
    contentId: (fieldValue(fields, 'content-id') ?? '').trim().replace(/^<|>$/g, ''),
    encoding: (fieldValue(fields, 'content-transfer-encoding') ?? '').trim().toLowerCase(),
    bodyStart: start + headEnd,
    bodyEnd: end,
  };
  parts.push(part);
  return { partId, part, children: [] };
}

function fieldValue(fields: HeaderField[], name: string): string | undefined {
  return fields.find((f) => f.name.toLowerCase() === name)?.value;
}

/**
 * Byte ranges of the parts of a multipart body: between delimiter lines `--boundary`, up to the closing `--boundary--`
 * (or the end, when it is missing).
 */
function splitMultipart(raw: Buffer, start: number, end: number, boundary: string): [number, number][] {
  const delimiter = Buffer.from(`--${boundary}`, 'latin1');
  const ranges: [number, number][] = [];
  let partStart = -1;
  let at = start;
  while (at < end) {
    const found = raw.indexOf(delimiter, at);
    if (found === -1 || found + delimiter.length > end) break;
    const atLineStart = found === start || raw[found - 1] === 0x0a;
    if (!atLineStart) {
      at = found + delimiter.length;
      continue;
    }
    // The line break before a delimiter belongs to the delimiter.
    let partEnd = found;
    if (raw[partEnd - 1] === 0x0a) partEnd--;
    if (raw[partEnd - 1] === 0x0d) partEnd--;
    if (partStart !== -1) ranges.push([partStart, Math.max(partStart, partEnd)]);
    if (ranges.length >= MAX_PARTS) return ranges;
    const closing = raw[found + delimiter.length] === 0x2d && raw[found + delimiter.length + 1] === 0x2d;
    if (closing) return ranges;
    const lineEnd = raw.indexOf(0x0a, found + delimiter.length);
    if (lineEnd === -1 || lineEnd >= end) return ranges;
    partStart = lineEnd + 1;
    at = partStart;
  }
  if (partStart !== -1) ranges.push([partStart, end]);
  return ranges;
}

/** The decoded bytes of a part (Base64 and quoted-printable undone). */
export function partContent(raw: Buffer, part: MimePart): Buffer {
  const body = raw.subarray(part.bodyStart, part.bodyEnd);
  if (part.encoding === 'base64') return Buffer.from(body.toString('latin1').replace(/[^A-Za-z0-9+/]/g, ''), 'base64');
  if (part.encoding === 'quoted-printable') return decodeQuotedPrintable(body);
  return Buffer.from(body);
}

function decodeQuotedPrintable(body: Buffer): Buffer {
  const out = Buffer.alloc(body.length);
  let n = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c !== 0x3d) {
      out[n++] = c;
      continue;
    }
    const next = body.subarray(i + 1, i + 3).toString('latin1');
    if (/^[0-9A-Fa-f]{2}$/.test(next)) {
      out[n++] = parseInt(next, 16);
      i += 2;
    } else if (next.startsWith('\r\n')) {
      i += 2;
    } else if (next.startsWith('\n')) {
      i += 1;
    } else {
      out[n++] = c;
    }
  }
  return out.subarray(0, n);
}

/**
 * A structured header value (`type/sub; name=value; name*=utf-8''...`): the value lower-cased, and the parameters with
 * RFC 2231 continuations and charsets and RFC 2047 encoded words decoded.
 */
export function parseStructured(header: string): { value: string; params: Record<string, string> } {
  const [head = '', ...rest] = splitParams(header);
  const params: Record<string, string> = {};
  const continued = new Map<string, { index: number; value: string; encoded: boolean }[]>();
  for (const item of rest) {
    const eq = item.indexOf('=');
    if (eq <= 0) continue;
    const key = item.slice(0, eq).trim().toLowerCase();
    let value = item.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) {
      value = value.slice(1, -1).replace(/\\(.)/g, '$1');
    }
    const m = /^([^*]+)(?:\*(\d+))?(\*)?$/.exec(key);
    if (!m) continue;
    const [, name, index, star] = m as unknown as [string, string, string | undefined, string | undefined];
    if (index === undefined && !star) {
      if (!(name in params)) params[name] = decodeWords(value);
      continue;
    }
    const list = continued.get(name) ?? [];
    list.push({ index: Number(index ?? 0), value, encoded: star !== undefined });
    continued.set(name, list);
  }
  for (const [name, pieces] of continued) {
    pieces.sort((a, b) => a.index - b.index);
    let charset = 'utf-8';
    const bytes = pieces.map((piece, i) => {
      let text = piece.value;
      if (piece.encoded && i === 0) {
        const m = /^([^']*)'[^']*'(.*)$/s.exec(text);
        if (m) {
          charset = m[1] || 'utf-8';
          text = m[2]!;
        }
      }
      const utf8 = Buffer.from(text, 'utf8');
      return piece.encoded ? decodePercent(utf8) : utf8;
    });
    params[name] = decodeCharset(Buffer.concat(bytes), charset);
  }
  return { value: head.trim().toLowerCase(), params };
}

/** RFC 2231's `%XX` escapes undone, in one pass over the bytes. */
function decodePercent(bytes: Buffer): Buffer {
  const out = Buffer.alloc(bytes.length);
  let n = 0;
  for (let i = 0; i < bytes.length; i++) {
    const high = hexValue(bytes[i + 1]);
    const low = hexValue(bytes[i + 2]);
    if (bytes[i] === 0x25 && high >= 0 && low >= 0) {
      out[n++] = high * 16 + low;
      i += 2;
    } else out[n++] = bytes[i]!;
  }
  return out.subarray(0, n);
}

function hexValue(byte: number | undefined): number {
  if (byte === undefined) return -1;
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

/** Splits a header value at `;` outside quoted strings. */
function splitParams(value: string): string[] {
  const out: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (c === '\\' && quoted) {
      current += c + (value[i + 1] ?? '');
      i++;
    } else if (c === '"') {
      quoted = !quoted;
      current += c;
    } else if (c === ';' && !quoted) {
      out.push(current);
      current = '';
    } else current += c;
  }
  out.push(current);
  return out;
}

/** Decodes bytes in a named charset; unknown charsets are read as UTF-8. */
export function decodeCharset(bytes: Buffer, charset: string): string {
  try {
    return new TextDecoder(charset.trim().toLowerCase() || 'utf-8').decode(bytes);
  } catch {
    return bytes.toString('utf8');
  }
}

const ENCODED_WORD = /=\?([^?\s]+)\?([BbQq])\?([^?\s]*)\?=/g;

/**
 * Decodes RFC 2047 encoded words in a header value (`=?UTF-8?Q?caf=C3=A9?=`); the white space between two adjacent
 * encoded words goes, as the RFC says.
 * @example decodeWords('=?UTF-8?B?w6lsw6k=?= time') // 'été time'
 */
export function decodeWords(value: string): string {
  if (!value.includes('=?')) return value;
  const joined = value.replace(/(\?=)\s+(?==\?)/g, '$1');
  return joined.replace(ENCODED_WORD, (whole, charset: string, kind: string, text: string) => {
    const lang = charset.indexOf('*');
    const name = lang === -1 ? charset : charset.slice(0, lang);
    let bytes: Buffer;
    if (kind.toUpperCase() === 'B') {
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return whole;
      bytes = Buffer.from(text, 'base64');
    } else {
      bytes = decodeQuotedPrintable(Buffer.from(text.replace(/_/g, ' '), 'latin1'));
    }
    return decodeCharset(bytes, name);
  });
}
