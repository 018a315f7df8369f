import { parseArgs } from 'node:util';
import { request } from 'undici';
import { type CliIo, EXIT, UsageError, terminalText } from '../cli-io.js';

/** Help of `eml-api inbox`. */
export const INBOX_HELP = `Usage: eml-api inbox <list | clear> [options]

Reads or empties the inbox of a running emulator (eml-api serve), through its
inspection API (Mailpit's API v1), from any process.

  list     the newest messages: time, ID, from, to and subject, one per line
  clear    delete every message, or with --query the messages a search finds

Options:
  --url <url>       the emulator's URL (or EML_API_URL)
  --query <search>  Mailpit's search syntax: words, from:, to:, subject:, is:unread,
                    has:attachment, before:, after: ...
  --limit <n>       list: how many messages (default 20)
  -h, --help        show this help

Environment: EML_API_URL; EML_API_INBOX_LOGIN=user:password when the inbox asks for its login.
Exit codes: 0 done, 1 failed (emulator unreachable, login refused), 2 wrong usage.
`;

/** `eml-api inbox list|clear`: the inbox of a running emulator. */
export async function inboxCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      url: { type: 'string' },
      query: { type: 'string' },
      limit: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(INBOX_HELP);
    return EXIT.ok;
  }
  const [action, ...rest] = positionals;
  if ((action !== 'list' && action !== 'clear') || rest.length > 0) {
    throw new UsageError('inbox takes one subcommand: list or clear');
  }
  const base = inboxUrl(values.url ?? io.env.EML_API_URL);
  const headers: Record<string, string> = {};
  const login = io.env.EML_API_INBOX_LOGIN;
  if (login) headers.authorization = `Basic ${Buffer.from(login).toString('base64')}`;
  const query = values.query?.trim();
  if (action === 'clear') {
    const path = query ? `/api/v1/search?query=${encodeURIComponent(query)}` : '/api/v1/messages';
    const count = async () => {
      const info = await call(base, 'GET', '/api/v1/info', headers);
      return (expectShape(info, 'GET /api/v1/info', (i) => typeof i.Messages === 'number') as { Messages: number })
        .Messages;
    };
    const before = await count();
    await call(base, 'DELETE', path, headers);
    const deleted = before - (await count());
    io.stdout.write(
      `deleted ${deleted} message${deleted === 1 ? '' : 's'}${query ? ` matching ${terminalText(JSON.stringify(query))}` : ''}\n`,
    );
    return EXIT.ok;
  }
  const limit = values.limit === undefined ? 20 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
    throw new UsageError(`--limit: expected 1-10000, got "${values.limit}"`);
  const path = query
    ? `/api/v1/search?query=${encodeURIComponent(query)}&limit=${limit}`
    : `/api/v1/messages?limit=${limit}`;
  const list = expectShape(
    await call(base, 'GET', path, headers),
    `GET ${path.split('?', 1)[0]}`,
    (l) => typeof l.messages_count === 'number' && Array.isArray(l.messages),
  ) as {
    messages_count: number;
    messages: { ID: string; Created: string; From: { Address: string }; To: { Address: string }[]; Subject: string }[];
  };
  for (const m of list.messages) {
    const to = m.To.map((a) => a.Address).join(', ');
    io.stdout.write(`${terminalText(`${m.Created}  ${m.ID}  ${m.From.Address} -> ${to}  ${m.Subject}`)}\n`);
  }
  io.stdout.write(`${list.messages.length} of ${list.messages_count} message${list.messages_count === 1 ? '' : 's'}\n`);
  return EXIT.ok;
}

function inboxUrl(value: string | undefined): string {
  if (!value) throw new UsageError('no emulator URL: pass --url or set EML_API_URL (the URL eml-api serve printed)');
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`--url: not a URL: ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError('--url: expected an http(s) URL');
  return url.href.replace(/\/+$/, '');
}

async function call(
  base: string,
  method: 'GET' | 'DELETE',
  path: string,
  headers: Record<string, string>,
): Promise<unknown> {
  let res;
  try {
    res = await request(`${base}${path}`, { method, headers, headersTimeout: 30_000, bodyTimeout: 30_000 });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const why =
      code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG'
        ? `it answered without TLS: use http:// (${code})`
        : (err as Error).message;
    throw new Error(`cannot reach the emulator at ${base}: ${why}`, { cause: err });
  }
  const text = await res.body.text();
  if (res.statusCode === 401) {
    const login = headers.authorization;
    if (login === undefined) throw new Error('the inbox asks for its login: set EML_API_INBOX_LOGIN=user:password');
    const user = Buffer.from(login.slice('Basic '.length), 'base64').toString().split(':', 1)[0]!;
    throw new Error(
      `the inbox refused the login in EML_API_INBOX_LOGIN (user ${terminalText(user)}): check its user and password`,
    );
  }
  if (res.statusCode !== 200) {
    throw new Error(`${method} ${path.split('?', 1)[0]} answered ${res.statusCode}: ${text.slice(0, 300)}`);
  }
  const json = (res.headers['content-type'] ?? '').toString().startsWith('application/json');
  if (!json) return new NotJson(res.headers['content-type']?.toString());
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return new NotJson('JSON that does not parse');
  }
}

/** An answer that is not JSON; the command says what it was. */
class NotJson {
  constructor(readonly what: string | undefined) {}
}

/**
 * The answer when `fits` it; a server that is not an emulator (a web app, a proxy, the service
 * itself) otherwise answers 200 with something else, which is said before anything is deleted.
 */
function expectShape(answer: unknown, request: string, fits: (value: Record<string, unknown>) => boolean): unknown {
  if (typeof answer === 'object' && answer !== null && !(answer instanceof NotJson)) {
    if (fits(answer as Record<string, unknown>)) return answer;
  }
  const what =
    answer instanceof NotJson
      ? answer.what === undefined
        ? 'a body without a Content-Type'
        : terminalText(answer.what)
      : 'JSON of another shape';
  throw new Error(
    `${request} answered 200 with ${what}, not the emulator's inspection API (Mailpit's API v1): is --url (or EML_API_URL) the URL eml-api serve printed?`,
  );
}
