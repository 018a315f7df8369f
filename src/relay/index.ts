// The relay's public API (nodemailer-eml-api/relay): every name here is a promise to users.
import { loadSmtpServer } from './smtp-server-adapter.js';

// Fails at import, saying what to install, when the optional peer smtp-server is missing.
loadSmtpServer();

export { startEmlApiRelay, type EmlApiRelay } from './start-smtp-relay.js';
export type { EmlApiRelayOptions } from './relay-options.js';
export { hashRelayPassword, type EmlApiRelayUser } from './relay-users.js';

// Types the relay's options name, declared by other entry points: the same types, importable from here.
export type { EmlApiLogger } from '../shared/options-kit.js';
export type { EmlApiClientOptions } from '../client/client-options.js';
export type { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
export type { EmlApiQueueTransportOptions, OutboxProducerOptions } from '../queue/queue-transport-options.js';
export type { OutboxProducer, OutboxMessage, OutboxQueuedMessageInfo } from '../queue/outbox-producer.js';
export type { OutboxJobData, OutboxJobError, OutboxSendResult } from '../queue/outbox-job.js';
export type { RedisConnectionInput } from '../queue/redis-connection.js';
export type { OutboxEncryption } from '../queue/content-cipher.js';
export type { MailEnvelope, NodemailerMail } from '../transport/nodemailer-types.js';
export type { EmlApiErrorCode } from '../shared/eml-api-error.js';
export type { SendKind } from '../protocol/api-types.js';
export type { MetricsRegistry } from '../observability/metrics.js';
export type { OpsHttpOptions } from '../observability/ops-server.js';
export type { RateLimitOptions, RetryOptions, TimeoutOptions } from '../http/requester.js';
export type { SpoolOptions } from '../body/message-spool.js';
