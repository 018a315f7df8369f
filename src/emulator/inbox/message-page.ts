import { simpleParser, type AddressObject } from 'mailparser';
import { headerSectionLength, parseHeaderFields } from '../../protocol/header-fields.js';
import type { DeliveredMessage } from '../state/emulator-records.js';
import type { EmulatorState } from '../state/emulator-state.js';
import type { PageAnswer } from '../pages/public-routes.js';
import { escapeHtml } from '../operations/render-placeholders.js';
import { formatSize, timeElement } from './inbox-format.js';
import { inboxPage } from './inbox-layout.js';
import { TABS_SCRIPT } from './inbox-scripts.js';
import { attachmentName } from './message-files.js';
import { groupOf, messagePath } from './message-row.js';

/** Raw source shown inline up to this many bytes; the raw link has all of it. */
export const RAW_PREVIEW_BYTES = 256 * 1024;

/** The iframe's sandbox: no scripts, forms or same-origin access; links may open new tabs. */
export const FRAME_SANDBOX = 'allow-popups allow-popups-to-escape-sandbox';

interface Panel {
  tab: string;
  label: string;
  content: string;
}

/** `GET /inbox/messages/{id}`: one delivered copy with its HTML (sandboxed), text, headers, raw source and attachments. */
export async function messagePage(state: EmulatorState, copy: DeliveredMessage): Promise<PageAnswer> {
  const base = messagePath(copy.id);
  const group = groupOf(state, copy);
  const fields = parseHeaderFields(copy.raw);
  // Only the header section: names in From, To and Cc decoded (RFC 2047) without reading the body.
  const head = await simpleParser(copy.raw.subarray(0, headerSectionLength(copy.raw)));
  const cc = addressText(head.cc);
  const meta: [string, string][] = [
    ['From', escapeHtml(addressText(head.from) ?? copy.from)],
    ['To', escapeHtml(addressText(head.to) ?? copy.to)],
    ...(cc === undefined ? [] : [['Cc', escapeHtml(cc)] as [string, string]]),
    ['Delivered to', escapeHtml(copy.to)],
    ['Received', timeElement(copy.deliveredAt)],
    ['Message-ID', `<code>${escapeHtml(copy.messageId)}</code>`],
    ...(group === undefined ? [] : [['Group', escapeHtml(group)] as [string, string]]),
  ];

  const files = copy.attachments.map((a, i) => {
    const name = attachmentName(a, i);
    const details = [a.contentType, formatSize(a.size), ...(a.disposition === 'inline' ? ['inline'] : [])];
    return `<li><a class="attachment" href="${escapeHtml(`${base}/attachments/${i}`)}" download>${escapeHtml(name)}</a>
<span class="muted">${escapeHtml(details.join(' \u00b7 '))}</span></li>`;
  });

  const raw = copy.raw.subarray(0, RAW_PREVIEW_BYTES).toString('utf8');
  const panels: Panel[] = [
    ...(copy.html === undefined
      ? []
      : [
          {
            tab: 'html',
            label: 'HTML',
            content: `<iframe id="html-body" title="HTML body of the message" sandbox="${FRAME_SANDBOX}" referrerpolicy="no-referrer" src="${escapeHtml(`${base}/html`)}"></iframe>`,
          },
        ]),
    {
      tab: 'text',
      label: 'Text',
      content:
        copy.text === undefined
          ? '<p class="empty">This message has no plain-text part.</p>'
          : `<pre id="text-body">${escapeHtml(copy.text)}</pre>`,
    },
    {
      tab: 'headers',
      label: 'Headers',
      content: `<table class="headers"><tbody>
${fields.map((f) => `<tr><td>${escapeHtml(f.name)}</td><td>${escapeHtml(f.value)}</td></tr>`).join('\n')}
</tbody></table>`,
    },
    {
      tab: 'raw',
      label: 'Raw',
      content: `<pre id="raw-source">${escapeHtml(raw)}</pre>
<p class="note">${copy.raw.length > RAW_PREVIEW_BYTES ? `Showing the first ${formatSize(RAW_PREVIEW_BYTES)} of ${formatSize(copy.raw.length)}. ` : ''}<a href="${escapeHtml(`${base}/raw`)}">Open the raw source</a> \u00b7 <a href="${escapeHtml(`${base}/raw`)}" download="${escapeHtml(copy.id)}.eml">Download .eml</a></p>`,
    },
  ];

  const main = `<p><a href="/">\u2190 Inbox</a></p>
<div class="head"><h1 id="subject">${escapeHtml(copy.subject || '(no subject)')}</h1>${group === undefined ? '' : `<span class="badge">group: ${escapeHtml(group)}</span>`}</div>
<div class="card"><dl class="meta">
${meta.map(([name, value]) => `<dt>${name}</dt><dd>${value}</dd>`).join('\n')}
</dl></div>
${files.length === 0 ? '' : `<div class="card" id="attachments"><h2>Attachments</h2><ul class="files">\n${files.join('\n')}\n</ul></div>`}
<div class="card">
<div class="tabs" role="tablist" aria-label="Message parts">
${panels.map((p) => `<button type="button" role="tab" id="tab-${p.tab}" data-tab="${p.tab}" aria-controls="panel-${p.tab}">${p.label}</button>`).join('')}
</div>
${panels.map((p) => `<section class="panel" id="panel-${p.tab}" role="tabpanel" aria-labelledby="tab-${p.tab}"><h2>${p.label}</h2>\n${p.content}\n</section>`).join('\n')}
</div>`;
  return inboxPage({ title: copy.subject || '(no subject)', current: 'inbox', main, script: TABS_SCRIPT });
}

function addressText(value: AddressObject | AddressObject[] | undefined): string | undefined {
  if (!value) return undefined;
  const text = (Array.isArray(value) ? value : [value]).map((a) => a.text).join(', ');
  return text || undefined;
}
