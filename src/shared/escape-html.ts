/**
 * Escapes text for HTML content and attribute values.
 *
 * @example
 * escapeHtml('<b>"Ann" & Bob</b>'); // '&lt;b&gt;&quot;Ann&quot; &amp; Bob&lt;/b&gt;'
 */
export function escapeHtml(value: string): string {
  return value
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}
