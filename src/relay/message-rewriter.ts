import { Transform, type TransformCallback } from 'node:stream';
import { createHash, type Hash } from 'node:crypto';
import { HeaderSectionFinder, MAX_HEADER_SECTION } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';

const CR = 0x0d;
const LF = 0x0a;
const CRLF = Buffer.from('\r\n');

/**
 * The message as it arrives from DATA, passed through with every bare line end made CRLF, its header section replaced
 * by what `rewriteHead` makes of it, and hashed (SHA-256) as it leaves; only the header section is held in memory.
 *
 * A bare LF or CR becomes CRLF, as Postfix's `smtpd_forbid_bare_newline = normalize` treats bare LF: `\n.\n` and its
 * kin never reach the service, where a later hop could read them as the end of the message (SMTP smuggling). Bare CR
 * too, where Postfix keeps it: MIME parsers read one in a header field each their own way.
 */
export class MessageRewriter extends Transform {
  readonly #rewriteHead: (head: Buffer) => Buffer | Promise<Buffer>;
  readonly #tooLarge: () => Error | undefined;
  readonly #hash: Hash = createHash('sha256');
  readonly #head = new HeaderSectionFinder();
  /** Bytes read so far with their line ends made CRLF, before the header section is rewritten. */
  #normalised = 0;
  #headDone = false;
  /** The last chunk ended with a CR: whether it is bare depends on the next byte. */
  #pendingCr = false;
  failure: Error | undefined;

  /**
   * @param rewriteHead gets the header section (with its blank line) and returns the one to send, or a promise of it;
   *   what it throws fails the stream
   * @param tooLarge checked on every chunk: an error to fail with once the message is over the size limit
   */
  constructor(rewriteHead: (head: Buffer) => Buffer | Promise<Buffer>, tooLarge: () => Error | undefined) {
    super();
    this.#rewriteHead = rewriteHead;
    this.#tooLarge = tooLarge;
  }

  /** The size read so far with every line end CRLF, before the relay's Bcc or Message-ID: what SIZE measures. */
  get size(): number {
    return this.#normalised;
  }

  digest(): string {
    return this.#hash.copy().digest('hex');
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const normalised = this.#crlf(chunk);
    this.#normalised += normalised.length;
    this.#step(normalised, (err) => callback(this.#fail(err)));
  }

  override _flush(callback: TransformCallback): void {
    const last = this.#pendingCr ? CRLF : undefined;
    this.#pendingCr = false;
    const finish = () => {
      const oversize = this.#tooLarge();
      if (oversize || this.#headDone) return callback(this.#fail(oversize));
      // A message without a blank line is all header.
      this.#finishHead(this.#head.size, (err) => callback(this.#fail(err)));
    };
    if (!last) return finish();
    this.#normalised += last.length;
    this.#step(last, (err) => (err ? callback(this.#fail(err)) : finish()));
  }

  /** A CR at the end of the chunk waits for the next byte; a chunk without a bare line end is not copied. */
  #crlf(chunk: Buffer): Buffer {
    const parts: Buffer[] = [];
    let from = 0;
    let at = 0;
    if (this.#pendingCr) {
      this.#pendingCr = false;
      parts.push(CRLF);
      // The held CR and this LF are one CRLF; without the LF the CR was bare, and is a CRLF all the same.
      if (chunk[0] === LF) from = at = 1;
    }
    let cr = chunk.indexOf(CR, at);
    let lf = chunk.indexOf(LF, at);
    while (cr !== -1 || lf !== -1) {
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        if (cr === chunk.length - 1) {
          parts.push(chunk.subarray(from, cr));
          this.#pendingCr = true;
          from = chunk.length;
          break;
        }
        if (chunk[cr + 1] !== LF) {
          parts.push(chunk.subarray(from, cr), CRLF);
          from = cr + 1;
        } else {
          // A CRLF: the LF found next is this one.
          lf = chunk.indexOf(LF, cr + 2);
        }
        cr = chunk.indexOf(CR, cr + 1);
      } else {
        parts.push(chunk.subarray(from, lf), CRLF);
        from = lf + 1;
        lf = chunk.indexOf(LF, lf + 1);
      }
    }
    if (parts.length === 0) return chunk;
    parts.push(chunk.subarray(from));
    return Buffer.concat(parts);
  }

  #fail(err: Error | null | undefined): Error | undefined {
    if (err) this.failure ??= err;
    return err ?? undefined;
  }

  #step(chunk: Buffer, callback: (err?: Error) => void): void {
    const oversize = this.#tooLarge();
    if (oversize) return callback(oversize);
    if (this.#headDone) {
      this.#emit(chunk);
      return callback();
    }
    const end = this.#head.push(chunk);
    if (end !== undefined) return this.#finishHead(end, callback);
    if (this.#head.size > MAX_HEADER_SECTION) {
      return callback(
        new EmlApiError('EMESSAGE', `The header section is longer than ${MAX_HEADER_SECTION} bytes`, {
          permanent: true,
        }),
      );
    }
    callback();
  }

  /** Rewrites the head (the first `end` bytes held) and lets the rest through, then calls back with the rewrite's error. */
  #finishHead(end: number, callback: (err?: Error) => void): void {
    const held = this.#head.take();
    this.#headDone = true;
    const done = (head: Buffer) => {
      // The client left while the head was being read.
      if (this.destroyed) return;
      this.#emit(head);
      this.#emit(held.subarray(end));
      callback();
    };
    let rewritten: Buffer | Promise<Buffer>;
    try {
      rewritten = this.#rewriteHead(held.subarray(0, end));
    } catch (err) {
      return callback(err as Error);
    }
    if (Buffer.isBuffer(rewritten)) return done(rewritten);
    rewritten.then(done, (err: unknown) => callback(err as Error));
  }

  #emit(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.#hash.update(bytes);
    this.push(bytes);
  }
}
