import type { EmulatorState } from '../state/emulator-state.js';
import type { FaultInjector } from './fault-injector.js';
import type { KeyRateLimiter } from './key-rate-limiter.js';

/** What the HTTP side of the emulator works with: the state, and how it answers. */
export interface ServerContext {
  readonly state: EmulatorState;
  /** Largest request body accepted, in bytes. */
  readonly maxRequestSize: number;
  /** Called with unexpected internal errors. */
  readonly onInternalError: (err: unknown) => void;
  readonly rateLimiter: KeyRateLimiter | undefined;
  /** Faults injected into API requests; `emu.setFaults()` replaces them. */
  faults: FaultInjector | undefined;
}
