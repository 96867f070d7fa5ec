// Copies the latest full run (results/latest.json and .md) into the "Latest
// run" section of BENCHMARKS.md, between its two marker comments.
// Usage: node benches/publish.mjs ["note about the conditions of the run"]
import { readFileSync, writeFileSync } from 'node:fs';

const here = new URL('.', import.meta.url).pathname;
const file = `${here}../BENCHMARKS.md`;
const report = JSON.parse(readFileSync(`${here}results/latest.json`, 'utf8'));
if (report.smoke) throw new Error('the latest run is a smoke run: its figures mean nothing');
const tables = readFileSync(`${here}results/latest.md`, 'utf8').trim();
const m = report.machine;
// Skip reasons, each with the scenarios and subjects it affected.
const skippedBy = new Map();
for (const s of report.scenarios)
  for (const r of s.results.filter((r) => r.skipped)) skippedBy.set(r.skipped, [...(skippedBy.get(r.skipped) ?? []), `${s.id} (${r.subject})`]);
const skipped = [...skippedBy].map(([why, where]) => `${why}: ${where.join(', ')}`);
const section = [
  '<!-- latest-run:start (written by benches/publish.mjs) -->',
  `Run of ${report.startedAt.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')} on commit ${report.commit}: ${report.rounds} rounds of ${report.seconds} s per subject and scenario, median round shown; ${report.mode}.`,
  `Machine: ${m.nproc} cores (\`nproc\`), ${m.cpuModel}, ${m.memoryGiB} GiB, Linux ${m.kernel}; Node ${m.node}; ${m.redisServer}; ${m.cc}. Load average at start: ${m.loadAverageAtStart.join(', ')}.`,
  ...(process.argv[2] ? ['', process.argv[2]] : []),
  '',
  skipped.length ? `Not measured in this run:\n${skipped.map((s) => `- ${s}`).join('\n')}` : 'Every component was built and measured.',
  '',
  tables.replace(/^### /gm, '#### '),
  '<!-- latest-run:end -->',
].join('\n');
const text = readFileSync(file, 'utf8');
const start = text.indexOf('<!-- latest-run:start');
const end = text.indexOf('<!-- latest-run:end -->');
if (start < 0 || end < 0) throw new Error('BENCHMARKS.md has no latest-run markers');
writeFileSync(file, text.slice(0, start) + section + text.slice(end + '<!-- latest-run:end -->'.length));
console.log('BENCHMARKS.md: latest run updated');
