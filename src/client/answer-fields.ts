/** Lenient readers of the service's JSON answers: a field of the wrong type reads as undefined. */

export function objectOrUndefined<T>(value: T | undefined): T | undefined {
  return typeof value === 'object' && value !== null ? value : undefined;
}

export function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

export function numberOrUndefined(value: unknown): number | undefined {
  return typeof value === 'number' ? value : undefined;
}
