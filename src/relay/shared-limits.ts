import { randomBytes } from 'node:crypto';
import {
  AuthFailureBudget,
  useFingerprintKey,
  type AuthAttempt,
  type AuthFailureBudgetOptions,
} from './relay-users.js';

/**
 * What the per-client limits count with: the connections of each client key
 * and the AUTH failure budgets. The processes of `eml-api relay --processes`
 * count in their primary, so that a client cannot spread its connections or
 * its guesses over the processes.
 */
export interface ClientCounts {
  /**
   * Takes one of the key's slots of `kind`, unless `cap` are taken.
   * @returns whether it was taken (a promise when the count is kept elsewhere)
   */
  take(kind: SlotKind, key: string, cap: number): boolean | Promise<boolean>;
  /** Gives back a slot taken. */
  give(kind: SlotKind, key: string): void;
  /** The AUTH failure budget called `name`, made with `options` the first time. */
  authBudget(name: AuthBudgetName, options: AuthFailureBudgetOptions): AuthBudget;
}

/** What a slot counts: an accepted socket, or an admitted session. */
export type SlotKind = 'socket' | 'session';

/** The two AUTH budgets: per client address, and per address and user name. */
export type AuthBudgetName = 'address' | 'user';

/** An AUTH failure budget as the sessions use it: {@link AuthFailureBudget}, or its primary's over IPC. */
export interface AuthBudget {
  begin(key: string): AuthAttempt | number | Promise<AuthAttempt | number>;
  retryAfter(key: string): number | Promise<number>;
  record(key: string, fingerprint: string): void;
}

/** The counts of one process: the relay's own, when it runs alone. */
export class LocalClientCounts implements ClientCounts {
  readonly #counts = { socket: new Map<string, number>(), session: new Map<string, number>() };

  take(kind: SlotKind, key: string, cap: number): boolean {
    const counts = this.#counts[kind];
    const count = counts.get(key) ?? 0;
    if (count >= cap) return false;
    counts.set(key, count + 1);
    return true;
  }

  give(kind: SlotKind, key: string): void {
    const counts = this.#counts[kind];
    const left = (counts.get(key) ?? 1) - 1;
    if (left > 0) counts.set(key, left);
    else counts.delete(key);
  }

  authBudget(_name: AuthBudgetName, options: AuthFailureBudgetOptions): AuthBudget {
    return new AuthFailureBudget(options);
  }
}

/** How a process of the relay reaches its primary (cluster IPC). */
export interface PrimaryLink {
  /** Asks the primary; resolves with its answer, or `undefined` when it is gone. */
  ask(what: string, args: unknown): Promise<unknown>;
  /** Tells the primary, expecting no answer. */
  tell(what: string, args: unknown): void;
}

/**
 * The counts of a process of `eml-api relay --processes`, kept by its
 * primary ({@link ClientLimitsKeeper}). Without an answer (the primary is
 * gone, and the process with it) a slot is refused and an AUTH waits.
 */
export class SharedClientCounts implements ClientCounts {
  readonly #link: PrimaryLink;

  constructor(link: PrimaryLink) {
    this.#link = link;
  }

  /**
   * Takes the primary's key for the fingerprints of failed credentials, so that the same wrong
   * password counts once whichever process it comes to.
   */
  async join(): Promise<void> {
    const key = await this.#link.ask('limits.fingerprintKey', undefined);
    if (typeof key === 'string') useFingerprintKey(Buffer.from(key, 'base64'));
  }

