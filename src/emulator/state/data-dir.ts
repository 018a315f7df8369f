import { mkdir, readdir, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ApiImage } from '../../protocol/api-types.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import type { EmulatorState, GroupMember, UnsubscribeTicket } from './emulator-state.js';
import type { InboxMessage, MailObserver } from './mail-store.js';
import type { EmulatorAttachment } from './records.js';

/**
 * The emulator's data directory: the inbox (one `.eml` and one `.json` per
 * message, named in arrival order), and in `emulator.json` the ready API
 * key, the groups with their members and unsubscribe links, and the hosted
 * images (their bytes in `images/`). Writes follow the changes in order, in
 * the background; `flush()` waits for them.
 */

const STATE_FILE = 'emulator.json';
const MESSAGES = 'messages';
const IMAGES = 'images';

interface SavedState {
  version: 1;
  apiKey: string;
  nextOrder: number;
  groups: { id: string; members: (Omit<GroupMember, 'addedAt'> & { addedAt: string })[] }[];
  tickets: [string, UnsubscribeTicket][];
  images: { sha256: string; mimeType: ApiImage['mimeType']; lastUsedAt: string }[];
}

interface SavedMessage {
  id: string;
  copies: { id: string; to: string }[];
  messageRef: string;
  from: string;
  subject: string;
  messageId: string;
  text: string | null;
  html: string | null;
  attachments: EmulatorAttachment[];
  group: string | null;
  created: string;
  read: boolean;
  tags: string[];
}

/** The data directory of one running emulator. */
export class DataDir {
  readonly path: string;
  readonly #state: EmulatorState;
  readonly #onError: (err: unknown) => void;
  readonly #files = new Map<string, string>();
  #nextOrder: number;
  #apiKey: string;
  #queue: Promise<void> = Promise.resolve();
  #stateSaveQueued = false;

  private constructor(
    path: string,
    state: EmulatorState,
    apiKey: string,
    nextOrder: number,
    onError: (err: unknown) => void,
  ) {
    this.path = path;
    this.#state = state;
    this.#apiKey = apiKey;
    this.#nextOrder = nextOrder;
    this.#onError = onError;
  }

  /**
   * Opens (creating it when needed) a data directory and puts what it holds
   * into `state`; from then on every change is written to it.
   * @param newApiKey the ready key to use when the directory holds none
   * @returns the directory, and the ready key to use
   */
  static async open(
    path: string,
    state: EmulatorState,
    newApiKey: string,
    onError: (err: unknown) => void,
  ): Promise<{ dataDir: DataDir; apiKey: string }> {
    await mkdir(join(path, MESSAGES), { recursive: true, mode: 0o700 });
    await mkdir(join(path, IMAGES), { recursive: true, mode: 0o700 });
    const saved = await readJson<SavedState>(join(path, STATE_FILE), true);
    const dataDir = new DataDir(path, state, saved?.apiKey ?? newApiKey, saved?.nextOrder ?? 1, onError);
    if (saved) await dataDir.#restoreState(saved);
    await dataDir.#restoreMessages();
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

  async #restoreState(saved: SavedState): Promise<void> {
    const { groups, images } = this.#state;
    for (const group of saved.groups ?? []) {
      groups.create(group.id);
      for (const m of group.members) groups.restoreMember(group.id, { ...m, addedAt: new Date(m.addedAt) });
    }
    for (const [token, ticket] of saved.tickets ?? []) groups.restoreTicket(token, ticket);
    for (const image of saved.images ?? []) {
      const data = await readFile(join(this.path, IMAGES, image.sha256)).catch(() => undefined);
      if (data)
        images.restore({
          sha256: image.sha256,
          data,
          mimeType: image.mimeType,
          lastUsedAt: new Date(image.lastUsedAt),
        });
    }
  }

  async #restoreMessages(): Promise<void> {
    const dir = join(this.path, MESSAGES);
    const names = (await readdir(dir)).filter((n) => n.endsWith('.json')).sort();
    // Only the newest fit; the rest go.
    const kept = names.slice(Math.max(0, names.length - this.#state.mail.maxMessages));
    for (const name of names.slice(0, names.length - kept.length)) await this.#remove(name.slice(0, -5));
    for (const name of kept) {
      const base = name.slice(0, -5);
      const saved = await readJson<SavedMessage>(join(dir, name));
      const raw = await readFile(join(dir, `${base}.eml`)).catch(() => undefined);
      if (!saved || !raw || !Array.isArray(saved.copies) || saved.copies.length === 0) {
        await this.#remove(base);
        continue;
      }
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
          text: saved.text ?? undefined,
          html: saved.html ?? undefined,
          attachments: saved.attachments ?? [],
          group: saved.group ?? undefined,
        },
        new Date(saved.created),
        { id: saved.id, copyIds: saved.copies.map((c) => c.id), read: saved.read === true, tags: saved.tags ?? [] },
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
      for (const image of live) {
        await writeFile(join(this.path, IMAGES, image.sha256), image.data, { mode: 0o600, flag: 'wx' }).catch(
          (err: NodeJS.ErrnoException) => {
            if (err.code !== 'EEXIST') throw err;
          },
        );
      }
      const saved: SavedState = {
        version: 1,
        apiKey: this.#apiKey,
        nextOrder: this.#nextOrder,
        groups: groups.ids().map((id) => ({
          id,
          members: (groups.members(id) ?? []).map((m) => ({ ...m, addedAt: m.addedAt.toISOString() })),
        })),
        tickets: groups.tickets(),
        images: live.map((i) => ({ sha256: i.sha256, mimeType: i.mimeType, lastUsedAt: i.lastUsedAt.toISOString() })),
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
    text: m.text ?? null,
    html: m.html ?? null,
    attachments: copy.attachments,
    group: m.group ?? null,
    created: m.created.toISOString(),
    read: m.read,
    tags: m.tags,
  };
}

async function readJson<T>(path: string, required = false): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    return JSON.parse(text) as T;
  } catch (err) {
    if (!required) return undefined;
    throw new EmlApiError(
      'ECONFIG',
      `The emulator's data directory holds a damaged ${path}: ${(err as Error).message}`,
      {
        cause: err,
        permanent: true,
      },
    );
  }
}

/** Writes a file whole or not at all (a crash mid-write leaves the old one). */
async function atomicWrite(path: string, text: string): Promise<void> {
  const temp = `${path}.tmp`;
  await writeFile(temp, text, { mode: 0o600 });
  await rename(temp, path);
}
