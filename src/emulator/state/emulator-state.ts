import { ApiKeyStore } from './api-key-store.js';
import { GroupStore } from './group-store.js';
import { IdempotencyCache } from './idempotency-cache.js';
import { ImageStore } from './image-store.js';
import { MailStore } from './mail-store.js';

/** Everything the emulator remembers; handlers read and change it. */
export class EmulatorState {
  readonly keys = new ApiKeyStore();
  readonly mail = new MailStore();
  readonly idempotency = new IdempotencyCache();
  readonly groups = new GroupStore();
  readonly images = new ImageStore();
  /** Public base URL for links in delivered mail (unsubscribe, hosted images); set once listening. */
  baseUrl = '';
  readonly #clock: () => Date;

  /**
   * @param clock the emulator's clock: timestamps, image expiry, idempotency windows
   * @param groups the groups that exist from the start
   */
  constructor(clock: () => Date, groups: readonly string[]) {
    this.#clock = clock;
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