  async take(kind: SlotKind, key: string, cap: number): Promise<boolean> {
    return (await this.#link.ask('limits.take', { kind, key, cap })) === true;
  }

  give(kind: SlotKind, key: string): void {
    this.#link.tell('limits.give', { kind, key });
  }

  authBudget(name: AuthBudgetName, options: AuthFailureBudgetOptions): AuthBudget {
    const { limit, window } = options;
    const link = this.#link;
    return {
      async begin(key) {
        const answer = (await link.ask('limits.authBegin', { name, limit, window, key })) as
          { attempt: number } | { wait: number } | undefined;
        if (answer === undefined || 'wait' in answer) return answer?.wait ?? 1_000;
        let ended = false;
        return {
          end(failure) {
            if (ended) return;
            ended = true;
            link.tell('limits.authEnd', { attempt: answer.attempt, failure });
          },
        };
      },
      async retryAfter(key) {
        const wait = await link.ask('limits.authRetryAfter', { name, limit, window, key });
        return typeof wait === 'number' ? wait : 0;
      },
      record(key, fingerprint) {
        link.tell('limits.authRecord', { name, limit, window, key, fingerprint });
      },
    };
  }
}

/**
 * The per-client counts of every process of `eml-api relay --processes`,
 * kept in the primary. What a process held is given back when it exits: its
 * connections closed with it, and its AUTHs under way never end.
 */
export class ClientLimitsKeeper {
  readonly #counts = new LocalClientCounts();
  readonly #budgets = new Map<string, AuthFailureBudget>();
  /** Slots held, per process: `kind key` to count. */
  readonly #held = new Map<number, Map<string, number>>();
  readonly #attempts = new Map<number, { process: number; attempt: AuthAttempt }>();
  readonly #fingerprintKey = randomBytes(32).toString('base64');
  #nextAttempt = 1;

  /**
   * Answers a process's request (`limits.*`), or returns undefined for one that is not the limits'.
   * @returns `{ value }` with the answer for {@link PrimaryLink.ask}
   */
  handle(process: number, what: string, args: unknown): { value: unknown } | undefined {
    const a = (typeof args === 'object' && args !== null ? args : {}) as Record<string, unknown>;
    const kind = a.kind === 'session' ? 'session' : 'socket';
    const key = String(a.key);
    switch (what) {
      case 'limits.fingerprintKey':
        return { value: this.#fingerprintKey };
      case 'limits.take': {
        const taken = this.#counts.take(kind, key, Number(a.cap));
        if (taken) this.#hold(process, `${kind} ${key}`, 1);
        return { value: taken };
      }
      case 'limits.give':
        if (this.#hold(process, `${kind} ${key}`, -1)) this.#counts.give(kind, key);
        return { value: undefined };
      case 'limits.authBegin': {
        const begun = this.#budget(a).begin(key);
        if (typeof begun === 'number') return { value: { wait: begun } };
        const id = this.#nextAttempt++;
        this.#attempts.set(id, { process, attempt: begun });
        return { value: { attempt: id } };
      }
      case 'limits.authEnd': {
        const id = Number(a.attempt);
        this.#attempts.get(id)?.attempt.end(typeof a.failure === 'string' ? a.failure : undefined);
        this.#attempts.delete(id);
        return { value: undefined };
      }
      case 'limits.authRetryAfter':
        return { value: this.#budget(a).retryAfter(key) };
      case 'limits.authRecord':
        this.#budget(a).record(key, String(a.fingerprint));
        return { value: undefined };
      default:
        return undefined;
    }
  }

  /** Gives back what a process that exited held. */
  forget(process: number): void {
    for (const [slot, count] of this.#held.get(process) ?? []) {
      const space = slot.indexOf(' ');
      const kind = slot.slice(0, space) as SlotKind;
      for (let i = 0; i < count; i++) this.#counts.give(kind, slot.slice(space + 1));
    }
    this.#held.delete(process);
    for (const [id, { process: owner, attempt }] of this.#attempts) {
      if (owner !== process) continue;
      attempt.end(undefined);
      this.#attempts.delete(id);
    }
  }

  /** Slots held by every process (for tests and the log). */
  get held(): number {
    let total = 0;
    for (const slots of this.#held.values()) for (const count of slots.values()) total += count;
    return total;
  }

  /** Adds `change` to what a process holds of a slot; false when it held none to give back. */
  #hold(process: number, slot: string, change: 1 | -1): boolean {
    let slots = this.#held.get(process);
    if (!slots) this.#held.set(process, (slots = new Map()));
    const count = (slots.get(slot) ?? 0) + change;
    if (count < 0) return false;
    if (count === 0) slots.delete(slot);
    else slots.set(slot, count);
    return true;
  }

  #budget(a: Record<string, unknown>): AuthFailureBudget {
    const name = a.name === 'user' ? 'user' : 'address';
    let budget = this.#budgets.get(name);
    if (!budget) {
      budget = new AuthFailureBudget({ limit: Number(a.limit), window: Number(a.window) });
      this.#budgets.set(name, budget);
    }
    return budget;
  }
}
