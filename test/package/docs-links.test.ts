import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { packedFiles } from './packed.js';

/**
 * The documentation's links hold: every relative link of README.md,
 * CHANGELOG.md, BENCHMARKS.md and docs/*.md points at a file of the
 * repository, and every `#anchor` (in the same page or another) names a
 * heading of the page it points at, by GitHub's rules for heading ids. Code
 * that names a section in words ("see "Operating" in the README",
 * `docs/outbox.md, "Options"`) names one that exists. And the pages the README
 * leads to ship in the package, so its links also work in node_modules.
 * Links to other sites are not followed (no network in tests).
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The Markdown pages whose links are checked, relative to the root. */
const PAGES = [
  'README.md',
  'CHANGELOG.md',
  'BENCHMARKS.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((file) => file.endsWith('.md'))
    .sort()
    .map((file) => `docs/${file}`),
];

/**
 * GitHub's id for a heading: its text as rendered (code spans, links and
 * emphasis reduced to their text), lower-cased, every character but letters,
 * digits, marks, `-`, `_` and spaces removed, spaces turned into `-`.
 */
export function slug(heading: string): string {
  const text = heading
    .replace(/<[^>]+>/g, '')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/`+([^`]*)`+/g, '$1')
    .replace(/[*~]/g, '')
    .replace(/(^|[^\p{L}\p{N}])_+([^_]+?)_+(?=[^\p{L}\p{N}]|$)/gu, '$1$2');
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

/** Each line of a page, with fenced code blocks blanked (kept as empty lines, so line numbers hold). */
function proseLines(text: string): string[] {
  const lines = text.split('\n');
  let fence: string | undefined;
  return lines.map((line) => {
    const opening = /^ {0,3}(`{3,}|~{3,})/.exec(line);
    if (fence === undefined) {
      if (opening) {
        fence = opening[1]!;
        return '';
      }
      return line;
    }
    if (opening && opening[1]![0] === fence[0] && opening[1]!.length >= fence.length && line.trim() === opening[1]) {
      fence = undefined;
    }
    return '';
  });
}

/** The ids a page's headings (and explicit `id`/`name` anchors) get, duplicates numbered as GitHub numbers them. */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const add = (id: string) => {
    const count = seen.get(id) ?? 0;
    seen.set(id, count + 1);
    anchors.add(count === 0 ? id : `${id}-${count}`);
  };
  const lines = proseLines(text);
  lines.forEach((line, i) => {
    const atx = /^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/.exec(line);
    if (atx) return add(slug(atx[1]!));
    const next = lines[i + 1] ?? '';
    const previous = lines[i - 1] ?? '';
    if (
      /^ {0,3}(=+|-+)[ \t]*$/.test(next) &&
      line.trim() !== '' &&
      !/^ {0,3}([-*+>|#]|\d+[.)])/.test(line) &&
      previous.trim() === ''
    ) {
      add(slug(line));
    }
    for (const m of line.matchAll(/<[a-z][^>]*\s(?:id|name)="([^"]+)"/gi)) anchors.add(m[1]!);
  });
  return anchors;
}

/** A link found in a page: where it is and where it points. */
interface Link {
  line: number;
  target: string;
}

/** The links of a page outside code: inline links and images, reference definitions, HTML href and src. */
export function linksOf(text: string): Link[] {
  const links: Link[] = [];
  proseLines(text).forEach((raw, i) => {
    // Code spans are not links; blank them out, keeping the length.
    const line = raw.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (m) => 'x'.repeat(m.length));
    for (const m of line.matchAll(/\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)/g)) {
      links.push({ line: i + 1, target: m[1]!.replace(/^<|>$/g, '') });
    }
    const definition = /^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)/.exec(line);
    if (definition) links.push({ line: i + 1, target: definition[1]!.replace(/^<|>$/g, '') });
    for (const m of line.matchAll(/\s(?:href|src)="([^"]+)"/g)) links.push({ line: i + 1, target: m[1]! });
  });
  return links;
}

