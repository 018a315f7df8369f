import { createRequire } from 'node:module';
import { EmlApiError } from './eml-api-error.js';

// Synchronous, so an entry point can check its peer as it is imported, in the ESM and the CJS build alike.
const requireFromHere = createRequire(import.meta.url);

/**
 * Loads a peer dependency the part of the package in use needs (mailparser
 * for the emulator, bullmq for the outbox, smtp-server for the relay), with
 * an error that says what to install when it is missing.
 *
 * @param name the package, e.g. `mailparser`
 * @param install what to install, e.g. `mailparser@3.9.31`
 * @param user the part that needs it, e.g. `The emulator`
 * @throws {EmlApiError} `ECONFIG` when the package is not installed
 */
export function requirePeer<T>(name: string, install: string, user: string): T {
  try {
    return requireFromHere(name) as T;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'MODULE_NOT_FOUND' && e.message.includes(`'${name}'`)) {
      throw new EmlApiError(
        'ECONFIG',
        `${user} needs the package "${name}", an optional peer dependency of nodemailer-eml-api: run npm install ${install}`,
        { cause: err, permanent: true },
      );
    }
    throw err;
  }
}
