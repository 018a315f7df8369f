// The package's public API; etc/index.api.md records every name (npm run api:check).

// Transport
export { EmlApiTransport } from './transport/eml-api-transport.js';
export type { EmlApiTransportOptions } from './transport/eml-api-transport.js';
export type { EmlApiMailOptions } from './transport/json-send-from-mail.js';
export type { EmlApiSentMessageInfo } from './transport/eml-api-transport.js';
export type { MailEnvelope, NodemailerMail } from './transport/nodemailer-types.js';

// Client
export { EmlApiClient } from './client/eml-api-client.js';
export type { EmlApiClientOptions, EmlApiClientSettings } from './client/client-options.js';
export type {
  RequestOptions,
  SendOptions,
  SendResult,
  EmailInput,
  GroupEmailInput,
  GroupSendResult,
  MemberInput,
  AddToGroupOptions,
  AddToGroupResult,
} from './client/client-types.js';
export type { AddressInput } from './client/client-input.js';
export type { TextContentInput, ImageInput } from './client/client-input.js';
export type { RateLimitOptions, RetryOptions, TimeoutOptions } from './http/requester.js';
export type { SpoolOptions } from './body/message-spool.js';
export type { ServiceResponse } from './http/request-error.js';
// Wire types the client's own types name (also in nodemailer-eml-api/protocol).
export type { OnFailure, SendAcceptedResponse, GroupSendAcceptedResponse } from './protocol/api-types.js';

// Errors and logging
export { EmlApiError, type EmlApiErrorCode, type EmlApiErrorDetails } from './shared/eml-api-error.js';
export type { EmlApiLogger } from './shared/options-kit.js';

// Operating: metrics, the health port (see docs/operations.md)
export type { MetricsRegistry } from './observability/metrics.js';
export type { OpsHttpOptions } from './observability/ops-server.js';
