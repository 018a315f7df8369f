import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { ApiImage } from '../../protocol/api-types.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { type EmulatorState, type GroupMember, IMAGE_CONTENT_TYPES, type UnsubscribeTicket } from './emulator-state.js';
import { type InboxMessage, MAX_TAGS, type MailObserver, uniqueTags } from './mail-store.js';
import type { EmulatorAttachment } from './records.js';

/**
 * The emulator's data directory: the inbox (one `.eml` and one `.json` per message, named in arrival order), and in
 * `emulator.json` the ready API key, the groups with their members and unsubscribe links, and the hosted images (their
 * bytes in `images/`). Writes follow the changes in order, in the background; `flush()` waits for them. One emulator
 * uses a directory at a time (`emulator.lock`). What a crash leaves half-written is dropped on the next start; a file
 * of the wrong shape stops the start, named.
 */

const STATE_FILE = 'emulator.json';
const LOCK_FILE = 'emulator.lock';
const MESSAGES = 'messages';
const IMAGES = 'images';

interface SavedState {
  version: 1;
  apiKey: string;
  nextOrder: number;
  groups: { id: string; members: GroupMember[] }[];
  tickets: [string, UnsubscribeTicket][];
  images: { sha256: string; mimeType: ApiImage['mimeType']; lastUsedAt: Date }[];
}

interface SavedMessage {
  id: string;
  copies: { id: string; to: string }[];
  messageRef: string;
  from: string;
  subject: string;
  messageId: string;
  text: string | undefined;
  html: string | undefined;
  attachments: EmulatorAttachment[];
  group: string | undefined;
  created: Date;
  read: boolean;
  tags: string[];
}

/** Data directories this process has open (a second emulator of the process is refused too). */
const openHere = new Set<string>();

/** The data directory of one running emulator. */
export class DataDir {
  readonly path: string;
  readonly #state: EmulatorState;
  readonly #onError: (err: unknown) => void;
  readonly #files = new Map<string, string>();
  #nextOrder = 1;
  #apiKey: string;
  #queue: Promise<void> = Promise.resolve();
  #stateSaveQueued = false;
  #closed = false;

  private constructor(path: string, state: EmulatorState, apiKey: string, onError: (err: unknown) => void) {
    this.path = path;
    this.#state = state;
    this.#apiKey = apiKey;
    this.#onError = onError;
  }

