/**
 * Keeps a group in step with a CSV export (email,name,first_name): adds or
 * updates every row, in batches, and reports what was skipped and why.
 * (The CLI does the same: `eml-api group add newsletter members.csv`.)
 *
 *   EML_API_URL=... EML_API_KEY=... npx tsx examples/sync-members-from-csv.ts members.csv
 */
import { readFile } from 'node:fs/promises';
import { EmlApiClient, type MemberInput } from 'nodemailer-eml-api';

const file = process.argv[2] ?? 'members.csv';
const [header, ...rows] = (await readFile(file, 'utf8')).split(/\r?\n/).filter((line) => line.trim() !== '');
const columns = (header ?? '').split(',').map((c) => c.trim());

// A deliberately small parser: no quoted fields. Use the CLI for real-world CSV.
const members: MemberInput[] = rows.map((row) => {
  const cells = row.split(',').map((c) => c.trim());
  const value = (name: string) => cells[columns.indexOf(name)] ?? '';
  const substitutions: Record<string, string> = {};
  for (const column of columns) if (column !== 'email' && column !== 'name') substitutions[column] = value(column);
  return { email: value('email'), name: value('name'), substitutions };
});

const client = new EmlApiClient({ apiKey: process.env.EML_API_KEY ?? '', baseUrl: process.env.EML_API_URL ?? '' });
try {
  const result = await client.addToGroup('newsletter', members, { onFailure: 'SKIP', batchSize: 500 });
  console.log(`added or updated ${result.added.length} in ${result.batches} requests`);
  for (const skipped of result.skipped) console.log(`skipped ${skipped.email}: ${skipped.reason}`);
} finally {
  await client.close();
}
