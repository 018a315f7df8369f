export { EmlApiTransport, type SendCallback } from './transport.js';
export type { EmlApiTransportOptions } from './transport-options.js';
export type { EmlApiMailOptions } from './sendmail-options.js';
export {
  EmlApiClient,
  DEFAULT_ADD_BATCH_SIZE,
  type RequestOptions,
  type SendOptions,
  type SendResult,
  type EmailInput,
  type GroupEmailInput,
  type GroupSendResult,
  type MemberInput,
  type AddToGroupOptions,
  type AddToGroupResult,
} from './client.js';
export type { AddressInput } from './address-input.js';
export type { TextContentInput, ImageInput } from './content-input.js';
export type { EmlApiClientOptions } from './client-options.js';
export { EmlApiError, type EmlApiErrorCode, type EmlApiErrorDetails } from './errors.js';
export type { EmlApiSentMessageInfo } from './sent-message-info.js';
export type { EmlApiLogger } from './logger.js';
export type { ServiceResponse } from './service-response.js';
export type { MailEnvelope } from './nodemailer-types.js';
export * from './api-types.js';
export { VERSION } from './version.js';
