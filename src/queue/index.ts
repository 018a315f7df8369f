// nodemailer-eml-api/queue: the outbox. Every name here is a promise to users.

// First: loading it checks bullmq and ioredis, so importing this entry point without them says what to install.
export { OUTBOX_PEERS } from './outbox-peers.js';
export type { OutboxPeerVersions } from './queue-peers.js';
export { EmlApiQueueTransport, type QueueSendCallback } from './eml-api-queue-transport.js';
export type {
  EmlApiQueueTransportOptions,
  OutboxJobOptions,
  OutboxReplicas,
  QueueTransportTimeouts,
} from './queue-transport-options.js';
export type { EmlApiQueuedMessageInfo } from './queued-message-info.js';
export { startEmlApiWorker, EmlApiWorker, type OutboxJob, type WorkerCloseOptions } from './eml-api-worker.js';
export type { EmlApiWorkerOptions, OutboxRateLimit, OutboxWorkerTuning } from './worker-options.js';
export type {
  OutboxJobData,
  OutboxJobError,
  OutboxParkReason,
  OutboxSendKind,
  OutboxSendResult,
} from './outbox-job.js';
export { outboxJobId } from './outbox-job-id.js';
export { DEFAULT_RETRY_SCHEDULE, type RetryScheduleOptions } from './retry-schedule.js';
export type { RedisConnectionInput } from './redis-connection.js';
export type { OutboxClusterConnection } from './redis-cluster.js';
export type { OutboxDurability } from './redis-settings.js';
export type { OutboxEncryption } from './content-cipher.js';
export {
  readOutboxStatus,
  retryFailedSends,
  OUTBOX_STATES,
  type OutboxStatus,
  type OutboxState,
  type FailedSend,
  type SkippedSend,
} from './outbox-inspection.js';
export { openOutboxQueue, type OutboxQueue } from './outbox-queue.js';
export { readOutboxSnapshot, type OutboxSnapshot } from './outbox-snapshot.js';
export { purgeOutbox, type PurgeOptions, type PurgeResult } from './outbox-purge.js';