  /**
   * Opens (creating it when needed) a data directory and puts what it holds into `state`; from then on every change is
   * written to it.
   * @param newApiKey the ready key to use when the directory holds none
   * @returns the directory, and the ready key to use
   * @throws {EmlApiError} `ECONFIG` when another emulator uses it or a file in it is damaged
   */
  static async open(
    path: string,
    state: EmulatorState,
    newApiKey: string,
    onError: (err: unknown) => void,
  ): Promise<{ dataDir: DataDir; apiKey: string }> {
    await createDataDir(path);
    await lock(path);
    const dataDir = new DataDir(path, state, newApiKey, onError);
    try {
      const saved = await readSaved(join(path, STATE_FILE), readSavedState);
      if (saved) {
        dataDir.#apiKey = saved.apiKey;
        dataDir.#nextOrder = saved.nextOrder;
        await dataDir.#restoreState(saved);
      }
      await dataDir.#restoreMessages();
    } catch (err) {
      await unlock(path);
      throw err;
    }
    state.groups.onChange = () => dataDir.#saveStateSoon();
    state.images.onChange = () => dataDir.#saveStateSoon();
    state.mail.watch(dataDir.#observer());
    dataDir.#saveStateSoon();
    return { dataDir, apiKey: dataDir.#apiKey };
  }

  /** Resolves once every change so far is written. */
  async flush(): Promise<void> {
    await this.#queue;
  }

  /** Writes what is left and frees the directory for another emulator. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.flush();
    await unlock(this.path);
  }

  async #restoreState(saved: SavedState): Promise<void> {
    const { groups, images } = this.#state;
    for (const group of saved.groups) {
      groups.create(group.id);
      for (const member of group.members) groups.restoreMember(group.id, member);
    }
    for (const [token, ticket] of saved.tickets) groups.restoreTicket(token, ticket);
    const kept = new Set<string>();
    for (const image of saved.images) {
      const data = await readFile(join(this.path, IMAGES, image.sha256)).catch(() => undefined);
      // Bytes that are not the image's (cut short, changed by hand) are never served.
      if (data && createHash('sha256').update(data).digest('hex') === image.sha256) {
        images.restore({ ...image, data });
        kept.add(image.sha256);
      }
    }
    for (const name of await readdir(join(this.path, IMAGES))) {
      if (!kept.has(name)) await unlink(join(this.path, IMAGES, name));
    }
  }

  async #restoreMessages(): Promise<void> {
    const dir = join(this.path, MESSAGES);
    const names = new Set(await readdir(dir));
    for (const name of names) {
      const base = name.replace(/\.(eml|json)$/, '');
      // Half-written: an atomic write's temporary file, an .eml whose .json never came, a .json whose .eml went.
      const pair = name.endsWith('.eml') ? `${base}.json` : name.endsWith('.json') ? `${base}.eml` : undefined;
      if (name.endsWith('.tmp') || (pair !== undefined && !names.has(pair))) await unlink(join(dir, name));
    }
    const bases = [...names].filter((n) => n.endsWith('.json') && names.has(`${n.slice(0, -5)}.eml`)).sort();
    // Only the newest fit; the rest go.
    const kept = bases.slice(Math.max(0, bases.length - this.#state.mail.maxMessages));
    for (const name of bases.slice(0, bases.length - kept.length)) await this.#remove(name.slice(0, -5));
    for (const name of kept) {
      const base = name.slice(0, -5);
      const saved = (await readSaved(join(dir, name), readSavedMessage))!;
      if (saved.copies.some((c) => this.#state.mail.messageOfCopy(c.id))) {
        throw damaged(join(dir, name), 'copies holds an id of another message');
      }
      const raw = await readFile(join(dir, `${base}.eml`));
      const order = Number(base.split('-', 1)[0]);
      if (order >= this.#nextOrder) this.#nextOrder = order + 1;
      this.#files.set(saved.id, base);
      // Restored without being written again: the observer is attached after.
      this.#state.mail.store(
        {
          messageRef: saved.messageRef,
          raw,
          recipients: saved.copies.map((c) => c.to),
          from: saved.from,
          subject: saved.subject,
          messageId: saved.messageId,
          text: saved.text,
          html: saved.html,
          attachments: saved.attachments,
          group: saved.group,
        },
        saved.created,
        { copyIds: saved.copies.map((c) => c.id), read: saved.read, tags: saved.tags },
      );
    }
  }

  #observer(): MailObserver {
    return {
      stored: (message) => {
        const base = `${String(this.#nextOrder++).padStart(12, '0')}-${message.id}`;
        this.#files.set(message.id, base);
        const json = JSON.stringify(savedMessage(message));
        this.#write(async () => {
          await writeFile(join(this.path, MESSAGES, `${base}.eml`), message.raw, { mode: 0o600 });
          await atomicWrite(join(this.path, MESSAGES, `${base}.json`), json);
        });
        this.#saveStateSoon();
      },
      removed: (messages) => {
        const bases = messages.flatMap((m) => {
          const base = this.#files.get(m.id);
          this.#files.delete(m.id);
          return base === undefined ? [] : [base];
        });
        this.#write(async () => {
          for (const base of bases) await this.#remove(base);
        });
      },
      changed: (messages) => {
        const writes = messages.flatMap((m) => {
          const base = this.#files.get(m.id);
          return base === undefined ? [] : [[base, JSON.stringify(savedMessage(m))] as const];
        });
        this.#write(async () => {
          for (const [base, json] of writes) await atomicWrite(join(this.path, MESSAGES, `${base}.json`), json);
        });
      },
      cleared: () => {
        this.#files.clear();
        this.#write(async () => {
          await rm(join(this.path, MESSAGES), { recursive: true, force: true });
          await mkdir(join(this.path, MESSAGES), { recursive: true, mode: 0o700 });
        });
      },
    };
  }

  async #remove(base: string): Promise<void> {
    // The .json first: a crash in between leaves a lone .eml, dropped on the next start.
    for (const ext of ['.json', '.eml']) await unlink(join(this.path, MESSAGES, base + ext)).catch(() => undefined);
  }

  #write(task: () => Promise<void>): void {
    this.#queue = this.#queue.then(task).catch(this.#onError);
  }

  #saveStateSoon(): void {
    if (this.#stateSaveQueued) return;
    this.#stateSaveQueued = true;
    this.#write(async () => {
      this.#stateSaveQueued = false;
      const { groups, images } = this.#state;
      const now = this.#state.now();
      const live = images.list(now);
      const stored = new Set(await readdir(join(this.path, IMAGES)));
      for (const image of live) {
        if (!stored.has(image.sha256)) await atomicWrite(join(this.path, IMAGES, image.sha256), image.data);
      }
      const saved: SavedState = {
        version: 1,
        apiKey: this.#apiKey,
        nextOrder: this.#nextOrder,
        groups: groups.ids().map((id) => ({ id, members: groups.members(id) ?? [] })),
        tickets: groups.tickets(),
        images: live.map((i) => ({ sha256: i.sha256, mimeType: i.mimeType, lastUsedAt: i.lastUsedAt })),
      };
      await atomicWrite(join(this.path, STATE_FILE), JSON.stringify(saved));
    });
  }
}

function savedMessage(m: InboxMessage): SavedMessage {
  const copy = m.copies[0]!;
  return {
    id: m.id,
    copies: m.copies.map((c) => ({ id: c.id, to: c.to })),
    messageRef: m.messageRef,
    from: copy.from,
    subject: m.subject,
    messageId: copy.messageId,
    text: m.text,
    html: m.html,
    attachments: copy.attachments,
    group: m.group,
    created: m.created,
    read: m.read,
    tags: m.tags,
  };
}

/**
 * Creates a data directory (and its missing parents) with its subdirectories, one plain `mkdir` per level: a
 * recursive `mkdir` in Node 20 retries forever, at full CPU, where a directory exists but refuses new entries with
 * ENOENT (/proc), while a plain one always answers.
 * @throws {EmlApiError} `ECONFIG` naming the level that cannot be made and why
 */
async function createDataDir(path: string): Promise<void> {
  for (const dir of [path, join(path, MESSAGES), join(path, IMAGES)]) {
    const missing: string[] = [];
    for (let at = resolve(dir); ; at = dirname(at)) {
      const found = await stat(at).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return undefined;
        throw cannotCreate(path, at, err);
      });
      if (found?.isDirectory()) break;
      if (found) throw cannotCreate(path, at, 'ENOTDIR');
      missing.unshift(at);
      if (dirname(at) === at) break;
    }
    for (const at of missing) {
      await mkdir(at, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw cannotCreate(path, at, err);
      });
    }
  }
}

