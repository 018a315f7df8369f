import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { EmlApiClient } from '../client.js';
import { UsageError } from './usage-error.js';

export const SEND_HELP = `Usage: eml-api send <file.eml | -> [options]

Sends a complete EML message through POST /v1/send/eml. "-" reads standard input.
Recipients are taken from the To, Cc and Bcc headers; Bcc is removed before delivery.

Options:
  --url <url>       base URL of the service (or EML_API_URL)
  --key <key>       API key (or EML_API_KEY; prefer the variable: flags show in ps)
  -h, --help        show this help
`;

/** `eml-api send`: uploads an EML file or standard input. */
export async function sendCommand(
  args: string[],
  out: NodeJS.WritableStream,
  env: NodeJS.ProcessEnv,
  stdin: NodeJS.ReadableStream,
): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      url: { type: 'string' },
      key: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    out.write(SEND_HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError('send takes one file name, or - for standard input');
  const baseUrl = values.url ?? env.EML_API_URL;
  const apiKey = values.key ?? env.EML_API_KEY;
  if (!baseUrl) throw new UsageError('no service URL: pass --url or set EML_API_URL');
  if (!apiKey) throw new UsageError('no API key: set EML_API_KEY (or pass --key)');
  const source = positionals[0]!;
  const eml = source === '-' ? await readAll(stdin) : await readFile(source);
  const client = new EmlApiClient({ apiKey, baseUrl });
  try {
    const result = await client.sendEml(eml);
    out.write(`${result.response} id=${result.id ?? '-'} messageId=${result.messageId ?? '-'}\n`);
    return 0;
  } finally {
    await client.close();
  }
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks);
}
