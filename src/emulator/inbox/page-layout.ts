import { randomBytes } from 'node:crypto';
import { html, raw, type SafeHtml } from '../pages/html.js';
import type { PageAnswer } from '../pages/page-answer.js';
import { INBOX_CSS } from './page-styles.js';

/** A small envelope icon, inline so the browser never asks for /favicon.ico. */
const FAVICON =
  "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect x='1' y='3' width='14' height='10' rx='2' fill='%232459d6'/%3E%3Cpath d='M2 4.5l6 4.5 6-4.5' stroke='white' stroke-width='1.4' fill='none'/%3E%3C/svg%3E";

/** Headers every inbox answer carries: nothing cached, nothing sniffed, no referrer. */
export const INBOX_HEADERS: Readonly<Record<string, string>> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

export interface InboxPage {
  status?: number;
  /** The `<title>`, as text. */
  title: string;
  /** Which top navigation link is current. */
  current?: 'inbox' | 'groups';
  /** The page content. */
  main: SafeHtml;
  /** A script for the end of the body, run under the page's nonce. */
  script?: string;
}

/**
 * Wraps inbox content in the common page: top bar, inline stylesheet and a
 * Content-Security-Policy that lets only this page's own inline script run
 * and only talk to the emulator.
 */
export function inboxPage(page: InboxPage): PageAnswer {
  const nonce = randomBytes(16).toString('base64');
  const link = (href: string, label: string, name: InboxPage['current']) =>
    html`<a href="${href}"${page.current === name ? raw(' aria-current="page"') : ''}>${label}</a>`;
  const body = html`<!doctype html>
<html lang="en" class="no-js"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${page.title}</title>
<link rel="icon" href="${raw(FAVICON)}">
<style>${raw(INBOX_CSS)}</style>
</head><body>
<header class="bar"><div class="brand">EML API <span>emulator</span></div>
<nav>${link('/', 'Inbox', 'inbox')}${link('/inbox/groups', 'Groups', 'groups')}</nav></header>
<main>
${page.main}
</main>
<script nonce="${nonce}">document.documentElement.className = 'js';${raw(page.script ?? '')}</script>
</body></html>
`;
  return {
    status: page.status ?? 200,
    contentType: 'text/html; charset=utf-8',
    body,
    headers: {
      ...INBOX_HEADERS,
      'content-security-policy': [
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        'img-src data:',
        `script-src 'nonce-${nonce}'`,
        "connect-src 'self'",
        "frame-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
      ].join('; '),
    },
  };
}

/** The inbox's "not found" page, with HTTP 404. */
export function notFoundPage(what: string, detail: string): PageAnswer {
  return inboxPage({
    status: 404,
    title: `${what} not found`,
    main: html`<div class="head"><h1>${what} not found</h1></div>
<div class="card"><p class="empty">${detail} <a href="/">Back to the inbox</a></p></div>`,
  });
}
