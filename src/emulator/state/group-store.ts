import { randomBytes } from 'node:crypto';

/** A member of a group, as the emulator keeps it. */
export interface GroupMember {
  /** Address as last added (case kept). */
  email: string;
  name: string | undefined;
  /** Substitutions keyed `{{key}}`. */
  substitutions: Record<string, string>;
  /** When the member was first added. */
  addedAt: Date;
}

/** An unsubscribe link's target. */
export interface UnsubscribeTicket {
  groupId: string;
  email: string;
}

/**
 * Groups and their members, keyed by lower-cased address, plus the
 * unsubscribe tokens handed out in group emails.
 */
export class GroupStore {
  readonly #groups = new Map<string, Map<string, GroupMember>>();
  readonly #tickets = new Map<string, UnsubscribeTicket>();

  /** Creates a group (groups are made out of band, never through the API). No-op when it exists. */
  create(groupId: string): void {
    if (!this.#groups.has(groupId)) this.#groups.set(groupId, new Map());
  }

  has(groupId: string): boolean {
    return this.#groups.has(groupId);
  }

  ids(): string[] {
    return [...this.#groups.keys()];
  }

  /** Members of a group in the order they were first added; undefined for an unknown group. */
  members(groupId: string): GroupMember[] | undefined {
    const group = this.#groups.get(groupId);
    return group ? [...group.values()] : undefined;
  }

  /** Adds a member, or updates name and substitutions of an existing one. */
  upsert(groupId: string, member: Omit<GroupMember, 'addedAt'>, now: Date): void {
    const group = this.#require(groupId);
    const key = member.email.toLowerCase();
    const existing = group.get(key);
    group.set(key, { ...member, addedAt: existing?.addedAt ?? now });
  }

  /** Removes a member. @returns whether it was a member */
  remove(groupId: string, email: string): boolean {
    return this.#require(groupId).delete(email.toLowerCase());
  }

  isMember(groupId: string, email: string): boolean {
    return this.#require(groupId).has(email.toLowerCase());
  }

  /** Hands out a single-use unsubscribe token for one member of one group. */
  issueUnsubscribeToken(groupId: string, email: string): string {
    const token = randomBytes(24).toString('base64url');
    this.#tickets.set(token, { groupId, email });
    return token;
  }

  /** The ticket of a token, if it is known and unused. */
  ticket(token: string): UnsubscribeTicket | undefined {
    return this.#tickets.get(token);
  }

  /**
   * Uses a token: removes its member from its group and retires every token of
   * that member in that group. @returns the ticket, or undefined when unknown or used
   */
  redeem(token: string): UnsubscribeTicket | undefined {
    const ticket = this.#tickets.get(token);
    if (!ticket) return undefined;
    for (const [other, t] of this.#tickets) {
      if (t.groupId === ticket.groupId && t.email.toLowerCase() === ticket.email.toLowerCase())
        this.#tickets.delete(other);
    }
    this.#groups.get(ticket.groupId)?.delete(ticket.email.toLowerCase());
    return ticket;
  }

  /** Empties every group (groups stay) and forgets all tokens. */
  clearMembers(): void {
    for (const group of this.#groups.values()) group.clear();
    this.#tickets.clear();
  }

  #require(groupId: string): Map<string, GroupMember> {
    const group = this.#groups.get(groupId);
    if (!group) throw new Error(`unknown group ${groupId}`);
    return group;
  }
}
