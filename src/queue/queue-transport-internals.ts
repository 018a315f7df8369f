import { privateRegistry } from '../shared/private-registry.js';
import type { QueuedContent } from './queued-content.js';
import type { EmlApiQueuedMessageInfo } from './queued-message-info.js';

/**
 * What other parts of the package reach in a queue transport besides its
 * public methods: queueing content that is already built (the SMTP relay
 * receives a complete message, not a Nodemailer mail). Kept in a
 * module-private registry, so it is not part of the public type.
 */
export interface QueueTransportInternals {
  /**
   * Stores `content` as a job with the same checks and limits as `sendMail`
   * (`maxMessageSize`, concurrency, close). The caller disposes `content`.
   */
  enqueue(content: QueuedContent, idempotencyKey: string, signal: AbortSignal): Promise<EmlApiQueuedMessageInfo>;
}

const registry = privateRegistry<QueueTransportInternals>('EmlApiQueueTransport');

/** Records the internals of a queue transport (its constructor calls this). */
export const registerQueueTransportInternals = registry.register;

/** The internals of a queue transport made by this package. */
export const queueTransportInternals = registry.get;
