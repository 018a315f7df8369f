export { startEmulator, type Emulator } from './start-emulator.js';
export type { EmulatorOptions, EmulatorApiKey } from './emulator-options.js';
export type { EmulatorMessage, DeliveredMessage, EmulatorAttachment, EmulatorMember } from './emulator-records.js';
export type { ApiScope, ApiPlan } from '../api-types.js';
