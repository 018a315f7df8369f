import { createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { domainToASCII } from 'node:url';
import { EmlApiError } from '../shared/eml-api-error.js';

/** How long the service honours an `Idempotency-Key` (the contract's 24 hours); the relay remembers no longer. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/** Messages whose send outcome the relay remembers at most, by default (about 200 bytes each). */
const DEFAULT_CAPACITY = 10_000;

/** A try whose outcome is unknown, remembered so that the client's retry keeps its identity. */
export interface RememberedTry {
  readonly nonce: string;
  /** Until when it holds, in ms since the epoch. */
  readonly until: number;
}

export interface MessageIdentity {
  readonly idempotencyKey: string;
  /** The Message-ID the relay adds (deterministically), when the message has none; undefined when it has one. */
  readonly addedMessageId: string | undefined;
  /** What {@link MessageIdentities.settle} keys it by. */
  readonly fingerprint: string;
  /** The random part of an identity named by neither Message-ID nor Date ('' otherwise). */
  readonly nonce: string;
}

/**
 * The secret that keys the identities of the messages sent with an API key: derived from the key (HKDF-SHA-256), so
 * that every relay sending with the same key names a message alike (a retry that reaches another relay is the same
 * send), while nobody without the key can compute a name.
 */
export function identitySecret(apiKey: string): Buffer {
  return Buffer.from(hkdfSync('sha256', apiKey, 'nodemailer-eml-api', 'relay message identity v1', 32));
}

interface MessageFacts {
  /** {@link identitySecret} of the API key the message is sent with. */
  readonly secret: Buffer;
  /** `MAIL FROM` ('' for the null sender) and the `RCPT TO` recipients. */
  readonly envelope: { readonly from: string; readonly to: readonly string[] };
  /** SHA-256 (hex) of the message as it would leave the relay, without a Message-ID of the relay's. */
  readonly digest: string;
  readonly hasMessageId: boolean;
  readonly hasDate: boolean;
  /** The From address, whose domain the added Message-ID ends with. */
  readonly from: string | false;
}

/**
 * Names each message the relay sends, so that a client retrying after an ambiguous `451` (the service accepted the
 * upload but its answer was lost) is not delivered twice, while a message sent again on purpose still is.
 *
 * A message with a Message-ID or a Date is named by its envelope and bytes: the same bytes from the same `MAIL FROM`
 * to the same `RCPT TO` are a retry, from whatever relay, within the 24 hours the service honours the key. A message
 * with neither (a static file sent by curl) may be sent again on purpose, so its bytes cannot tell a retry from a
 * repeat: it gets a new identity, unless this relay's last try of the same envelope and bytes ended in a failure of
 * unknown outcome (remembered in memory for 24 hours, up to 10,000 messages, shared by `--processes`).
 *
 * A message without a Message-ID gets one made from its identity, as Postfix's cleanup adds a missing one. Identities
 * are HMACs keyed by the API key's {@link identitySecret}: an unkeyed hash of the envelope and bytes, which hold the
 * hidden recipients, would let a recipient confirm a guessed Bcc from the added Message-ID.
 */
export class MessageIdentities {
  /** Identity fingerprint → the nonce of a try whose outcome is unknown, and until when it holds. */
  readonly #unknown = new Map<string, RememberedTry>();
  readonly #capacity: number;
  readonly #now: () => number;
  readonly #settled: ((fingerprint: string, remembered: RememberedTry | undefined) => void) | undefined;

  /** @param options.settled told every change {@link settle} makes, for the other processes to {@link learn} */
  constructor({
    capacity = DEFAULT_CAPACITY,
    now = Date.now,
    settled,
  }: {
    capacity?: number;
    now?: () => number;
    settled?: (fingerprint: string, remembered: RememberedTry | undefined) => void;
  } = {}) {
    this.#capacity = capacity;
    this.#now = now;
    this.#settled = settled;
  }

  identify(facts: MessageFacts): MessageIdentity {
    const hash = (label: string, ...parts: (string | readonly string[])[]) => mac(facts.secret, label, ...parts);
    const fingerprint = hash('fingerprint', facts.envelope.from, facts.envelope.to, facts.digest);
    const nonce =
      facts.hasMessageId || facts.hasDate ? '' : (this.#remembered(fingerprint) ?? randomBytes(16).toString('hex'));
    const id = hash('identity', fingerprint, nonce);
    return {
      idempotencyKey: `smtp-relay-${id}`,
      addedMessageId: facts.hasMessageId
        ? undefined
        : `<${id.slice(0, 32)}.eml-api-relay@${messageIdDomain(facts.from)}>`,
      fingerprint,
      nonce,
    };
  }

  /**
   * Records how the send of a message named by a nonce ended: a failure of unknown outcome (anything but a permanent
   * refusal) is remembered, so that the client's retry keeps the identity. A send whose client left before its `250`
   * is settled again with a transient failure.
   */
  settle(identity: { readonly fingerprint: string; readonly nonce: string }, failure: unknown): void {
    if (identity.nonce === '') return;
    const known = failure === undefined || (failure instanceof EmlApiError && failure.permanent);
    const remembered = known ? undefined : { nonce: identity.nonce, until: this.#now() + IDEMPOTENCY_WINDOW_MS };
    this.learn(identity.fingerprint, remembered);
    this.#settled?.(identity.fingerprint, remembered);
  }

  /** Takes in what {@link settle} did elsewhere (another process of the group). */
  learn(fingerprint: string, remembered: RememberedTry | undefined): void {
    this.#unknown.delete(fingerprint);
    if (!remembered || remembered.until <= this.#now()) return;
    this.#unknown.set(fingerprint, { nonce: remembered.nonce, until: remembered.until });
    // Map keeps insertion order: the first entry is the oldest.
    if (this.#unknown.size > this.#capacity) this.#unknown.delete(this.#unknown.keys().next().value!);
  }

  /** The tries remembered now, oldest first: what a process that joins the group {@link learn}s. */
  remembered(): [string, RememberedTry][] {
    const now = this.#now();
    return [...this.#unknown].filter(([, entry]) => entry.until > now);
  }

  #remembered(fingerprint: string): string | undefined {
    const entry = this.#unknown.get(fingerprint);
    if (entry === undefined) return undefined;
    if (entry.until > this.#now()) return entry.nonce;
    this.#unknown.delete(fingerprint);
    return undefined;
  }
}

/** HMAC-SHA-256 (hex) of the parts, each length-prefixed so that no two lists of parts hash alike. */
function mac(secret: Buffer, label: string, ...parts: (string | readonly string[])[]): string {
  const h = createHmac('sha256', secret).update(label);
  for (const part of parts.flat()) h.update(`\0${Buffer.byteLength(part)}:${part}`);
  return h.digest('hex');
}

/** The domain of the From address in ASCII (`xn--` for an IDN), or `localhost` when there is none. */
function messageIdDomain(from: string | false): string {
  const domain = from === false ? '' : from.slice(from.lastIndexOf('@') + 1);
  if (domain.startsWith('[') && domain.endsWith(']')) return domain;
  const ascii = domain === '' ? '' : domainToASCII(domain.toLowerCase());
  return /^[a-z0-9.-]+$/.test(ascii) ? ascii : 'localhost';
}
