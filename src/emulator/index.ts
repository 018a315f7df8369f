export { startEmulator, type Emulator } from './start-emulator.js';
export type { EmulatorOptions, EmulatorApiKey } from './emulator-options.js';
export type { EmulatorMessage, DeliveredMessage, EmulatorAttachment, EmulatorMember } from './emulator-records.js';
export type { ApiScope, ApiPlan } from '../api-types.js';
export type { EmulatorFaults, FaultStats, FaultKind } from './fault-injector.js';
export type { EmulatorRateLimit } from './key-rate-limiter.js';
