export { EmlApiTransport, type SendCallback } from './transport/eml-api-transport.js';
export type { EmlApiTransportOptions } from './transport/transport-options.js';
export type { EmlApiMailOptions } from './transport/mail-fields.js';
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
} from './client/eml-api-client.js';
export type { AddressInput } from './client/address-input.js';
export type { TextContentInput, ImageInput } from './client/content-input.js';
export type { EmlApiClientOptions } from './client/client-options.js';
export { EmlApiError, type EmlApiErrorCode, type EmlApiErrorDetails } from './shared/eml-api-error.js';
export type { EmlApiSentMessageInfo } from './transport/sent-message-info.js';
export type { EmlApiLogger } from './shared/logger.js';
export type { ServiceResponse } from './http/service-answer.js';
export type { MailEnvelope } from './transport/nodemailer-types.js';
export * from './protocol/api-types.js';
export { VERSION } from './shared/version.js';
