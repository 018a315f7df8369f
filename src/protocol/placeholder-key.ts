/**
 * The placeholder-key rule of the wire contract: substitution keys and image
 * names are 1 to 64 letters, digits, `_`, `-` or `.`, written `{{key}}` on the
 * wire and accepted with or without braces from people. Every check runs in
 * linear time on a length-capped input.
 */

/** Longest placeholder key. */
export const MAX_PLACEHOLDER_KEY = 64;

/** What {@link isPlaceholderKey} allows, for error messages. */
export const PLACEHOLDER_KEY_RULE = `1-${MAX_PLACEHOLDER_KEY} letters, digits, "_", "-" or "."`;

const KEY = /^[A-Za-z0-9_.-]+$/;

/** Whether `key` (without braces) is a valid placeholder key. */
export function isPlaceholderKey(key: string): boolean {
  return key.length > 0 && key.length <= MAX_PLACEHOLDER_KEY && KEY.test(key);
}

/**
 * `{{ key }}` → `key`: trims, then removes one pair of surrounding double
 * braces and the spaces inside them. Text without braces comes back trimmed.
 *
 * @example
 * stripBraces(' {{ first_name }} '); // 'first_name'
 * stripBraces('first_name');         // 'first_name'
 */
export function stripBraces(text: string): string {
  const trimmed = text.trim();
  if (trimmed.length >= 4 && trimmed.startsWith('{{') && trimmed.endsWith('}}')) return trimmed.slice(2, -2).trim();
  return trimmed;
}

/** `key` → `{{key}}`, the form keys take on the wire. */
export function bracedKey(key: string): string {
  return `{{${key}}}`;
}

/** Whether `text` is a key in its wire form, `{{key}}`, braces included and no spaces. */
export function isBracedPlaceholderKey(text: string): boolean {
  return text.startsWith('{{') && text.endsWith('}}') && isPlaceholderKey(text.slice(2, -2));
}

/**
 * A placeholder in content: `{{key}}`, spaces allowed inside the braces. The
 * character classes are disjoint, so matching stays linear.
 */
export const PLACEHOLDER_PATTERN = /\{\{\s*([^{}\s]+)\s*\}\}/g;
