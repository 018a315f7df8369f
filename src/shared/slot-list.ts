/**
 * A collection for members that come and go all the time (the calls in
 * flight, the builds running), kept in an array.
 */

/** A member of a {@link SlotList}: where it sits, so it leaves in constant time. */
export interface Slot<T> {
  value: T;
  at: number;
}

/**
 * The members of a churning collection (one per call in flight), removed by
 * swapping the last one into their place. A Set would do, but a long-lived
 * Set's table is in the old generation and is replaced every few additions
 * (deleted entries are not reused), and the table it leaves behind still
 * points at the calls in flight then: the young-generation collector keeps
 * them, and all they reach, until a full collection.
 */
export class SlotList<T> {
  readonly #slots: Slot<T>[] = [];

  add(value: T): Slot<T> {
    const slot = { value, at: this.#slots.length };
    this.#slots.push(slot);
    return slot;
  }

  remove(slot: Slot<T>): void {
    const { at } = slot;
    if (at < 0) return;
    const last = this.#slots.pop()!;
    if (last !== slot) {
      this.#slots[at] = last;
      last.at = at;
    }
    slot.at = -1;
  }

  /** The members now (a copy: removing while iterating is safe). */
  items(): T[] {
    return this.#slots.map((slot) => slot.value);
  }
}
