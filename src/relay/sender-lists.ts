import { domainToASCII } from 'node:url';
import { isValidAddress, MAX_ADDRESS_INPUT_LENGTH } from '../protocol/message-format.js';
import { configError } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { asciiLowerCase, identityAddresses, unreadCharset, type RelayHeaderField } from './relay-headers.js';

/** Allows an empty `MAIL FROM` (bounces, vacation replies). */
const NULL_SENDER = '<>';

const ENTRY_RULE =
  'expected an address (billing@shop.example), a domain (*@shop.example), its subdomains (*@*.shop.example) or <> (the null sender)';

/**
 * The addresses and domains one login may send as (Postfix's `smtpd_sender_login_maps`): `billing@shop.example`,
 * `*@shop.example` (not its subdomains), `*@*.shop.example` (not the domain itself), and `<>`. Local parts compare
 * ASCII case-folded without needless quotes, domains in their IDNA ASCII form.
 */
export class SenderList {
  readonly entries: readonly string[];
  readonly nullSender: boolean;
  readonly #addresses = new Set<string>();
  readonly #domains = new Set<string>();
  readonly #parents = new Set<string>();

  /** @throws {EmlApiError} `ECONFIG` naming the option (e.g. `users[0].senders`) and the entry of no known form */
  constructor(entries: unknown, option: string) {
    if (!Array.isArray(entries) || entries.some((entry) => typeof entry !== 'string')) {
      throw configError(option, `expected an array of strings: ${ENTRY_RULE}`);
    }
    if (entries.length === 0)
      throw configError(option, 'no senders: give one at least, or leave the list out (any sender)');
    let nullSender = false;
    for (const raw of entries as string[]) {
      const entry = raw.trim();
      if (entry === NULL_SENDER) {
        nullSender = true;
        continue;
      }
      const subdomains = entry.startsWith('*@*.');
      const written = entry.startsWith('*@') ? entry.slice(subdomains ? 4 : 2) : undefined;
      const domain = written === undefined ? undefined : asciiDomain(written);
      if (domain !== undefined && isValidAddress(`x@${written}`) && HOST_NAME.test(domain)) {
        (subdomains ? this.#parents : this.#domains).add(domain);
        continue;
      }
      // Never the address `*@...`, which would match no one.
      const key = written === undefined && isValidAddress(entry) ? addressKey(entry) : undefined;
      const host = key?.slice(key.lastIndexOf('@') + 1) ?? '';
      if (key === undefined || !(HOST_NAME.test(host) || host.startsWith('[')))
        throw configError(option, `${JSON.stringify(raw)}: ${ENTRY_RULE}`);
      this.#addresses.add(key);
    }
    this.nullSender = nullSender;
    this.entries = Object.freeze((entries as string[]).map((entry) => entry.trim()));
  }

  /** Whether the login may send as this address; `''` is the null sender. */
  owns(address: string): boolean {
    if (address === '') return this.nullSender;
    // Each parent domain is hashed in full, so length is bounded here; the service takes no longer address.
    if (address.length > MAX_ADDRESS_INPUT_LENGTH) return false;
    const key = addressKey(address);
    if (key === undefined) return false;
    const domain = key.slice(key.lastIndexOf('@') + 1);
    if (this.#addresses.has(key) || this.#domains.has(domain)) return true;
    if (!HOST_NAME.test(domain)) return false;
    for (let dot = domain.indexOf('.'); dot !== -1; dot = domain.indexOf('.', dot + 1)) {
      if (this.#parents.has(domain.slice(dot + 1))) return true;
    }
    return false;
  }
}

const HOST_NAME = /^[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*$/;

/** Unquoted where the quotes change nothing (RFC 5321 4.1.2); undefined without a domain. */
function addressKey(address: string): string | undefined {
  const at = address.lastIndexOf('@');
  if (at <= 0) return undefined;
  const domain = asciiDomain(address.slice(at + 1));
  return domain === undefined ? undefined : `${asciiLowerCase(localPart(address.slice(0, at)))}@${domain}`;
}

const DOT_ATOM = /^[\w!#$%&'*+/=?^`{|}~\u0080-\uffff-]+(?:\.[\w!#$%&'*+/=?^`{|}~\u0080-\uffff-]+)*$/;

function localPart(written: string): string {
  if (written.length < 2 || !written.startsWith('"') || !written.endsWith('"')) return written;
  const content = written.slice(1, -1).replace(/\\(.)/g, '$1');
  return DOT_ATOM.test(content) ? content : `"${content.replace(/["\\]/g, '\\$&')}"`;
}

function asciiDomain(domain: string): string | undefined {
  if (domain.startsWith('[')) return asciiLowerCase(domain);
  // domainToASCII reads a URL host: it stops at / ? # \ and decodes %.
  if (/[%/?#\\]/.test(domain)) return undefined;
  const ascii = domainToASCII(domain);
  if (/^[\d.]+$/.test(ascii) && ascii !== domain) return undefined;
  return ascii === '' ? undefined : ascii;
}

export type SenderRefusalReason = 'mail_from' | 'null_sender' | 'from' | 'sender';

/** What a sender refusal refused, and the address as the client wrote it ('' for the null sender). */
export interface SenderRefusal {
  reason: SenderRefusalReason;
  address: string;
}

// Kept beside the error, not in a subclass: EmlApiError's instanceof matches every copy of the class, subclasses included.
const refusals = new WeakMap<EmlApiError, SenderRefusal>();

/** The sender refusal an error stands for (`553 5.7.1`), or undefined. */
export function senderRefusalOf(err: unknown): SenderRefusal | undefined {
  return err instanceof EmlApiError ? refusals.get(err) : undefined;
}

function senderRefusal(reason: SenderRefusalReason, address: string, text: string): EmlApiError {
  const err = new EmlApiError('EENVELOPE', text, {
    command: reason === 'mail_from' || reason === 'null_sender' ? 'MAIL FROM' : 'DATA',
    permanent: true,
  });
  refusals.set(err, { reason, address });
  return err;
}

function whose(login: string | undefined): string {
  return login === undefined ? 'the senders allowed without AUTH' : `login ${login}`;
}

/** No control, format or space character, at most 254 characters. */
function shownAddress(address: string): string {
  return Array.from(address.replace(/[\p{C}\s]/gu, '?'))
    .slice(0, 254)
    .join('');
}

/** Why `MAIL FROM` (as the client wrote it, '' for `<>`) is refused for the login's sender list, or undefined. */
export function mailFromRefusal(
  address: string,
  list: SenderList | undefined,
  login: string | undefined,
): EmlApiError | undefined {
  if (!list || list.owns(address)) return undefined;
  if (address === '') {
    return senderRefusal(
      'null_sender',
      '',
      `<>: Sender address rejected: ${whose(login)} may not send with an empty MAIL FROM`,
    );
  }
  const shown = shownAddress(address);
  return senderRefusal('mail_from', address, `<${shown}>: Sender address rejected: not owned by ${whose(login)}`);
}

/**
 * Why the From or Sender fields are refused for the login's sender list, or undefined: every address any reader finds
 * in them, and every address-shaped text a mail program shows, must be the login's. Without mailparser, an encoded
 * word in a charset the relay cannot decode is refused: it could stand for any address.
 */
export async function headerSenderRefusal(
  froms: readonly RelayHeaderField[],
  senders: readonly RelayHeaderField[],
  list: SenderList | undefined,
  login: string | undefined,
): Promise<EmlApiError | undefined> {
  if (!list) return undefined;
  for (const [reason, fields] of [
    ['from', froms],
    ['sender', senders],
  ] as const) {
    for (const field of fields) {
      const found = await identityAddresses(field.value);
      const foreign = found.find((address) => !list.owns(address));
      if (foreign === undefined) {
        const charset = unreadCharset(field.value);
        if (charset === undefined) continue;
        return senderRefusal(
          reason,
          field.value,
          `<${shownAddress(field.value)}>: Sender address rejected: the ${field.name} header has an encoded word in the charset ${shownAddress(charset)}, which the relay reads only with mailparser installed, and which may name an address not owned by ${whose(login)}; write it in UTF-8`,
        );
      }
      const shown = shownAddress(foreign);
      return senderRefusal(
        reason,
        foreign,
        `<${shown}>: Sender address rejected: the ${field.name} header names an address not owned by ${whose(login)}`,
      );
    }
  }
  return undefined;
}

/** The entries of a comma-separated sender list; a comma inside a quoted local part is no separator. */
export function splitSenders(text: string): string[] {
  const entries: string[] = [];
  let quoted = false;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\' && quoted) i++;
    else if (c === '"') quoted = !quoted;
    else if (c === ',' && !quoted) {
      entries.push(text.slice(start, i));
      start = i + 1;
    }
  }
  entries.push(text.slice(start));
  return entries.map((entry) => entry.trim()).filter(Boolean);
}

/**
 * Reads a file of API keys' sender lists: `key:<fingerprint>:senders` per line, blank lines and `#` comments ignored.
 * @throws {EmlApiError} `ECONFIG` naming the file and line
 */
export function parseKeySendersFile(text: string, source: string): Record<string, string[]> {
  const lists: Record<string, string[]> = {};
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `${source} line ${i + 1}`;
    const match = /^(key:[0-9a-f]{24})\s*:(.*)$/.exec(line);
    if (!match) throw configError(where, 'expected key:<24 hex digits of the key login>:senders');
    const [, login = '', senders = ''] = match;
    if (Object.hasOwn(lists, login)) throw configError(where, `${login} is listed twice`);
    const list = splitSenders(senders);
    if (list.length === 0) throw configError(where, `no senders after ${login}:`);
    new SenderList(list, `${where}, the senders`);
    lists[login] = list;
  });
  return lists;
}
