const PLACEHOLDER = /\{\{\s*([^{}\s]+)\s*\}\}/g;

/**
 * Replaces `{{key}}` placeholders in one pass, so a substituted value that
 * itself contains braces is never expanded again. Unknown placeholders stay.
 *
 * @param values keyed by bare name (`first_name`, `unsubscribe`, `logo`)
 * @param escape applied to substituted values (HTML escaping for html bodies)
 */
export function renderPlaceholders(
  template: string,
  values: ReadonlyMap<string, string>,
  escape = (v: string) => v,
): string {
  return template.replace(PLACEHOLDER, (whole, key: string) => {
    const value = values.get(key);
    return value === undefined ? whole : escape(value);
  });
}

/** `{{key}}` → `key`; a bare key stays as it is. */
export function bareKey(key: string): string {
  const m = /^\{\{\s*([^{}\s]+)\s*\}\}$/.exec(key);
  return m ? m[1]! : key;
}
