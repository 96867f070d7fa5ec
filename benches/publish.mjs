// Copies the latest full run (results/latest.json and .md) into the "Latest
// run" section of BENCHMARKS.md, between its two marker comments, and
// derives from that section the summary at the top ("Where we stand") and
// its chart (benches/standing.svg, shown in BENCHMARKS.md). The new section
// starts with, and the console shows, every figure of ours more than 10%
// worse than in the section it replaces (issue 55 §3).
// Usage: node benches/publish.mjs ["note about the conditions of the run"]
//        node benches/publish.mjs --summary-only   the summary and the chart
//                                                  only, "Latest run" kept
//        node benches/publish.mjs --check   the summary and the chart match
//                                           "Latest run" (scripts/test)
import { readFileSync, writeFileSync } from 'node:fs';
import { compareRuns, regressionLines } from './lib/regressions.mjs';
import { chartSvg, scenariosOf, standingTables } from './lib/standing.mjs';

const here = new URL('.', import.meta.url).pathname;
const file = `${here}../BENCHMARKS.md`;
const chartFile = `${here}standing.svg`;
const check = process.argv[2] === '--check';
/** The run line of a "Latest run" section: its date and its commit. */
const RUN = /^Run of (\S+ \S+ UTC) on commit (\S+):/;
let text = readFileSync(file, 'utf8');
if (!check) text = withLatestRun(text);
const [standing, svg] = summary(text);
text = between(text, 'standing', standing);
if (check) {
  const drift = [readFileSync(file, 'utf8') !== text && 'BENCHMARKS.md "Where we stand"', readFileSync(chartFile, 'utf8') !== svg && 'benches/standing.svg'].filter(Boolean);
  if (drift.length) {
    console.error(`publish --check: ${drift.join(' and ')} differ from what "Latest run" gives: run node benches/publish.mjs --summary-only and commit`);
    process.exit(1);
  }
  console.log('publish --check: the summary and its chart match "Latest run"');
} else {
  writeFileSync(file, text);
  writeFileSync(chartFile, svg);
  console.log('BENCHMARKS.md: latest run and summary updated; benches/standing.svg written');
}

/** BENCHMARKS.md with results/latest.{json,md} as its "Latest run" (unless --summary-only). */
function withLatestRun(text) {
  if (process.argv[2] === '--summary-only') return text;
  const report = JSON.parse(readFileSync(`${here}results/latest.json`, 'utf8'));
  if (report.smoke) throw new Error('the latest run is a smoke run: its figures mean nothing');
  const tables = readFileSync(`${here}results/latest.md`, 'utf8').trim();
  const m = report.machine;
  // Skip reasons, each with the scenarios and subjects it affected.
  const skippedBy = new Map();
  for (const s of report.scenarios)
    for (const r of s.results.filter((r) => r.skipped)) skippedBy.set(r.skipped, [...(skippedBy.get(r.skipped) ?? []), `${s.id} (${r.subject})`]);
  const skipped = [...skippedBy].map(([why, where]) => `${why}: ${where.join(', ')}`);
  const regressions = regressionsSince(latestRun(text), tables);
  console.log(regressions.join('\n'));
  const section = [
    '<!-- latest-run:start (written by benches/publish.mjs) -->',
    ...regressions,
    '',
    `Run of ${report.startedAt.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')} on commit ${report.commit}: ${report.rounds} rounds of ${report.seconds} s per subject and scenario, median round shown; ${report.mode}.`,
    `Machine: ${m.nproc} cores (\`nproc\`), ${m.cpuModel}, ${m.memoryGiB} GiB, Linux ${m.kernel}; Node ${m.node}; ${m.redisServer}; ${m.cc}. Load average at start: ${m.loadAverageAtStart.join(', ')}.`,
    ...(process.argv[2] ? ['', process.argv[2]] : []),
    '',
    skipped.length ? `Not measured in this run:\n${skipped.map((s) => `- ${s}`).join('\n')}` : 'Every component was built and measured.',
    '',
    tables.replace(/^### /gm, '#### '),
    '<!-- latest-run:end -->',
  ].join('\n');
  return between(text, 'latest-run', section);
}

/** The lines calling out what regressed in `tables` (results/latest.md) since the run of the section `previous`. */
function regressionsSince(previous, tables) {
  const when = lineOf(previous, 'Run of ').match(RUN);
  const which = when ? `commit ${when[2]}, ${when[1]}` : 'its run line unreadable';
  return regressionLines(compareRuns(previous, tables), which);
}

/** The "Latest run" section of `text`, its end marker left out. */
function latestRun(text) {
  return text.slice(text.indexOf('<!-- latest-run:start'), text.indexOf('<!-- latest-run:end -->'));
}

/** The first line of `section` that starts with `prefix`, or ''. */
function lineOf(section, prefix) {
  return section.split('\n').find((line) => line.startsWith(prefix)) ?? '';
}

/** The summary section and the chart, from the "Latest run" section of `text`. */
function summary(text) {
  const latest = latestRun(text);
  // Found by their start: the regressions come first in the section.
  const [runLine, machineLine] = [lineOf(latest, 'Run of '), lineOf(latest, 'Machine: ')];
  const when = runLine.match(RUN);
  const mode = runLine.match(/; (pinned|unpinned)/)?.[1];
  const cpu = machineLine.match(/^Machine: (\d+) cores \(`nproc`\), ([^,]+),/);
  if (!when || !mode || !cpu) throw new Error('BENCHMARKS.md "Latest run" has no run line or no machine line');
  const source = `the latest full run, ${when[1]} on commit ${when[2]}, ${cpu[1]} cores (${cpu[2]}), ${mode}`;
  const scenarios = scenariosOf(latest);
  const section = [
    '<!-- standing:start (written by benches/publish.mjs from "Latest run") -->',
    `Every scenario of ${source}, as ours ÷ each peer on the scenario's headline figure (pairs/s, or latency where lower is better); above 1.00x ours is better. The full tables, with p50/p99, CPU and commands per pair, are in "Latest run" below.`,
    '',
    '![ours ÷ each peer, per scenario](benches/standing.svg)',
    '',
    standingTables(scenarios),
    '<!-- standing:end -->',
  ].join('\n');
  return [section, chartSvg(scenarios, ['dokebi-lock ÷ each peer, per scenario (log scale; above 1x ours is better)', `From ${source}.`])];
}

/** `text` with what lies between the markers `name`:start and `name`:end replaced by `section` (which carries both). */
function between(text, name, section) {
  const start = text.indexOf(`<!-- ${name}:start`);
  const endMarker = `<!-- ${name}:end -->`;
  const end = text.indexOf(endMarker);
  if (start < 0 || end < 0) throw new Error(`BENCHMARKS.md has no ${name} markers`);
  return text.slice(0, start) + section + text.slice(end + endMarker.length);
}
