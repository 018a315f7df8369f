import { beforeAll, describe, expect, it } from 'vitest';
import { OPTIONS_TABLES, renderOptionsTables } from '../../scripts/options-tables.js';

describe('the options tables of docs/', () => {
  // One TypeScript program for both tests: building it is most of their time.
  let pages: Awaited<ReturnType<typeof renderOptionsTables>>;
  beforeAll(async () => {
    pages = await renderOptionsTables();
  }, 60_000);

  it('are the ones the options interfaces give (npm run docs:options writes them)', () => {
    expect(pages.size).toBeGreaterThan(0);
    for (const [path, { before, after }] of pages)
      expect(before, `${path} is stale: run npm run docs:options`).toBe(after);
  });

  it('list every option of their interface, with its range from the schema and a default or "required"', () => {
    const page = [...pages].find(([path]) => path.endsWith('outbox.md'))![1].after;
    expect(OPTIONS_TABLES.map((t) => t.name)).toContain('OutboxWorkerOptions');
    for (const option of ['connection', 'maxStalls', 'apiKey', 'timeouts'])
      expect(page).toMatch(new RegExp(`^\\| \`${option}\` +\\| \\S`, 'm'));
    expect(page).toMatch(/^\| `connection` +\| redis:\/\/ URL[^|]*\| required +\|/m);
    expect(page).toMatch(/^\| `maxStalls` +\| 0 to 1000 +\| `5` +\|/m);
  });
});
