import { ApiKeyStore } from './api-key-store.js';
import type { ResolvedEmulatorOptions } from './emulator-options.js';
import { IdempotencyCache } from './idempotency-cache.js';
import { MailStore } from './mail-store.js';

/** Everything the emulator remembers; handlers read and change it. */
export class EmulatorState {
  readonly keys = new ApiKeyStore();
  readonly mail = new MailStore();
  readonly idempotency = new IdempotencyCache();
  readonly groups = new Set<string>();

  constructor(readonly options: ResolvedEmulatorOptions) {
    for (const group of options.groups) this.groups.add(group);
  }

  now(): Date {
    return this.options.now();
  }
}
