export { startEmulator, type Emulator } from './start-emulator.js';
export {
  DEFAULT_EMULATOR_ACCOUNT,
  type EmulatorOptions,
  type EmulatorApiKey,
  type EmulatorInboxLogin,
} from './emulator-options.js';
export type { EmulatorMessage, DeliveredMessage, EmulatorAttachment, EmulatorMember } from './state/records.js';
export type { ApiScope, ApiPlan } from '../protocol/api-types.js';
export type { EmulatorFaults, EmulatorFaultStats, FaultKind } from './http/fault-injector.js';
export type { EmulatorRateLimit } from './http/api-router.js';
export type { EmulatorSmtpOptions, EmulatorSmtp } from './smtp-ingest.js';
export type { EmlApiLogger } from '../shared/options-kit.js';