const external = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');

const anchorCache = new Map<string, Set<string>>();
function anchorsOfFile(file: string): Set<string> {
  let anchors = anchorCache.get(file);
  if (!anchors) {
    anchors = anchorsOf(readFileSync(file, 'utf8'));
    anchorCache.set(file, anchors);
  }
  return anchors;
}

/** What is wrong with the links of `page` (relative to `root`): one line per broken link. */
export function brokenLinks(root: string, page: string): string[] {
  const file = join(root, page);
  const problems: string[] = [];
  for (const { line, target } of linksOf(readFileSync(file, 'utf8'))) {
    if (external(target)) continue;
    const where = `${page}:${line}: ${target}`;
    const hash = target.indexOf('#');
    const path = decodeURIComponent(hash === -1 ? target : target.slice(0, hash));
    const anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
    const destination = path === '' ? file : resolve(dirname(file), path);
    const inside = relative(root, destination);
    if (inside.startsWith('..') || inside.startsWith(sep)) {
      problems.push(`${where}: points outside the repository`);
      continue;
    }
    if (!existsSync(destination)) {
      problems.push(`${where}: no such file`);
      continue;
    }
    if (anchor === undefined) continue;
    if (!statSync(destination).isFile() || !destination.endsWith('.md')) {
      if (!/^L\d+(-L\d+)?$/.test(anchor)) problems.push(`${where}: an anchor into a file that is not Markdown`);
      continue;
    }
    if (!anchorsOfFile(destination).has(anchor)) {
      problems.push(`${where}: no heading with the id "${anchor}" in ${relative(root, destination)}`);
    }
  }
  return problems;
}