function cannotCreate(path: string, at: string, err: NodeJS.ErrnoException | 'ENOTDIR'): EmlApiError {
  const code = err === 'ENOTDIR' ? err : err.code;
  const problem =
    code === 'ENOENT'
      ? `${at} cannot be made in ${dirname(at)}, which exists but takes no new directories (a filesystem such as /proc)`
      : code === 'ENOTDIR'
        ? `${at} is not a directory`
        : code === 'EACCES' || code === 'EPERM'
          ? `${at}: permission denied (${code})`
          : code === 'EROFS'
            ? `${at} is on a read-only filesystem`
            : `${at}: ${code ?? (err as Error).message}`;
  return new EmlApiError('ECONFIG', `The emulator's data directory ${path} cannot be created: ${problem}`, {
    permanent: true,
    cause: err === 'ENOTDIR' ? undefined : err,
  });
}

/**
 * Claims a data directory for this process: `emulator.lock` names the process and its host. A lock whose process is
 * gone (a crash) is taken over; one of another host is too, as its process cannot be checked.
 * @throws {EmlApiError} `ECONFIG` when a live emulator holds it
 */
async function lock(path: string): Promise<void> {
  const key = resolve(path);
  const file = join(path, LOCK_FILE);
  const inUse = (pid: number) =>
    new EmlApiError(
      'ECONFIG',
      `The emulator's data directory ${path} is in use by process ${pid}: give each emulator its own dataDir (--data-dir), or stop the other one first`,
      { permanent: true },
    );
  if (openHere.has(key)) throw inUse(process.pid);
  openHere.add(key);
  const mine = JSON.stringify({ pid: process.pid, hostname: hostname() });
  try {
    await writeFile(file, mine, { flag: 'wx', mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
      openHere.delete(key);
      throw err;
    }
    const holder = await readFile(file, 'utf8')
      .then((text) => JSON.parse(text) as { pid?: unknown; hostname?: unknown })
      .catch(() => undefined);
    const pid = holder?.pid;
    // A lock naming this very process is left from an earlier run in its place (a container's pid 1).
    if (typeof pid === 'number' && holder?.hostname === hostname() && pid !== process.pid && isAlive(pid)) {
      openHere.delete(key);
      throw inUse(pid);
    }
    await writeFile(file, mine, { mode: 0o600 });
  }
}

async function unlock(path: string): Promise<void> {
  openHere.delete(resolve(path));
  await unlink(join(path, LOCK_FILE)).catch(() => undefined);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function damaged(path: string, problem: string): EmlApiError {
  return new EmlApiError(
    'ECONFIG',
    `The emulator's data directory holds a damaged ${path}: ${problem}. Move it away (for a message, with its .eml) to start without it`,
    { permanent: true },
  );
}

/** Reads a saved file with `read`; undefined when there is none. @throws {EmlApiError} `ECONFIG` naming what is wrong */
async function readSaved<T>(path: string, read: (value: unknown) => T): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    return read(JSON.parse(text));
  } catch (err) {
    if (err instanceof SyntaxError || err instanceof BadField) throw damaged(path, err.message);
    throw err;
  }
}

