import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { basename, dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Every file of the repository, as git knows it (new files count once added). */
const FILES = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
  cwd: ROOT,
  encoding: 'utf8',
})
  .split('\n')
  .filter(Boolean);
const PATHS = new Set(FILES);
const NAMES = new Set(FILES.map((file) => basename(file)));

/** The service's documents, which live beside the repository (../shared), not in it. */
const SERVICE_DOCUMENTS = new Set(['CONTRACT.md', 'SERVICE-SPEC.md']);

/**
 * A file name in a comment: `name.ts`, `dir/name.md`... A bare `.js` or `.json` name is left out
 * (package names such as punycode.js, data files such as emulator.json); with a folder it counts.
 * Paths under dist/ are build outputs.
 */
const FILE_NAME =
  /(?<![\w@/.:-])((?:\.{1,2}\/)?(?:[\w-]+\/)*[\w-]+(?:\.[\w-]+)*\.(?:ts|mts|cts|mjs|cjs|md|lua|sh|ya?ml|js|json))\b/g;

/** The comment text of a line of TypeScript: a whole comment line, or what follows ` // `. */
function commentOf(line: string): string | undefined {
  const text = line.trim();
  if (text.startsWith('//') || text.startsWith('/*') || text.startsWith('*')) return text;
  const trailing = line.indexOf(' // ');
  return trailing === -1 ? undefined : line.slice(trailing + 4);
}

function exists(name: string, from: string): boolean {
  if (name.startsWith('dist/') || SERVICE_DOCUMENTS.has(name)) return true;
  if (!name.includes('/')) return NAMES.has(name) || /\.(js|json)$/.test(name);
  return (
    PATHS.has(normalize(join(dirname(from), name))) ||
    PATHS.has(normalize(name)) ||
    FILES.some((file) => file.endsWith(`/${normalize(name)}`))
  );
}

describe('comments in src/', () => {
  it('name only files that exist', () => {
    const stale: string[] = [];
    for (const file of FILES.filter((f) => f.startsWith('src/') && f.endsWith('.ts'))) {
      readFileSync(join(ROOT, file), 'utf8')
        .split('\n')
        .forEach((line, index) => {
          const comment = commentOf(line);
          for (const [, name] of comment?.matchAll(FILE_NAME) ?? []) {
            if (!exists(name!, file)) stale.push(`${file}:${index + 1} names ${name}`);
          }
        });
    }
    expect(stale).toEqual([]);
  });

  it('stay under 18% of its lines', () => {
    let lines = 0;
    let comments = 0;
    for (const file of FILES.filter((f) => f.startsWith('src/') && f.endsWith('.ts'))) {
      for (const line of readFileSync(join(ROOT, file), 'utf8').split('\n')) {
        lines++;
        if (/^\s*(\/\/|\/\*|\*)/.test(line)) comments++;
      }
    }
    // Public TSDoc included: an option's reference belongs in docs/ once it needs more than a paragraph.
    expect(comments / lines, `${comments} comment lines of ${lines}`).toBeLessThan(0.18);
  });
});
