import { booleanOption, objectOption, refuseUnknownKeys, share, wholeNumber } from './options-kit.js';

/** How one option is checked: `check` returns its value with its default, `range` is the docs table's range column. */
export interface OptionRule<T = unknown> {
  readonly range: string;
  /** `options` is the object as given, `checked` the results of the rules before this one. */
  check(value: unknown, option: string, options: Record<string, unknown>, checked: Record<string, unknown>): T;
}

/** One rule per key of `T`, none missing and none extra; the key order is the order checked and listed. */
export type OptionSchema<T> = { readonly [K in keyof Required<T>]: OptionRule };

/** What {@link checkOptions} returns for a schema: each rule's result by key. */
export type Checked<S> = { -readonly [K in keyof S]: S[K] extends OptionRule<infer T> ? T : never };

export function whole(min: number, max: number, fallback: number): OptionRule<number>;
export function whole(min: number, max: number, fallback?: number): OptionRule<number | undefined>;
export function whole(min: number, max: number, fallback?: number): OptionRule<number | undefined> {
  return {
    range: `${min} to ${max}`,
    check: (v, option) =>
      v === undefined && fallback === undefined ? undefined : wholeNumber(v, option, min, max, fallback),
  };
}

/** A whole number that must be given. */
export const required = (min: number, max: number): OptionRule<number> => ({
  range: `${min} to ${max}`,
  check: (v, option) => wholeNumber(v, option, min, max),
});

export const shareOf = (fallback: number): OptionRule<number> => ({
  range: '0 to 1',
  check: (v, option) => share(v, option, fallback),
});

export function bool(fallback: boolean): OptionRule<boolean>;
export function bool(fallback?: boolean): OptionRule<boolean | undefined>;
export function bool(fallback?: boolean): OptionRule<boolean | undefined> {
  return { range: 'true, false', check: (v, option) => booleanOption(v, option, fallback) };
}

/** An option whose check is its own (connections, loggers, TLS material, functions). */
export const custom = <T>(range: string, check: OptionRule<T>['check']): OptionRule<T> => ({ range, check });

/**
 * A nested object checked by `schema`, with the nearest-name suggestion under `option.`;
 * `absent` is the value without it, `shape` what the error says it should look like.
 */
export function nested<S extends Record<string, OptionRule>, R = Checked<S>>(
  schema: S,
  shape: string,
  absent: () => R,
  then: (checked: Checked<S>, option: string) => R = (c) => c as R,
): OptionRule<R> {
  return {
    range: shape,
    check: (v, option) => {
      if (v === undefined) return absent();
      return then(checkOptions(objectOption(v, option, shape), schema, `${option}.`), option);
    },
  };
}

/** Checks `options` against `schema`: unknown keys refused with the nearest name, then each rule in order. */
export function checkOptions<S extends Record<string, OptionRule>>(
  options: Record<string, unknown>,
  schema: S,
  where = '',
): Checked<S> {
  refuseUnknownKeys(options, Object.keys(schema), where);
  const checked = {} as Record<string, unknown>;
  for (const key of Object.keys(schema))
    checked[key] = schema[key]!.check(options[key], `${where}${key}`, options, checked);
  return checked as Checked<S>;
}

/** `schema`'s keys and ranges without their checks: for options another component checks. */
export const passedOn = <S extends Record<string, OptionRule>>(schema: S) =>
  Object.fromEntries(
    Object.entries(schema).map(([k, rule]) => [k, { range: rule.range, check: (v: unknown) => v }]),
  ) as unknown as { [K in keyof S]: OptionRule<unknown> };
