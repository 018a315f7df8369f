import { parseArgs } from 'node:util';
import { type CliIo, readInput, EXIT, UsageError, terminalText } from '../cli-io.js';
import { createServiceClient, SERVICE_ARG_OPTIONS, SERVICE_OPTIONS_HELP } from '../lib/ops-flags.js';

/** Help of `eml-api send`. */
export const SEND_HELP = `Usage: eml-api send <file.eml | -> [options]

Sends a complete EML message through POST /v1/send/eml. "-" reads standard input.
The bytes go as they are, but for a UTF-8 byte order mark first, which is dropped.
Recipients are taken from the To, Cc and Bcc headers; Bcc is removed before delivery.
Prints the service's answer, its id and the Message-ID.

Options:
${SERVICE_OPTIONS_HELP}
Exit codes: 0 accepted, 1 failed, 2 wrong usage.
`;

/** `eml-api send`: uploads an EML file or standard input. */
export async function sendCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: SERVICE_ARG_OPTIONS,
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(SEND_HELP);
    return EXIT.ok;
  }
  if (positionals.length !== 1) throw new UsageError('send takes one file name, or - for standard input');
  const client = createServiceClient(values, io.env);
  try {
    const read = await readInput(positionals[0]!, io, 'the message');
    // Editors on Windows start a saved file with a UTF-8 byte order mark, which no message header does.
    const eml = read[0] === 0xef && read[1] === 0xbb && read[2] === 0xbf ? read.subarray(3) : read;
    const result = await client.sendEml(eml);
    io.stdout.write(
      terminalText(`${result.response} id=${result.id ?? '-'} messageId=${result.messageId ?? '-'}`) + '\n',
    );
    return EXIT.ok;
  } finally {
    await client.close();
  }
}
