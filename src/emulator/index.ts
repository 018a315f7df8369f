export { startEmulator, type Emulator } from './start-emulator.js';
export { DEFAULT_EMULATOR_ACCOUNT, type EmulatorOptions } from './emulator-options.js';
export type { EmulatorMessage, DeliveredMessage, EmulatorAttachment, EmulatorMember } from './state/records.js';
export type { ApiScope, ApiPlan } from '../protocol/api-types.js';
export type { EmulatorFaults } from './http/fault-injector.js';
export type { EmlApiLogger } from '../shared/options-kit.js';
