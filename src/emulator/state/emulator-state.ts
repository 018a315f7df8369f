import { createHash, timingSafeEqual, randomBytes } from 'node:crypto';
import type { ApiPlan, ApiScope, ApiImage } from '../../protocol/api-types.js';
import { MailStore } from './mail-store.js';

/** Everything the emulator remembers; handlers read and change it. */
export class EmulatorState {
  readonly keys = new ApiKeyStore();
  readonly mail: MailStore;
  readonly idempotency = new IdempotencyCache();
  readonly groups = new GroupStore();
  readonly images = new ImageStore();
  /** Public base URL for links in delivered mail (unsubscribe, hosted images); set once listening. */
  baseUrl = '';
  /** Names this run of the emulator, so that a page from an earlier run knows to start over. */
  readonly runId = randomBytes(9).toString('base64url');
  /** Where messages, groups and keys are kept across restarts, when anywhere. */
  dataDir: string | undefined;
  /** Mail taken in over SMTP. */
  readonly smtpStats = { accepted: 0, acceptedSize: 0, rejected: 0 };
  readonly #clock: () => Date;

  /**
   * @param clock the emulator's clock: timestamps, image expiry, idempotency windows
   * @param groups the groups that exist from the start
   * @param maxMessages most messages the inbox keeps
   */
  constructor(clock: () => Date, groups: readonly string[], maxMessages?: number) {
    this.#clock = clock;
    this.mail = new MailStore(maxMessages);
    for (const group of groups) this.groups.create(group);
  }

  now(): Date {
    return this.#clock();
  }

  /** Forgets messages, mailboxes, members, images and idempotency keys; groups and keys stay. */
  reset(): void {
    this.mail.clear();
    this.groups.clearMembers();
    this.images.clear();
    this.idempotency.clear();
  }
}

/** A key the emulator knows, identified by its digest only. */
export interface KnownKey {
  /** Short, non-secret label for logs and records (first 4 characters and a hash). */
  label: string;
  scopes: ReadonlySet<ApiScope>;
  plan: ApiPlan;
  /** The account the key belongs to: the scope of its idempotency keys. */
  account: string;
}

interface StoredKey extends KnownKey {
  digest: Buffer;
}

/** The API keys the emulator accepts, compared by SHA-256 digest with `timingSafeEqual` against every stored key, so timing tells nothing. */
export class ApiKeyStore {
  readonly #keys: StoredKey[] = [];

  add(key: string, scopes: readonly ApiScope[], plan: ApiPlan, account: string): void {
    const digest = sha256(key);
    this.#keys.push({
      digest,
      scopes: new Set(scopes),
      plan,
      account,
      label: `${key.slice(0, 4)}…${digest.toString('hex').slice(0, 8)}`,
    });
  }

  /** The stored key equal to `presented`. */
  find(presented: string): KnownKey | undefined {
    const digest = sha256(presented);
    let found: StoredKey | undefined;
    for (const stored of this.#keys) {
      if (timingSafeEqual(stored.digest, digest) && !found) found = stored;
    }
    return found;
  }
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/** A member of a group, as the emulator keeps it. */
export interface GroupMember {
  /** Address as last added (case kept). */
  email: string;
  name: string | undefined;
  /** Substitutions keyed `{{key}}`. */
  substitutions: Record<string, string>;
  /** When the member was first added. */
  addedAt: Date;
}

function ticketKey(ticket: UnsubscribeTicket): string {
  return `${ticket.groupId}\n${ticket.email.toLowerCase()}`;
}

/** An unsubscribe link's target. */
export interface UnsubscribeTicket {
  groupId: string;
  email: string;
}

/** Groups and their members, keyed by lower-cased address, and the unsubscribe tokens handed out in group emails. */
export class GroupStore {
  readonly #groups = new Map<string, Map<string, GroupMember>>();
  readonly #tickets = new Map<string, UnsubscribeTicket>();
  /** The token of each member with one, by {@link ticketKey}. */
  readonly #tokenOf = new Map<string, string>();
  /** Called after every change (the data directory saves them). */
  onChange: () => void = () => {};

