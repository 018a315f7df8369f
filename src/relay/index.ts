// The relay's public API (nodemailer-eml-api/relay): every name here is a promise to users.
import { loadSmtpServer } from './smtp-server-adapter.js';

// Fails at import, saying what to install, when the optional peer smtp-server is missing.
loadSmtpServer();

export {
  startEmlApiRelay,
  type EmlApiRelay,
  type EmlApiRelayCloseOptions,
  type EmlApiRelayClosed,
} from './start-smtp-relay.js';
export type { EmlApiRelayOptions, EmlApiRelayTimeouts, EmlApiRelayTlsOptions } from './relay-options.js';
export { hashRelayPassword, type EmlApiRelayUser } from './relay-users.js';
