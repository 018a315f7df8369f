/** A member's place, so it leaves in constant time. */
export interface Slot<T> {
  value: T;
  at: number;
}

/**
 * A churning collection (one member per call in flight), removed by swapping the last one into place. A long-lived
 * Set's table sits in the old generation and is replaced every few additions, and the table it leaves still points at
 * the members of then, keeping them and all they reach until a full collection.
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

  /** A copy: removing while iterating is safe. */
  items(): T[] {
    return this.#slots.map((slot) => slot.value);
  }
}
