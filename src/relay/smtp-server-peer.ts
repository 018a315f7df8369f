import type * as SmtpServerModule from 'smtp-server';
import { requirePeer } from '../shared/optional-peer.js';

/** The `smtp-server` module, as the relay uses it. */
export type SmtpServerPeer = typeof SmtpServerModule;

let loaded: SmtpServerPeer | undefined;

/**
 * Loads `smtp-server`, the optional peer the relay is built on, the first
 * time the relay needs it: the CLI bundle imports the relay command eagerly,
 * and `eml-api send` must keep working where smtp-server is not installed.
 *
 * @throws {EmlApiError} `ECONFIG` saying what to install when it is missing
 */
export function loadSmtpServer(): SmtpServerPeer {
  loaded ??= requirePeer<SmtpServerPeer>(
    'smtp-server',
    'smtp-server',
    'The SMTP relay (nodemailer-eml-api/relay, eml-api relay)',
  );
  return loaded;
}
