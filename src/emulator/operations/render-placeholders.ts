import { PLACEHOLDER_PATTERN } from '../../protocol/placeholder-key.js';

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
  return template.replace(PLACEHOLDER_PATTERN, (whole, key: string) => {
    const value = values.get(key);
    return value === undefined ? whole : escape(value);
  });
}
