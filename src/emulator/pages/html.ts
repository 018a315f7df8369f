import { escapeHtml } from '../../shared/escape-html.js';

/** HTML that is safe to insert as it is: built by {@link html} or marked by {@link raw}. */
export class SafeHtml {
  constructor(readonly value: string) {}

  toString(): string {
    return this.value;
  }
}

/**
 * A template tag for the emulator's pages that escapes every value by
 * default: strings, numbers and dates become text, arrays are joined,
 * `undefined`, `null` and `false` vanish, and only {@link SafeHtml} (nested
 * `html` templates, {@link raw}) goes in as markup.
 *
 * @example
 * html`<td>${member.email}</td>${rows}`; // member.email escaped, rows (SafeHtml[]) kept
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let out = strings[0] ?? '';
  for (let i = 0; i < values.length; i++) out += render(values[i]) + (strings[i + 1] ?? '');
  return new SafeHtml(out);
}

/** Marks trusted markup (the page's own constants) to go into {@link html} unescaped. */
export function raw(markup: string): SafeHtml {
  return new SafeHtml(markup);
}

function render(value: unknown): string {
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === undefined || value === null || value === false) return '';
  return escapeHtml(String(value));
}
