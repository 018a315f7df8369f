import { html, raw } from '../pages/html.js';
import type { PageAnswer } from '../pages/page-answer.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { plural } from './display-format.js';
import { inboxPage } from './page-layout.js';
import { LIST_SCRIPT } from './page-scripts.js';
import { messageRow } from './message-row.js';

/** Most rows the list shows; older deliveries stay reachable by their URL. */
export const LIST_LIMIT = 500;

/** `GET /`: every delivered copy, newest first, kept up to date over /inbox/events. */
export function messageListPage(state: EmulatorState): PageAnswer {
  const total = state.mail.deliveryCount();
  const rows = state.mail
    .latestDeliveries(LIST_LIMIT)
    .map((copy, i) => html`${i > 0 ? '\n' : ''}${messageRow(state, copy)}`);
  const main = html`<div class="head"><h1>Inbox</h1>
<span id="count" class="muted" data-total="${total}">${plural(total, 'message')}</span>
<span id="live" class="live" aria-live="polite">Connecting\u2026</span></div>
<div class="card">
<table id="messages" class="messages" data-cursor="${state.mail.cursor()}" data-limit="${LIST_LIMIT}"${total === 0 ? raw(' hidden') : ''}>
<thead><tr><th scope="col">To</th><th scope="col" class="from">From</th><th scope="col">Subject</th><th scope="col">Received</th></tr></thead>
<tbody id="message-rows">
${rows}
</tbody></table>
<p id="empty" class="empty"${total === 0 ? '' : raw(' hidden')}>No messages yet. Send one through the API at <code>${state.baseUrl}</code> and it shows up here.</p>
</div>
${total > LIST_LIMIT ? html`<p class="muted">Showing the newest ${LIST_LIMIT} of ${total}.</p>` : ''}`;
  return inboxPage({ title: 'Inbox', current: 'inbox', main, script: LIST_SCRIPT });
}
