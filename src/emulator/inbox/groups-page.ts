import { html } from '../pages/html.js';
import type { PageAnswer } from '../pages/page-answer.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { plural, timeElement } from './display-format.js';
import { inboxPage } from './page-layout.js';
import { GROUPS_SCRIPT } from './page-scripts.js';

/** `GET /inbox/groups`: every group with its members and their substitutions. */
export function groupsPage(state: EmulatorState): PageAnswer {
  const ids = state.groups.ids();
  const cards = ids.map((id) => {
    const members = state.groups.members(id) ?? [];
    const rows = members.map((m) => {
      const subs = Object.entries(m.substitutions).map(([key, value]) => html`<code>${key} = ${value}</code>`);
      return html`<tr><td class="email">${m.email}</td><td>${m.name === undefined ? html`<span class="muted">\u2014</span>` : m.name}</td>
<td class="subs">${subs.length > 0 ? subs : html`<span class="muted">none</span>`}</td><td>${timeElement(m.addedAt)}</td></tr>`;
    });
    const body =
      members.length === 0
        ? html`<p class="empty">No members.</p>`
        : html`<table class="members"><thead><tr><th scope="col">Email</th><th scope="col">Name</th><th scope="col">Substitutions</th><th scope="col">Added</th></tr></thead>
<tbody>
${rows.map((row, i) => html`${i > 0 ? '\n' : ''}${row}`)}
</tbody></table>`;
    return html`<section class="card group" data-group="${id}">
<div class="card-head"><h2>${id}</h2><span class="muted">${plural(members.length, 'member')}</span></div>
${body}
</section>`;
  });
  const main = html`<div class="head"><h1>Groups</h1><span class="muted">${plural(ids.length, 'group')}</span></div>
${
  cards.length === 0
    ? html`<div class="card"><p class="empty">No groups yet. Groups are created out of band: <code>emu.createGroup('newsletter')</code>, the <code>groups</code> option, or <code>eml-api serve --group newsletter</code>.</p></div>`
    : cards.map((card, i) => html`${i > 0 ? '\n' : ''}${card}`)
}`;
  return inboxPage({ title: 'Groups', current: 'groups', main, script: GROUPS_SCRIPT });
}
