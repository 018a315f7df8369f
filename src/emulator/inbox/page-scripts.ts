/*
 * The inbox pages' scripts, inlined under each page's CSP nonce. Plain
 * browser JavaScript in strings: the package's TypeScript has no DOM types.
 * Rows arrive as HTML the server escaped (see message-row.ts).
 */

/** The message list: prepends rows announced on /inbox/events, empties the list on a reset. */
export const LIST_SCRIPT = `
(() => {
  const table = document.getElementById('messages');
  const rows = document.getElementById('message-rows');
  const empty = document.getElementById('empty');
  const count = document.getElementById('count');
  const live = document.getElementById('live');
  const limit = Number(table.dataset.limit);
  let total = Number(count.dataset.total);
  const show = () => {
    count.dataset.total = String(total);
    count.textContent = total + (total === 1 ? ' message' : ' messages');
    table.hidden = total === 0;
    empty.hidden = total !== 0;
  };
  const setLive = (on) => {
    live.className = on ? 'live on' : 'live off';
    live.textContent = on ? 'Live' : 'Reconnecting\\u2026';
  };
  const events = new EventSource('/inbox/events?since=' + encodeURIComponent(table.dataset.cursor));
  events.onopen = () => setLive(true);
  events.onerror = () => setLive(false);
  events.addEventListener('delivery', (event) => {
    const delivery = JSON.parse(event.data);
    if (document.getElementById(delivery.id)) return;
    rows.insertAdjacentHTML('afterbegin', delivery.row);
    while (rows.rows.length > limit) rows.deleteRow(-1);
    total += 1;
    show();
  });
  events.addEventListener('reset', (event) => {
    rows.replaceChildren();
    total = Number(JSON.parse(event.data).before) || 0;
    show();
  });
})();
`;

/** The message view: turns the HTML, text, headers and raw sections into tabs (all sections show without script). */
export const TABS_SCRIPT = `
(() => {
  const tabs = [...document.querySelectorAll('.tabs [role=tab]')];
  const select = (tab) => {
    for (const other of tabs) {
      const on = other === tab;
      other.setAttribute('aria-selected', String(on));
      other.tabIndex = on ? 0 : -1;
      document.getElementById(other.getAttribute('aria-controls')).hidden = !on;
    }
  };
  for (const tab of tabs) {
    tab.addEventListener('click', () => {
      select(tab);
      history.replaceState(null, '', '#' + tab.dataset.tab);
    });
  }
  select(tabs.find((tab) => '#' + tab.dataset.tab === location.hash) ?? tabs[0]);
})();
`;

/** The groups page: refreshes its content every two seconds while it is open. */
export const GROUPS_SCRIPT = `
(() => {
  const main = document.querySelector('main');
  setInterval(async () => {
    try {
      const response = await fetch(location.pathname, { cache: 'no-store' });
      if (!response.ok) return;
      const next = new DOMParser().parseFromString(await response.text(), 'text/html').querySelector('main');
      if (next && next.innerHTML !== main.innerHTML) main.innerHTML = next.innerHTML;
    } catch {
      // The emulator stopped or restarted: try again at the next tick.
    }
  }, 2000);
})();
`;
