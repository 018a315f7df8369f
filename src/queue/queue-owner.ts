import { createHash, createHmac } from 'node:crypto';
import { EmlApiError } from '../shared/eml-api-error.js';
import { configError, describe } from '../shared/options-kit.js';
import type { OutboxRedisClient } from './redis-connection.js';
import { outboxKeys, type QueueLocation } from './queue-location.js';
import type { OutboxJobRecord } from './outbox-job.js';

/**
 * Fields of a queue's owner hash: the account its producers and workers name (a fingerprint), since when its mail is
 * encrypted, its workers' key fingerprints. Without it two apps sharing a Redis and a queue send each other's mail.
 */
const ACCOUNT = 'account';
const ACCOUNT_SINCE = 'account-since';
const ENCRYPTED = 'encrypted';
const KEY = 'key:';

/** How long a worker's API key counts as in use after it was last seen, in ms. */
const KEY_SEEN_MS = 24 * 3_600_000;

/**
 * Records what a producer or worker brings where nothing is recorded yet, and answers the record. A full Redis refuses
 * the writes but the record is read, so a worker drains the queue.
 */
const REGISTER = `
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if ARGV[1] ~= '' and redis.pcall('HSETNX', KEYS[1], '${ACCOUNT}', ARGV[1]) == 1 then
  redis.pcall('HSET', KEYS[1], '${ACCOUNT_SINCE}', ms)
end
if ARGV[2] == '1' then redis.pcall('HSETNX', KEYS[1], '${ENCRYPTED}', ms) end
if ARGV[3] ~= '' then redis.pcall('HSET', KEYS[1], ARGV[3], ms) end
local record = redis.call('HGETALL', KEYS[1])
table.insert(record, 'now')
table.insert(record, ms)
return record
`;

/** What the queue records and jobs carry for an `account` option. */
export function accountFingerprint(account: string): string {
  return createHash('sha256').update(`nodemailer-eml-api account\0${account}`).digest('hex').slice(0, 16);
}

/** An HMAC under the key: tells keys apart, tells nothing of them. */
export function keyFingerprint(apiKey: string): string {
  return createHmac('sha256', apiKey).update('nodemailer-eml-api worker key').digest('hex').slice(0, 12);
}

/** @throws {EmlApiError} `ECONFIG` naming `account` */
export function resolveAccount(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^[\x21-\x7e]{1,200}$/.test(value)) {
    throw configError('account', `expected 1 to 200 visible ASCII characters, got ${describe(value)}`);
  }
  return value;
}

/** The owner record as a producer or worker read it. */
export interface QueueOwner {
  account: string | undefined;
  /** From when (Redis's clock, ms) the queue names its account. */
  accountSince: number | undefined;
  /** From when (Redis's clock, ms) the queue's mail is encrypted. */
  encryptedSince: number | undefined;
  /** Workers' key fingerprints, each with when last seen (Redis's clock, ms). */
  keys: Map<string, number>;
  now: number;
}

/** Registers with the queue's owner record and reads it. */
export async function registerOwner(
  redis: OutboxRedisClient,
  location: QueueLocation,
  me: { account?: string | undefined; encrypts?: boolean; key?: string | undefined },
): Promise<QueueOwner> {
  const reply = (await redis.eval(
    REGISTER,
    1,
    outboxKeys(location).owner,
    me.account ?? '',
    me.encrypts ? '1' : '',
    me.key === undefined ? '' : `${KEY}${me.key}`,
  )) as string[];
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), String(reply[i + 1]));
  const keys = new Map<string, number>();
  for (const [name, value] of fields) if (name.startsWith(KEY)) keys.set(name.slice(KEY.length), Number(value));
  const encrypted = fields.get(ENCRYPTED);
  const since = fields.get(ACCOUNT_SINCE);
  return {
    account: fields.get(ACCOUNT),
    accountSince: since === undefined ? undefined : Number(since),
    encryptedSince: encrypted === undefined ? undefined : Number(encrypted),
    keys,
    now: Number(fields.get('now')),
  };
}

/**
 * Checks a producer's account against the owner record, and that it encrypts when the queue does.
 * @throws {EmlApiError} `ECONFIG` naming `account` or `encryption`
 */
