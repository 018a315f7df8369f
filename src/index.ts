// The package's public API: every name here is a promise to users.

// Transport
export { EmlApiTransport, type SendCallback } from './transport/eml-api-transport.js';
export type { EmlApiTransportOptions } from './transport/transport-options.js';
export type { EmlApiMailOptions } from './transport/mail-fields.js';
export type { EmlApiSentMessageInfo } from './transport/sent-message-info.js';
export type { MailEnvelope } from './transport/nodemailer-types.js';

// Client
export { EmlApiClient } from './client/eml-api-client.js';
export type { EmlApiClientOptions, ResolvedClientOptions } from './client/client-options.js';
export {
  DEFAULT_ADD_BATCH_SIZE,
  type RequestOptions,
  type SendOptions,
  type SendResult,
  type EmailInput,
  type GroupEmailInput,
  type GroupSendResult,
  type MemberInput,
  type AddToGroupOptions,
  type AddToGroupProgress,
  type AddToGroupResult,
} from './client/client-types.js';
export type { AddressInput } from './client/address-input.js';
export type { TextContentInput, ImageInput } from './client/content-input.js';
export type { RateLimitOptions, RetryOptions, TimeoutOptions } from './http/requester-options.js';
export type { SpoolOptions } from './body/spool-options.js';
export type { ServiceResponse } from './http/service-response.js';

// Errors and logging
export { EmlApiError, type EmlApiErrorCode, type EmlApiErrorDetails } from './shared/eml-api-error.js';
export type { EmlApiLogger } from './shared/logger.js';

// Operating: metrics, the health port (see docs/operations.md)
export type { MetricsOption, MetricsRegistry } from './observability/metrics.js';
export type { OpsHttpOptions } from './observability/ops-server.js';
export { VERSION } from './shared/version.js';

// The wire contract
export { API_SCOPES } from './protocol/api-types.js';
export type {
  ApiScope,
  ApiPlan,
  ApiAddress,
  ApiImage,
  ApiTextContent,
  EmlSendRequest,
  StandardEmailRequest,
  GroupEmailRequest,
  GroupMemberEntry,
  OnFailure,
  AddToGroupRequest,
  RemoveFromGroupRequest,
  SendAcceptedResponse,
  GroupSendAcceptedResponse,
  AddToGroupResponse,
  RemoveFromGroupResponse,
  GroupCheckResponse,
  ApiErrorCode,
  ApiErrorBody,
} from './protocol/api-types.js';
export { API_KEY_HEADER, IDEMPOTENCY_KEY_HEADER, API_PATHS, encodePathSegment } from './protocol/api-paths.js';
