import { requireQueuePeers, type OutboxPeerVersions } from './queue-peers.js';

/**
 * The versions of `bullmq` and `ioredis` the outbox runs on. They are
 * loaded, and so checked, as `nodemailer-eml-api/queue` is imported: without
 * them the import throws an `EmlApiError` (`ECONFIG`) saying what to install,
 * rather than the first send failing.
 *
 * @example
 * import { OUTBOX_PEERS } from 'nodemailer-eml-api/queue';
 * console.log(OUTBOX_PEERS); // { bullmq: '6.7.0', ioredis: '5.11.1' }
 */
export const OUTBOX_PEERS: Readonly<OutboxPeerVersions> = Object.freeze(requireQueuePeers());
