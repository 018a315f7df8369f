import type { AddressObject } from 'mailparser';
import { parseMime } from '../operations/mime-parser.js';
import { headerSectionLength, parseHeaderFields } from '../../protocol/header-fields.js';
import type { DeliveredMessage } from '../state/records.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { html, type SafeHtml } from '../pages/html.js';
import type { PageAnswer } from '../pages/page-answer.js';
import { formatSize, timeElement } from './display-format.js';
import { inboxPage } from './page-layout.js';
import { TABS_SCRIPT } from './page-scripts.js';
import { attachmentName } from './message-files.js';
import { groupOf, messagePath } from './message-row.js';

/** Raw source shown inline up to this many bytes; the raw link has all of it. */
export const RAW_PREVIEW_BYTES = 256 * 1024;

/** The iframe's sandbox: no scripts, forms or same-origin access; links may open new tabs. */
export const FRAME_SANDBOX = 'allow-popups allow-popups-to-escape-sandbox';

interface Panel {
  tab: string;
  label: string;
  content: SafeHtml;
}

/** `GET /inbox/messages/{id}`: one delivered copy with its HTML (sandboxed), text, headers, raw source and attachments. */
export async function messagePage(state: EmulatorState, copy: DeliveredMessage): Promise<PageAnswer> {
  const base = messagePath(copy.id);
  const group = groupOf(state, copy);
  const fields = parseHeaderFields(copy.raw);
  // Only the header section: names in From, To and Cc decoded (RFC 2047) without reading the body.
  const head = await parseMime(copy.raw.subarray(0, headerSectionLength(copy.raw)));
  const cc = addressText(head.cc);
  const meta: [string, string | SafeHtml][] = [
    ['From', addressText(head.from) ?? copy.from],
    ['To', addressText(head.to) ?? copy.to],
    ...(cc === undefined ? [] : [['Cc', cc] as [string, string]]),
    ['Delivered to', copy.to],
    ['Received', timeElement(copy.deliveredAt)],
    ['Message-ID', html`<code>${copy.messageId}</code>`],
    ...(group === undefined ? [] : [['Group', group] as [string, string]]),
  ];

  const files = copy.attachments.map((a, i) => {
    const name = attachmentName(a, i);
    const details = [a.contentType, formatSize(a.size), ...(a.disposition === 'inline' ? ['inline'] : [])];
    return html`<li><a class="attachment" href="${`${base}/attachments/${i}`}" download>${name}</a>
<span class="muted">${details.join(' \u00b7 ')}</span></li>`;
  });

  const raw = copy.raw.subarray(0, RAW_PREVIEW_BYTES).toString('utf8');
  const panels: Panel[] = [
    ...(copy.html === undefined
      ? []
      : [
          {
            tab: 'html',
            label: 'HTML',
            content: html`<iframe id="html-body" title="HTML body of the message" sandbox="${FRAME_SANDBOX}" referrerpolicy="no-referrer" src="${`${base}/html`}"></iframe>`,
          },
        ]),
    {
      tab: 'text',
      label: 'Text',
      content:
        copy.text === undefined
          ? html`<p class="empty">This message has no plain-text part.</p>`
          : html`<pre id="text-body">${copy.text}</pre>`,
    },
    {
      tab: 'headers',
      label: 'Headers',
      content: html`<table class="headers"><tbody>
${lines(fields, (f) => html`<tr><td>${f.name}</td><td>${f.value}</td></tr>`)}
</tbody></table>`,
    },
    {
      tab: 'raw',
      label: 'Raw',
      content: html`<pre id="raw-source">${raw}</pre>
<p class="note">${copy.raw.length > RAW_PREVIEW_BYTES ? `Showing the first ${formatSize(RAW_PREVIEW_BYTES)} of ${formatSize(copy.raw.length)}. ` : ''}<a href="${`${base}/raw`}">Open the raw source</a> \u00b7 <a href="${`${base}/raw`}" download="${copy.id}.eml">Download .eml</a></p>`,
    },
  ];

  const main = html`<p><a href="/">\u2190 Inbox</a></p>
<div class="head"><h1 id="subject">${copy.subject || '(no subject)'}</h1>${group === undefined ? '' : html`<span class="badge">group: ${group}</span>`}</div>
<div class="card"><dl class="meta">
${lines(meta, ([name, value]) => html`<dt>${name}</dt><dd>${value}</dd>`)}
</dl></div>
${files.length === 0 ? '' : html`<div class="card" id="attachments"><h2>Attachments</h2><ul class="files">\n${lines(files, (f) => f)}\n</ul></div>`}
<div class="card">
<div class="tabs" role="tablist" aria-label="Message parts">
${panels.map((p) => html`<button type="button" role="tab" id="tab-${p.tab}" data-tab="${p.tab}" aria-controls="panel-${p.tab}">${p.label}</button>`)}
</div>
${lines(panels, (p) => html`<section class="panel" id="panel-${p.tab}" role="tabpanel" aria-labelledby="tab-${p.tab}"><h2>${p.label}</h2>\n${p.content}\n</section>`)}
</div>`;
  return inboxPage({ title: copy.subject || '(no subject)', current: 'inbox', main, script: TABS_SCRIPT });
}

function addressText(value: AddressObject | AddressObject[] | undefined): string | undefined {
  if (!value) return undefined;
  const text = (Array.isArray(value) ? value : [value]).map((a) => a.text).join(', ');
  return text || undefined;
}

/** Items one per line, as the page's source shows them. */
function lines<T>(items: T[], line: (item: T) => SafeHtml): SafeHtml[] {
  return items.map((item, i) => html`${i > 0 ? '\n' : ''}${line(item)}`);
}