export async function checkProducerOwner(
  redis: OutboxRedisClient,
  location: QueueLocation,
  me: { account: string | undefined; encrypts: boolean },
): Promise<void> {
  const owner = await registerOwner(redis, location, me);
  checkAccount(owner, me.account, location, 'producer');
  if (owner.encryptedSince !== undefined && !me.encrypts) {
    throw configError(
      'encryption',
      `the mail of queue "${location.queueName}" is encrypted (its producers have encrypted it since ` +
        `${new Date(owner.encryptedSince).toISOString()}): this producer, without encryption, would store mail in ` +
        "clear, which its workers refuse. Give it the queue's encryption option; or, if this is another app, " +
        'its own queueName (or prefix)',
    );
  }
}

/**
 * Checks a worker against the owner record. When the queue names no account, also returns other workers' keys seen
 * within a day (another app's, or a rotated key: warned of).
 * @throws {EmlApiError} `ECONFIG` naming `account`
 */
export async function checkWorkerOwner(
  redis: OutboxRedisClient,
  location: QueueLocation,
  me: { account: string | undefined; key: string | undefined },
): Promise<{ owner: QueueOwner; otherKeys: string[] }> {
  const owner = await registerOwner(redis, location, me);
  checkAccount(owner, me.account, location, 'worker');
  const otherKeys =
    owner.account === undefined
      ? [...owner.keys].filter(([key, seen]) => key !== me.key && owner.now - seen < KEY_SEEN_MS).map(([key]) => key)
      : [];
  return { owner, otherKeys };
}

function checkAccount(
  owner: QueueOwner,
  mine: string | undefined,
  location: QueueLocation,
  who: 'producer' | 'worker',
): void {
  if (owner.account === undefined || owner.account === mine) return;
  const queue = `queue "${location.queueName}" (prefix "${location.prefix}")`;
  if (mine === undefined) {
    throw configError(
      'account',
      `the producers and workers of ${queue} name their account (fingerprint ${owner.account}): give this ${who} ` +
        'the same account option (EML_API_ACCOUNT with the CLI), or, if this is another app, its own queueName (or prefix)',
    );
  }
  throw configError(
    'account',
    `${queue} belongs to another account (fingerprint ${owner.account}; this ${who}'s is ${mine}): two apps share ` +
      `one queue on this Redis, and ${who === 'worker' ? "this worker would send the other's mail through its own account" : "this producer's mail would go out through the other's account"}. ` +
      'Give each app its own queueName (or prefix)',
  );
}

/**
 * The error (`EMESSAGE`, permanent) for a job queued for another account, or for none on a queue that named its account
 * before, or stored in clear on a queue encrypted before; earlier jobs are the queue's backlog. Else undefined.
 * @param queuedAt when Redis took the job (Redis's time, ms), asked only when it matters
 */
export async function foreignJob(
  data: OutboxJobRecord,
  queuedAt: () => Promise<number>,
  me: { account: string | undefined; decrypts: boolean },
  owner: Pick<QueueOwner, 'accountSince' | 'encryptedSince'> | undefined,
): Promise<EmlApiError | undefined> {
  const { accountSince, encryptedSince } = owner ?? {};
  const refused = (problem: string) => new EmlApiError('EMESSAGE', problem, { permanent: true });
  /** Redis took this job at or after `since`, when the queue began to name its account or to encrypt. */
  const queuedSince = async (since: number | undefined) => since !== undefined && (await queuedAt()) >= since;
  if (data.account !== undefined && data.account !== me.account) {
    const mine = me.account === undefined ? 'this worker names no account' : `not this worker's (${me.account})`;
    return refused(
      `This job was queued for another account (fingerprint ${data.account}), ${mine}: not sent with this worker's ` +
        'key. Another app queues into this queue: give each app its own queueName (or prefix), then put it back ' +
        'with a worker of its account',
    );
  }
  if (me.account !== undefined && data.account === undefined && (await queuedSince(accountSince))) {
    return refused(
      `This job names no account, on a queue that names its account (since ${new Date(accountSince!).toISOString()}): ` +
        "a producer without the queue's account option (another app?) queued it; not sent with this worker's key",
    );
  }
  if (me.decrypts && data.encryption === undefined && (await queuedSince(encryptedSince))) {
    return refused(
      `This job was stored in clear on a queue whose mail is encrypted (since ${new Date(encryptedSince!).toISOString()}): ` +
        "a producer without the queue's encryption (another app?) queued it; not sent",
    );
  }
  return undefined;
}
