// Issue 55 §3, "keep the gains": a publish compares ours' figures in the new
// run with those of the run it replaces in BENCHMARKS.md's "Latest run", and
// calls out every figure more than 10% worse. Both runs are read from their
// markdown tables, the only form in which the previous run is kept.
import { US } from './report.mjs';
import { scenarioTables } from './table.mjs';

/** How much worse than before a figure may be before it is called out (issue 55 §3). */
const LIMIT = 0.1;

/**
 * Which way a column's figure is better: 'higher' for a throughput (pairs/s,
 * handoffs/s, sections/s), 'lower' for a latency; undefined for the columns
 * not compared. "commands/s while waiting" is a load, not a throughput: the
 * one-word pattern leaves it out.
 */
function better(column) {
  if (/^[\w-]+\/s$/.test(column)) return 'higher';
  if (['p50', 'p99', 'median'].includes(column)) return 'lower';
}

/** Each unit the tables print, in per second (rates) or microseconds (durations). */
const SCALE = { '': 1, k: 1e3, M: 1e6, ns: 1e-3, us: 1, ms: 1e3, s: 1e6 };

/**
 * A table's cell as a number: a rate ("349", "6.33k", "1.2M") per second, a
 * duration ("81.1 ns", "149 us", "1.25 ms", "1.16 s") in microseconds; NaN
 * for anything else ("", "-", "skipped: ..."). Only cells of one column are
 * ever compared, so a rate and a duration never meet.
 */
export function figure(cell) {
  const m = /^(\d+(?:\.\d+)?) ?(k|M|ns|us|ms|s)?$/.exec(String(cell ?? '').trim());
  return m ? Number(m[1]) * SCALE[m[2] ?? ''] : NaN;
}

/** Ours' rows of a scenario: `dokebi-lock`, and variants such as `dokebi-lock, a tracing subscriber`. */
const oursIn = (scenario) => scenario.rows.filter((row) => row[0].startsWith(US));
const isSkipped = (row) => /^skipped/.test(row[2]);

/** Every compared figure of one subject: `{ column, before, after, change, regressed }`, change as after ÷ before - 1. */
function figureChanges(then, thenRow, now, nowRow) {
  const changes = [];
  for (const [i, column] of now.head.entries()) {
    const direction = better(column);
    const j = then.head.indexOf(column);
    if (!direction || j < 0) continue;
    const [before, after] = [figure(thenRow[j]), figure(nowRow[i])];
    if (!(before > 0) || !Number.isFinite(after)) continue;
    const change = after / before - 1;
    const regressed = direction === 'higher' ? change < -LIMIT : change > LIMIT;
    changes.push({ column, before: thenRow[j], after: nowRow[i], change, regressed });
  }
  return changes;
}

/**
 * Ours' figures in the run `after` against the run `before` (each a run's
 * markdown), scenario by scenario (matched by heading) and subject by
 * subject: `{ regressions, compared, notCompared }`. `regressions` are the
 * figures more than 10% worse, `{ scenario, subject, column, before, after,
 * change }`; `compared` counts the subjects with at least one figure
 * compared; `notCompared` maps each reason to the scenarios (or "scenario
 * (subject)") it left out. Text in another format compares nothing and says
 * why rather than failing.
 */
export function compareRuns(before, after) {
  const thenByTitle = new Map(scenarioTables(before).map((s) => [s.title, s]));
  const nowScenarios = scenarioTables(after);
  const result = { regressions: [], compared: 0, notCompared: new Map() };
  const leaveOut = (why, what) => result.notCompared.set(why, [...(result.notCompared.get(why) ?? []), what]);
  for (const now of nowScenarios) {
    const then = thenByTitle.get(now.title);
    if (!then) leaveOut('not in the previous run', now.title);
    else compareScenario(then, now, result, leaveOut);
  }
  const nowTitles = new Set(nowScenarios.map((s) => s.title));
  for (const title of thenByTitle.keys()) if (!nowTitles.has(title)) leaveOut('not in this run', title);
  return result;
}

/** compareRuns for one scenario present in both runs. */
function compareScenario(then, now, result, leaveOut) {
  const subjects = [...new Set([...oursIn(then), ...oursIn(now)].map((row) => row[0]))];
  if (!subjects.length) leaveOut(`no ${US} row`, now.title);
  for (const subject of subjects) {
    const where = subject === US ? now.title : `${now.title} (${subject})`;
    const [thenRow, nowRow] = [then, now].map((s) => s.rows.find((row) => row[0] === subject));
    if (!thenRow) leaveOut('not in the previous run', where);
    else if (!nowRow) leaveOut('not in this run', where);
    else if (isSkipped(thenRow)) leaveOut('skipped in the previous run', where);
    else if (isSkipped(nowRow)) leaveOut('skipped in this run', where);
    else {
      const changes = figureChanges(then, thenRow, now, nowRow);
      if (!changes.length) leaveOut('no throughput or latency figure in both runs', where);
      else result.compared++;
      for (const c of changes.filter((c) => c.regressed)) result.regressions.push({ scenario: now.title, subject, ...c });
    }
  }
}

/** -0.143 -> "−14%", 0.25 -> "+25%". */
const percent = (change) => `${change < 0 ? '−' : '+'}${Math.round(Math.abs(change) * 100)}%`;

/**
 * What a publish says of `compareRuns`' result, as markdown lines: the
 * regressions (or that there are none), then what was not compared.
 * `previous` names the run compared with ("commit 4ff37c2, 2026-12-04 19:33:55 UTC").
 */
export function regressionLines({ regressions, compared, notCompared }, previous) {
  const lines = [];
  if (regressions.length) {
    lines.push(`Regressions against the previous published run (${previous}):`);
    // One line per scenario and subject, however many of its figures regressed.
    const byWhere = new Map();
    for (const r of regressions) {
      const where = r.subject === US ? r.scenario : `${r.scenario} (${r.subject})`;
      byWhere.set(where, [...(byWhere.get(where) ?? []), `${r.column} ${r.before} → ${r.after} (${percent(r.change)})`]);
    }
    for (const [where, figures] of byWhere) lines.push(`- ${where} — ${figures.join(', ')}`);
  } else if (compared) {
    lines.push(`No scenario regressed more than ${LIMIT * 100}% against the previous published run (${previous}).`);
  } else {
    // Saying "nothing regressed" when nothing was compared would be a false all-clear.
    lines.push(`No scenario could be compared with the previous published run (${previous}).`);
  }
  if (notCompared.size) {
    lines.push('', 'Not compared with it:');
    // Scenario titles hold commas: semicolons part them.
    for (const [why, what] of notCompared) lines.push(`- ${why}: ${what.join('; ')}`);
  }
  return lines;
}
