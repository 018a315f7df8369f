/**
 * A module-private side table: what one part of the package reaches in an
 * object of another beyond its public type (the transport reaches its
 * client's request engine), without putting it on the public type.
 *
 * @param what names the objects in the error for a foreign one, e.g. `EmlApiClient`
 * @example
 * const internals = privateRegistry<{ requester: Requester }>('EmlApiClient');
 * internals.register(client, { requester });
 * internals.get(client).requester;
 */
export function privateRegistry<T>(what: string): {
  register(owner: object, value: T): void;
  get(owner: object): T;
} {
  const table = new WeakMap<object, T>();
  return {
    register: (owner, value) => void table.set(owner, value),
    get(owner) {
      const value = table.get(owner);
      if (value === undefined) throw new TypeError(`not an ${what} of this package`);
      return value;
    },
  };
}
