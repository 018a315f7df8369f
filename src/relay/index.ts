// The relay's public API (nodemailer-eml-api/relay): every name here is a promise to users.
import { loadSmtpServer } from './smtp-server-peer.js';

// Fails at import, saying what to install, when the optional peer smtp-server is missing.
loadSmtpServer();

export {
  startSmtpRelay,
  type SmtpRelay,
  type SmtpRelayCloseOptions,
  type SmtpRelayClosed,
} from './start-smtp-relay.js';
export type { SmtpRelayOptions, SmtpRelayTlsOptions } from './relay-options.js';
export { hashRelayPassword, type SmtpRelayUser } from './relay-users.js';
