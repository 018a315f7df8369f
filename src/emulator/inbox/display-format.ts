import { html, type SafeHtml } from '../pages/html.js';

/**
 * A timestamp of the emulator's clock as the inbox shows it, in UTC:
 * `2025-03-01 09:30:00 UTC`. Empty for an invalid date.
 */
export function formatTime(date: Date): string {
  if (Number.isNaN(date.getTime())) return '';
  return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** `<time>` element of {@link formatTime}, with the ISO timestamp in `datetime`. */
export function timeElement(date: Date): SafeHtml {
  if (Number.isNaN(date.getTime())) return html`<time></time>`;
  return html`<time datetime="${date.toISOString()}">${formatTime(date)}</time>`;
}

/** A byte count for people: `512 B`, `1.5 KB`, `2.0 MB`. */
export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** `1 attachment`, `2 attachments`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