/** A saved value of the wrong shape: where, and what it should be. */
class BadField extends Error {
  constructor(field: string, expected: string) {
    super(`${field} is not ${expected}`);
  }
}

type Fields = Record<string, unknown>;

function record(value: unknown, name: string): Fields {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new BadField(name, 'an object');
  return value as Fields;
}

function text(value: unknown, name: string, pattern?: RegExp): string {
  if (typeof value !== 'string' || (pattern && !pattern.test(value))) throw new BadField(name, 'a valid string');
  return value;
}

function optionalText(value: unknown, name: string): string | undefined {
  return value === undefined || value === null ? undefined : text(value, name);
}

function time(value: unknown, name: string): Date {
  const date = new Date(text(value, name));
  if (Number.isNaN(date.getTime())) throw new BadField(name, 'a date');
  return date;
}

function list<T>(value: unknown, name: string, item: (value: unknown, name: string) => T): T[] {
  if (!Array.isArray(value)) throw new BadField(name, 'a list');
  return value.map((v, i) => item(v, `${name}[${i}]`));
}

/** The ids the web inbox links to (`/inbox/messages/dlv_…`). */
const DELIVERY_ID = /^dlv_[A-Za-z0-9-]{1,100}$/;

function readSavedMessage(value: unknown): SavedMessage {
  const m = record(value, 'the record');
  const copies = list(m.copies, 'copies', (c, name) => {
    const copy = record(c, name);
    return { id: text(copy.id, `${name}.id`, DELIVERY_ID), to: text(copy.to, `${name}.to`) };
  });
  if (copies.length === 0 || copies[0]!.id !== m.id) throw new BadField('copies', 'a list starting with the id');
  if (typeof m.read !== 'boolean') throw new BadField('read', 'true or false');
  return {
    id: copies[0]!.id,
    copies,
    messageRef: text(m.messageRef, 'messageRef'),
    from: text(m.from, 'from'),
    subject: text(m.subject, 'subject'),
    messageId: text(m.messageId, 'messageId'),
    text: optionalText(m.text, 'text'),
    html: optionalText(m.html, 'html'),
    attachments: list(m.attachments, 'attachments', (a, name) => {
      const attachment = record(a, name);
      if (typeof attachment.size !== 'number') throw new BadField(`${name}.size`, 'a number');
      return {
        filename: optionalText(attachment.filename, `${name}.filename`),
        contentType: text(attachment.contentType, `${name}.contentType`),
        size: attachment.size,
        cid: optionalText(attachment.cid, `${name}.cid`),
        disposition: optionalText(attachment.disposition, `${name}.disposition`),
      };
    }),
    group: optionalText(m.group, 'group'),
    created: time(m.created, 'created'),
    read: m.read,
    tags: uniqueTags(list(m.tags, 'tags', text)).slice(0, MAX_TAGS),
  };
}

