import type { EmulatorState } from '../state/emulator-state.js';
import type { PageAnswer } from '../pages/public-routes.js';
import { escapeHtml } from '../operations/render-placeholders.js';
import { plural, timeElement } from './inbox-format.js';
import { inboxPage } from './inbox-layout.js';
import { GROUPS_SCRIPT } from './inbox-scripts.js';

/** `GET /inbox/groups`: every group with its members and their substitutions. */
export function groupsPage(state: EmulatorState): PageAnswer {
  const ids = state.groups.ids();
  const cards = ids.map((id) => {
    const members = state.groups.members(id) ?? [];
    const rows = members.map((m) => {
      const subs = Object.entries(m.substitutions)
        .map(([key, value]) => `<code>${escapeHtml(key)} = ${escapeHtml(value)}</code>`)
        .join('');
      return `<tr><td class="email">${escapeHtml(m.email)}</td><td>${m.name === undefined ? '<span class="muted">\u2014</span>' : escapeHtml(m.name)}</td>
<td class="subs">${subs || '<span class="muted">none</span>'}</td><td>${timeElement(m.addedAt)}</td></tr>`;
    });
    const body =
      members.length === 0
        ? '<p class="empty">No members.</p>'
        : `<table class="members"><thead><tr><th scope="col">Email</th><th scope="col">Name</th><th scope="col">Substitutions</th><th scope="col">Added</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody></table>`;
    return `<section class="card group" data-group="${escapeHtml(id)}">
<div class="card-head"><h2>${escapeHtml(id)}</h2><span class="muted">${plural(members.length, 'member')}</span></div>
${body}
</section>`;
  });
  const main = `<div class="head"><h1>Groups</h1><span class="muted">${plural(ids.length, 'group')}</span></div>
${
  cards.length === 0
    ? `<div class="card"><p class="empty">No groups yet. Groups are created out of band: <code>emu.createGroup('newsletter')</code>, the <code>groups</code> option, or <code>eml-api serve --group newsletter</code>.</p></div>`
    : cards.join('\n')
}`;
  return inboxPage({ title: 'Groups', current: 'groups', main, script: GROUPS_SCRIPT });
}
