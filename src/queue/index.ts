// nodemailer-eml-api/queue: the outbox. etc/queue.api.md records every name (npm run api:check).
import { requireQueuePeers } from './redis-connection.js';

// Fails at import, saying what to install, when the optional peers bullmq or ioredis are missing.
requireQueuePeers();

// The producers: the store every producer goes through, and the Nodemailer transport that builds and stores.
export { OutboxProducer, type OutboxMessage, type OutboxQueuedMessageInfo } from './outbox-producer.js';
export { EmlApiQueueTransport } from './eml-api-queue-transport.js';
export type { OutboxProducerOptions, EmlApiQueueTransportOptions } from './queue-transport-options.js';
export type { RedisConnectionInput } from './redis-connection.js';
export type { OutboxEncryption } from './content-cipher.js';
export { outboxJobId } from './outbox-job.js';

// The worker: startOutboxWorker resolves with an OutboxWorker once its start-up checks pass.
export { startOutboxWorker, type OutboxWorker, type OutboxWorkerEvents } from './eml-api-worker.js';
export type { OutboxWorkerOptions } from './worker-options.js';

// The jobs, as the worker's events and BullMQ's API hand them out.
export type { OutboxJob, OutboxJobData, OutboxJobError, OutboxSendResult } from './outbox-job.js';

// Administration: a queue opened without a producer, its status, failed sends, a purge.
export { openOutboxQueue, type OutboxQueue } from './outbox-admin.js';
export {
  readOutboxStatus,
  retryFailedSends,
  OUTBOX_STATES,
  type OutboxStatus,
  type OutboxFailedSend,
} from './outbox-admin.js';
export { readOutboxSnapshot, type OutboxSnapshot } from './outbox-admin.js';
export { purgeOutbox, type OutboxPurgeResult } from './outbox-admin.js';

// Types the outbox's signatures name, declared by other entry points: the same types, importable from here.
export type { EmlApiLogger } from '../shared/options-kit.js';
export type { EmlApiClient } from '../client/eml-api-client.js';
export type { EmlApiClientOptions, EmlApiClientSettings } from '../client/client-options.js';
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
} from '../client/client-types.js';
export type { AddressInput, TextContentInput, ImageInput } from '../client/client-input.js';
export type { ServiceResponse } from '../http/request-error.js';
export type { OnFailure, SendAcceptedResponse, GroupSendAcceptedResponse } from '../protocol/api-types.js';
export type { EmlApiError, EmlApiErrorCode, EmlApiErrorDetails } from '../shared/eml-api-error.js';
export type { MailEnvelope, NodemailerMail } from '../transport/nodemailer-types.js';
export type { MetricsRegistry } from '../observability/metrics.js';
export type { OpsHttpOptions } from '../observability/ops-server.js';
export type { RateLimitOptions, RetryOptions, TimeoutOptions } from '../http/requester.js';
export type { SpoolOptions } from '../body/message-spool.js';
export type { SendKind } from '../protocol/api-types.js';
