import { ApiKeyStore } from './api-key-store.js';
import type { FaultInjector } from '../http/fault-injector.js';
import type { ResolvedEmulatorOptions } from '../emulator-options.js';
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
  /** Faults injected into API requests, if any. */
  faults: FaultInjector | undefined;

  constructor(readonly options: ResolvedEmulatorOptions) {
    for (const group of options.groups) this.groups.create(group);
    this.faults = options.faults;
  }

  now(): Date {
    return this.options.now();
  }

  /** Forgets messages, mailboxes, members, images and idempotency keys; groups and keys stay. */
  reset(): void {
    this.mail.clear();
    this.groups.clearMembers();
    this.images.clear();
    this.idempotency.clear();
  }
}
