// nodemailer-eml-api/queue: the outbox. Every name here is a promise to users; etc/queue.api.md
// records them (npm run api:check).
import { requireQueuePeers } from './redis-connection.js';

// Fails at import, saying what to install, when the optional peers bullmq or ioredis are missing.
requireQueuePeers();

// The producers: the store every producer goes through, and the Nodemailer transport that builds and stores.
export { OutboxProducer, type OutboxMessage, type OutboxQueuedMessageInfo } from './outbox-producer.js';
export { EmlApiQueueTransport, type QueueSendCallback } from './eml-api-queue-transport.js';
export type {
  OutboxProducerOptions,
  EmlApiQueueTransportOptions,
  OutboxJobOptions,
  OutboxReplicas,
  QueueTransportTimeouts,
} from './queue-transport-options.js';
export type { RetryScheduleOptions } from './retry-schedule.js';
export type { RedisConnectionInput } from './redis-connection.js';
export type { OutboxClusterConnection } from './redis-connection.js';
export type { OutboxDurability } from './redis-settings.js';
export type { OutboxEncryption } from './content-cipher.js';
export { outboxJobId } from './outbox-job.js';

// The worker: one way to start one (startOutboxWorker resolves once its start-up checks pass).
// OutboxWorker is the type of the instance it resolves with, not a second constructor.
export {
  startOutboxWorker,
  type OutboxWorker,
  type OutboxWorkerEvents,
  type WorkerCloseOptions,
} from './eml-api-worker.js';
export type { OutboxWorkerOptions, OutboxRateLimit, OutboxWorkerTuning } from './worker-options.js';

// The jobs, as the worker's events and BullMQ's API (transport.queue, worker.worker) hand them out:
// OutboxJob is BullMQ's Job<OutboxJobData, OutboxSendResult>; the rest are what its data and result hold.
export type { OutboxJob, OutboxJobData, OutboxJobError, OutboxParkReason, OutboxSendResult } from './outbox-job.js';
// What a job posts (its kind is also the BullMQ job name): the protocol's one name for it.
export type { SendKind } from '../protocol/api-types.js';
export type { TraceCarrier } from '../observability/tracing.js';

// Administration: a queue opened without a producer, its status, failed sends, a purge.
export { openOutboxQueue, type OutboxQueue } from './outbox-admin.js';
export {
  readOutboxStatus,
  retryFailedSends,
  OUTBOX_STATES,
  type OutboxStatus,
  type OutboxState,
  type OutboxFailedSend,
  type SkippedSend,
} from './outbox-admin.js';
export { readOutboxSnapshot, type OutboxSnapshot } from './outbox-admin.js';
export { purgeOutbox, type PurgeOptions, type OutboxPurgeResult } from './outbox-admin.js';
