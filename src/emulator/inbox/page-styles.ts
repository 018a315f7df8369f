/** The inbox pages' stylesheet, inlined in every page (no external fonts or files). */
export const INBOX_CSS = `
:root{color-scheme:light dark;--bg:#f5f6f8;--fg:#1c2230;--muted:#667085;--card:#fff;--line:#e3e6ec;--hover:#f0f4ff;
--accent:#2459d6;--badge:#eef2ff;--badge-fg:#3538a8;--soft:#f7f8fa;--ok:#16a34a;--warn:#d97706}
@media (prefers-color-scheme:dark){:root{--bg:#0f1217;--fg:#e5e7eb;--muted:#9aa3b2;--card:#171b22;--line:#2a303b;
--hover:#1d2433;--accent:#7aa7ff;--badge:#232a4a;--badge-fg:#c7d2fe;--soft:#12161c}}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
background:var(--bg);color:var(--fg)}
a{color:var(--accent)}
.bar{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem 1.75rem;padding:.7rem 1.5rem;background:var(--card);
border-bottom:1px solid var(--line)}
.brand{font-weight:650;letter-spacing:-.01em}
.brand span{color:var(--muted);font-weight:400}
.bar nav{display:flex;gap:1.25rem}
.bar nav a{color:var(--muted);text-decoration:none;padding:.2rem 0;border-bottom:2px solid transparent}
.bar nav a[aria-current=page]{color:var(--fg);border-bottom-color:var(--accent)}
main{max-width:76rem;margin:1.5rem auto 3rem;padding:0 1.5rem}
h1{font-size:1.35rem;line-height:1.3;margin:0;overflow-wrap:anywhere}
h2{font-size:1.05rem;margin:0}
.head{display:flex;flex-wrap:wrap;align-items:baseline;gap:.5rem 1rem;margin-bottom:1rem}
.muted{color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;overflow:hidden;margin-bottom:1.25rem}
.card>h2,.card>.card-head{padding:.8rem 1rem;border-bottom:1px solid var(--line)}
.card-head{display:flex;flex-wrap:wrap;align-items:baseline;gap:.25rem 1rem}
table{width:100%;border-collapse:collapse}
th,td{text-align:left;padding:.6rem 1rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:.75rem;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);font-weight:600;background:var(--soft)}
tbody tr:last-child td{border-bottom:0}
.messages tbody tr{position:relative}
.messages tbody tr:hover{background:var(--hover)}
.messages .subject a{color:inherit;font-weight:600;text-decoration:none;overflow-wrap:anywhere}
.messages .subject a::after{content:"";position:absolute;inset:0}
.messages td.addr{overflow-wrap:anywhere}
.messages tr.new{animation:arrive 2s ease-out}
@keyframes arrive{from{background:#fff4c2}}
.empty{padding:2.5rem 1rem;text-align:center;color:var(--muted)}
.badge{display:inline-block;font-size:.72rem;font-weight:600;line-height:1.6;padding:0 .55rem;border-radius:999px;
background:var(--badge);color:var(--badge-fg);margin-left:.35rem;white-space:nowrap;vertical-align:1px}
time{white-space:nowrap;color:var(--muted);font-variant-numeric:tabular-nums}
.live{font-size:.8rem;color:var(--muted);display:inline-flex;align-items:center;gap:.35rem}
.live::before{content:"";width:.55rem;height:.55rem;border-radius:50%;background:var(--muted)}
.live.on::before{background:var(--ok)}
.live.off::before{background:var(--warn)}
code,pre{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace}
pre{margin:0;padding:1rem;white-space:pre-wrap;overflow-wrap:anywhere}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.35rem 1.25rem;margin:0;padding:1rem}
dl.meta dt{color:var(--muted)}
dl.meta dd{margin:0;overflow-wrap:anywhere}
ul.files{list-style:none;margin:0;padding:.4rem 0}
ul.files li{padding:.35rem 1rem}
.tabs{display:flex;gap:.25rem;padding:.5rem .75rem 0;border-bottom:1px solid var(--line);background:var(--soft)}
.tabs button{font:inherit;color:var(--muted);background:none;border:0;border-bottom:2px solid transparent;
padding:.45rem .8rem;cursor:pointer}
.tabs button[aria-selected=true]{color:var(--fg);border-bottom-color:var(--accent)}
.no-js .tabs{display:none}
.panel>h2{padding:.8rem 1rem 0}
.js .panel>h2{display:none}
iframe{display:block;width:100%;height:70vh;min-height:20rem;border:0;background:#fff;resize:vertical}
.headers td:first-child{white-space:nowrap;color:var(--muted);width:1%}
.headers td{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
.members{table-layout:fixed}
.members th:nth-child(1){width:30%}.members th:nth-child(2){width:20%}.members th:nth-child(4){width:15.5rem}
.members td{overflow-wrap:anywhere}
.note{padding:.6rem 1rem;border-top:1px solid var(--line);font-size:.9rem}
.subs code{display:inline-block;margin:0 .5rem .2rem 0;padding:0 .35rem;border-radius:4px;background:var(--soft);
border:1px solid var(--line)}
@media (max-width:700px){.messages .from,.messages thead{display:none}.messages td{display:block;border:0;padding:.15rem 1rem}
.messages tr{display:block;padding:.5rem 0;border-bottom:1px solid var(--line)}}
`;
