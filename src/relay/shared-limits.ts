import { randomBytes } from 'node:crypto';
import {
  AuthFailureBudget,
  useFingerprintKey,
  type AuthAttempt,
  type AuthFailureBudgetOptions,
} from './relay-users.js';

/**
 * The per-client connection counts and AUTH budgets. The processes of `--processes` count in their primary, so a
 * client cannot spread its connections or its guesses over them.
 */
export interface ClientCounts {
  /** @returns whether one of the key's `cap` slots was taken (a promise when counted elsewhere) */
  take(kind: SlotKind, key: string, cap: number): boolean | Promise<boolean>;
  give(kind: SlotKind, key: string): void;
  /** Made with `options` the first time. */
  authBudget(name: AuthBudgetName, options: AuthFailureBudgetOptions): AuthBudget;
}

/** What a slot counts: an accepted socket, or an admitted session. */
export type SlotKind = 'socket' | 'session';

/** The two AUTH budgets: per client address, and per address and user name. */
export type AuthBudgetName = 'address' | 'user';

/** {@link AuthFailureBudget}, or its primary's over IPC. */
export interface AuthBudget {
  begin(key: string): AuthAttempt | number | Promise<AuthAttempt | number>;
  retryAfter(key: string): number | Promise<number>;
  record(key: string, fingerprint: string): void;
}

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

/** Cluster IPC to the primary. */
export interface PrimaryLink {
  /** Resolves `undefined` when the primary is gone. */
  ask(what: string, args: unknown): Promise<unknown>;
  tell(what: string, args: unknown): void;
}

/** Counts kept by the primary; without an answer (it is gone) a slot is refused and an AUTH waits. */
export class SharedClientCounts implements ClientCounts {
  readonly #link: PrimaryLink;

  constructor(link: PrimaryLink) {
    this.#link = link;
  }

  /** Shares the primary's fingerprint key, so a wrong password counts once whichever process gets it. */
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

/** The counts of every process, kept in the primary; what a process held is given back when it exits. */
export class ClientLimitsKeeper {
  readonly #counts = new LocalClientCounts();
  readonly #budgets = new Map<string, AuthFailureBudget>();
  /** Per process: `kind key` to count. */
  readonly #held = new Map<number, Map<string, number>>();
  readonly #attempts = new Map<number, { process: number; attempt: AuthAttempt }>();
  readonly #fingerprintKey = randomBytes(32).toString('base64');
  #nextAttempt = 1;

  /** Answers a `limits.*` request with `{ value }` for {@link PrimaryLink.ask}; undefined for another. */
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

  /** For tests and the log. */
  get held(): number {
    let total = 0;
    for (const slots of this.#held.values()) for (const count of slots.values()) total += count;
    return total;
  }

  /** False when the process held none to give back. */
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