  /** Creates a group (groups are made out of band, never through the API). No-op when it exists. */
  create(groupId: string): void {
    if (this.#groups.has(groupId)) return;
    this.#groups.set(groupId, new Map());
    this.onChange();
  }

  has(groupId: string): boolean {
    return this.#groups.has(groupId);
  }

  ids(): string[] {
    return [...this.#groups.keys()];
  }

  /** Members of a group in the order they were first added; undefined for an unknown group. */
  members(groupId: string): GroupMember[] | undefined {
    const group = this.#groups.get(groupId);
    return group ? [...group.values()] : undefined;
  }

  /** Adds a member, or updates name and substitutions of an existing one. */
  upsert(groupId: string, member: Omit<GroupMember, 'addedAt'>, now: Date): void {
    const group = this.#require(groupId);
    const key = member.email.toLowerCase();
    const existing = group.get(key);
    group.set(key, { ...member, addedAt: existing?.addedAt ?? now });
    this.onChange();
  }

  /** Puts back a member as it was saved (its `addedAt` kept). */
  restoreMember(groupId: string, member: GroupMember): void {
    this.create(groupId);
    this.#require(groupId).set(member.email.toLowerCase(), member);
  }

  /** Removes a member. @returns whether it was a member */
  remove(groupId: string, email: string): boolean {
    const removed = this.#require(groupId).delete(email.toLowerCase());
    if (removed) this.onChange();
    return removed;
  }

  isMember(groupId: string, email: string): boolean {
    return this.#require(groupId).has(email.toLowerCase());
  }

  /** The unsubscribe token of a member of a group: one per member until used, so tokens stay as many as members. */
  issueUnsubscribeToken(groupId: string, email: string): string {
    const key = ticketKey({ groupId, email });
    const existing = this.#tokenOf.get(key);
    if (existing !== undefined) return existing;
    const token = randomBytes(24).toString('base64url');
    this.#tickets.set(token, { groupId, email });
    this.#tokenOf.set(key, token);
    this.onChange();
    return token;
  }

  /** Every unused unsubscribe token and its ticket. */
  tickets(): [string, UnsubscribeTicket][] {
    return [...this.#tickets];
  }

  /** Puts back a saved unsubscribe token. */
  restoreTicket(token: string, ticket: UnsubscribeTicket): void {
    this.#tickets.set(token, ticket);
    this.#tokenOf.set(ticketKey(ticket), token);
  }

  /** The ticket of a token, if it is known and unused. */
  ticket(token: string): UnsubscribeTicket | undefined {
    return this.#tickets.get(token);
  }

  /** Uses a token: removes its member from its group and retires the token. @returns undefined when unknown or used */
  redeem(token: string): UnsubscribeTicket | undefined {
    const ticket = this.#tickets.get(token);
    if (!ticket) return undefined;
    const key = ticketKey(ticket);
    this.#tickets.delete(token);
    this.#tokenOf.delete(key);
    this.#groups.get(ticket.groupId)?.delete(ticket.email.toLowerCase());
    this.onChange();
    return ticket;
  }

  /** Empties every group (groups stay) and forgets all tokens. */
  clearMembers(): void {
    for (const group of this.#groups.values()) group.clear();
    this.#tickets.clear();
    this.#tokenOf.clear();
    this.onChange();
  }

  #require(groupId: string): Map<string, GroupMember> {
    const group = this.#groups.get(groupId);
    if (!group) throw new Error(`unknown group ${groupId}`);
    return group;
  }
}

/** A stored answer, replayed for a repeated `Idempotency-Key`. */
export interface StoredAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

interface Entry {
  answer: Promise<StoredAnswer>;
  /** Digest of the request body the key was first used with. */
  fingerprint: string;
  storedAt: number;
}

/** How long a key is remembered: 24 hours. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/**
 * Remembers the answer of each `Idempotency-Key` (per account) for 24 hours, so a retried send gets the
 * first answer and nothing is delivered twice; a repeat waits for a first still in progress. Only successes are kept,
 * since a failed request may be retried for real; a key reused with another body is a conflict, never a replay.
 */
export class IdempotencyCache {
  readonly #entries = new Map<string, Entry>();

  /**
   * Runs `handle` once per scope key within the window; repeats with the same `fingerprint` get its answer.
   * @returns the answer and whether it was replayed, or `conflict` when the key was used with another body
   */
  async run(
    scopeKey: string,
    fingerprint: string,
    nowMs: number,
    handle: () => Promise<StoredAnswer>,
  ): Promise<{ answer: StoredAnswer; replayed: boolean } | 'conflict'> {
    this.#expire(nowMs);
    const existing = this.#entries.get(scopeKey);
    if (existing && existing.fingerprint !== fingerprint) return 'conflict';
    if (existing) {
      try {
        return { answer: await existing.answer, replayed: true };
      } catch {
        // The first attempt failed and was forgotten below; fall through and handle this one.
      }
    }
    const answer = handle();
    const entry: Entry = { answer, fingerprint, storedAt: nowMs };
    this.#entries.set(scopeKey, entry);
    try {
      const result = await answer;
      if (result.status >= 300) this.#forget(scopeKey, entry);
      return { answer: result, replayed: false };
    } catch (err) {
      this.#forget(scopeKey, entry);
      throw err;
    }
  }

  clear(): void {
    this.#entries.clear();
  }

  #forget(scopeKey: string, entry: Entry): void {
    if (this.#entries.get(scopeKey) === entry) this.#entries.delete(scopeKey);
  }

  #expire(nowMs: number): void {
    for (const [key, entry] of this.#entries) {
      if (nowMs - entry.storedAt < IDEMPOTENCY_WINDOW_MS) break;
      this.#entries.delete(key);
    }
  }
}

/** How long a hosted image lives after its last use: 180 days. */
export const IMAGE_RETENTION_MS = 180 * 24 * 60 * 60 * 1000;

/** A hosted image. */
export interface HostedImage {
  sha256: string;
  data: Buffer;
  mimeType: ApiImage['mimeType'];
  /** When it was last sent; it expires {@link IMAGE_RETENTION_MS} later. */
  lastUsedAt: Date;
}

/** Content types of the image format words. */
export const IMAGE_CONTENT_TYPES: Record<ApiImage['mimeType'], string> = {
  PNG: 'image/png',
  JPEG: 'image/jpeg',
  GIF: 'image/gif',
  WEBP: 'image/webp',
};

/** Images of JSON sends, hosted at `/images/{sha256}`; sending the same bytes again resets the expiry. */
export class ImageStore {
  readonly #images = new Map<string, HostedImage>();
  /** Called after every change (the data directory saves them). */
  onChange: () => void = () => {};

  /** Stores (or refreshes) an image. @returns its SHA-256 hex digest */
  put(data: Buffer, mimeType: ApiImage['mimeType'], now: Date): string {
    const sha256 = createHash('sha256').update(data).digest('hex');
    const existing = this.#images.get(sha256);
    if (existing && !this.#expired(existing, now)) {
      existing.lastUsedAt = now;
      existing.mimeType = mimeType;
    } else {
      this.#images.set(sha256, { sha256, data, mimeType, lastUsedAt: now });
    }
    this.onChange();
    return sha256;
  }

  /** Puts back a saved image. */
  restore(image: HostedImage): void {
    this.#images.set(image.sha256, image);
  }

  /** The image if it exists and has not expired at `now`; expired images are deleted. */
  get(sha256: string, now: Date): HostedImage | undefined {
    const image = this.#images.get(sha256);
    if (!image) return undefined;
    if (this.#expired(image, now)) {
      this.#images.delete(sha256);
      return undefined;
    }
    return image;
  }

  /** When an image expires. */
  static expiresAt(image: HostedImage): Date {
    return new Date(image.lastUsedAt.getTime() + IMAGE_RETENTION_MS);
  }

  /** Images not expired at `now`. */
  list(now: Date): HostedImage[] {
    return [...this.#images.values()].filter((image) => !this.#expired(image, now));
  }

  clear(): void {
    this.#images.clear();
    this.onChange();
  }

  #expired(image: HostedImage, now: Date): boolean {
    return now.getTime() >= image.lastUsedAt.getTime() + IMAGE_RETENTION_MS;
  }
}
