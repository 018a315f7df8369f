import type { ParsedMail, SimpleParserOptions } from 'mailparser';
import { requirePeer } from '../../shared/optional-peer.js';

type SimpleParser = (source: Buffer, options?: SimpleParserOptions) => Promise<ParsedMail>;

let simpleParser: SimpleParser | undefined;

/**
 * Loads mailparser, the MIME parser the emulator reads messages with. It is
 * an optional peer dependency: an app that only sends installs no MIME parser.
 * @throws {EmlApiError} `ECONFIG` saying what to install when it is missing
 */
export function loadMimeParser(): SimpleParser {
  simpleParser ??= requirePeer<{ simpleParser: SimpleParser }>(
    'mailparser',
    '--save-dev mailparser',
    'The emulator',
  ).simpleParser;
  return simpleParser;
}

/** Parses a whole message (or just its header section) with mailparser. */
export function parseMime(source: Buffer, options?: SimpleParserOptions): Promise<ParsedMail> {
  return loadMimeParser()(source, options);
}