function readSavedState(value: unknown): SavedState {
  const s = record(value, 'the record');
  if (s.version !== 1) throw new BadField('version', '1');
  if (!(Number.isSafeInteger(s.nextOrder) && (s.nextOrder as number) > 0)) throw new BadField('nextOrder', 'a count');
  return {
    version: 1,
    apiKey: text(s.apiKey, 'apiKey', /^[\x21-\x7e]{1,512}$/),
    nextOrder: s.nextOrder as number,
    groups: list(s.groups, 'groups', (g, name) => {
      const group = record(g, name);
      return {
        id: text(group.id, `${name}.id`, /./),
        members: list(group.members, `${name}.members`, (m, at) => {
          const member = record(m, at);
          const substitutions = record(member.substitutions, `${at}.substitutions`);
          for (const [key, v] of Object.entries(substitutions)) text(v, `${at}.substitutions.${key}`);
          return {
            email: text(member.email, `${at}.email`),
            name: optionalText(member.name, `${at}.name`),
            substitutions: substitutions as Record<string, string>,
            addedAt: time(member.addedAt, `${at}.addedAt`),
          };
        }),
      };
    }),
    tickets: list(s.tickets, 'tickets', (t, name) => {
      if (!Array.isArray(t) || t.length !== 2) throw new BadField(name, 'a [token, ticket] pair');
      const ticket = record(t[1], `${name}[1]`);
      return [
        text(t[0], `${name}[0]`, /^[A-Za-z0-9_-]{1,128}$/),
        { groupId: text(ticket.groupId, `${name}[1].groupId`), email: text(ticket.email, `${name}[1].email`) },
      ];
    }),
    images: list(s.images, 'images', (i, name) => {
      const image = record(i, name);
      const mimeType = text(image.mimeType, `${name}.mimeType`);
      if (!(mimeType in IMAGE_CONTENT_TYPES)) throw new BadField(`${name}.mimeType`, 'an image format');
      return {
        sha256: text(image.sha256, `${name}.sha256`, /^[0-9a-f]{64}$/),
        mimeType: mimeType as ApiImage['mimeType'],
        lastUsedAt: time(image.lastUsedAt, `${name}.lastUsedAt`),
      };
    }),
  };
}

/** Writes a file whole or not at all (a crash mid-write leaves the old one and a temporary file). */
async function atomicWrite(path: string, data: string | Buffer): Promise<void> {
  const temp = `${path}.tmp`;
  await writeFile(temp, data, { mode: 0o600 });
  await rename(temp, path);
}