/** The plain texts of a page's headings, for sections named in words. */
function headingTexts(file: string): string[] {
  return proseLines(readFileSync(file, 'utf8'))
    .map((line) => /^ {0,3}#{1,6}[ \t]+(.*?)[ \t]*$/.exec(line)?.[1])
    .filter((text): text is string => text !== undefined)
    .map((text) => text.replace(/`/g, '').toLowerCase());
}

/** Files, relative to the root, under `dir` whose names end in one of `endings` (test fixtures left out). */
function filesUnder(dir: string, endings: string[]): string[] {
  if (!existsSync(join(ROOT, dir))) return [];
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .map((file) => join(dir, file))
    .filter((file) => endings.some((end) => file.endsWith(end)) && !file.includes(`${sep}fixtures${sep}`));
}

/**
 * Sections named in words: `"Operating" in the README`, `the README, "Security"`,
 * `docs/outbox.md, "Options"`. Comment markers and line breaks are taken out
 * first, so a name split over two comment lines is still found.
 */
export function namedSections(text: string): { page: string; section: string }[] {
  const flat = text.replace(/\r?\n[ \t]*(?:\*(?!\/)|\/\/|#)?[ \t]*/g, ' ').replace(/[ \t]+/g, ' ');
  const page = (name: string) => (name.startsWith('README') ? 'README.md' : name);
  const found: { page: string; section: string }[] = [];
  for (const m of flat.matchAll(/"([^"]{2,80})" (?:in|of) (?:the )?(README(?:\.md)?|docs\/[\w-]+\.md)/g)) {
    found.push({ page: page(m[2]!), section: m[1]! });
  }
  for (const m of flat.matchAll(/(README(?:\.md)?|docs\/[\w-]+\.md),? "([^"]{2,80})"/g)) {
    found.push({ page: page(m[1]!), section: m[2]! });
  }
  return found;
}

describe('the documentation', () => {
  it('gives headings the ids GitHub gives them', () => {
    expect(slug('How `verify()` works')).toBe('how-verify-works');
    expect(slug('`--trusted` and `--allow` are different lists')).toBe('--trusted-and---allow-are-different-lists');
    expect(slug('Health: `/healthz` and `/readyz`')).toBe('health-healthz-and-readyz');
    expect(slug('Metrics (`/metrics`, Prometheus text format)')).toBe('metrics-metrics-prometheus-text-format');
    expect(slug('An ambiguous `451` is not a duplicate')).toBe('an-ambiguous-451-is-not-a-duplicate');
    expect(slug('What `sendMail` resolves with')).toBe('what-sendmail-resolves-with');
    expect(slug('[0.1.0] - 2026-11-22')).toBe('010---2026-11-22');
    expect(slug('The way of a **queued** message')).toBe('the-way-of-a-queued-message');
    expect([...anchorsOf('# A\n\n## Options\n\n```sh\n# not a heading\n```\n\n### Options\n')]).toEqual([
      'a',
      'options',
      'options-1',
    ]);
  });

  it('finds every kind of link outside code, and only there', () => {
    const text = [
      'See [the outbox](docs/outbox.md#options "Options"), [here](#a) and ![logo](logo.png).',
      '`[not a link](nowhere.md)` and <a href="docs/cli.md">the CLI</a>',
      '```md',
      '[not a link either](nowhere.md)',
      '```',
      '[ref]: CHANGELOG.md',
    ].join('\n');
    expect(linksOf(text).map((l) => `${l.line} ${l.target}`)).toEqual([
      '1 docs/outbox.md#options',
      '1 #a',
      '1 logo.png',
      '2 docs/cli.md',
      '6 CHANGELOG.md',
    ]);
  });

  it.each(PAGES)('%s: every relative link and anchor points at something that exists', (page) => {
    expect(brokenLinks(ROOT, page)).toEqual([]);
  });

  it('says where a link is broken: a missing file, a missing heading, a page outside the repository', () => {
    const broken = brokenLinks(ROOT, 'test/package/fixtures/broken-links.md');
    expect(broken).toEqual([
      'test/package/fixtures/broken-links.md:3: ../../../docs/nowhere.md: no such file',
      'test/package/fixtures/broken-links.md:4: ../../../docs/outbox.md#no-such-section: no heading with the id "no-such-section" in docs/outbox.md',
      'test/package/fixtures/broken-links.md:5: #nor-here: no heading with the id "nor-here" in test/package/fixtures/broken-links.md',
      'test/package/fixtures/broken-links.md:6: ../../../../shared/CONTRACT.md: points outside the repository',
    ]);
  });

  it('names, in code and prose, only sections that exist on the page it names', () => {
    const files = [
      ...PAGES,
      ...filesUnder('src', ['.ts']),
      ...filesUnder('examples', ['.ts']),
      ...filesUnder('bench', ['.ts']),
      ...filesUnder('test', ['.ts', '.mjs']),
    ];
    const wrong: string[] = [];
    for (const file of files) {
      if (file === join('test', 'package', 'docs-links.test.ts')) continue;
      for (const { page, section } of namedSections(readFileSync(join(ROOT, file), 'utf8'))) {
        const named = section.replace(/`/g, '').toLowerCase();
        const exists = existsSync(join(ROOT, page)) && headingTexts(join(ROOT, page)).some((h) => h.startsWith(named));
        if (!exists) wrong.push(`${file}: "${section}" in ${page}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('ships every page the README leads to, so its links work in node_modules too', async () => {
    const shipped = new Set(await packedFiles());
    const reached = new Set<string>();
    const visit = (page: string) => {
      // A link to a page that does not exist is the other tests' to report.
      if (reached.has(page) || !existsSync(join(ROOT, page))) return;
      reached.add(page);
      for (const { target } of linksOf(readFileSync(join(ROOT, page), 'utf8'))) {
        if (external(target)) continue;
        const path = decodeURIComponent(target.split('#')[0]!);
        if (!path.endsWith('.md')) continue;
        visit(
          relative(ROOT, resolve(dirname(join(ROOT, page)), path))
            .split(sep)
            .join('/'),
        );
      }
    };
    visit('README.md');
    expect([...reached].filter((page) => !shipped.has(page))).toEqual([]);
    expect(reached).toContain('docs/outbox.md');
  });
});
