// One table per scenario: subjects as rows, ours first, each peer's ratio to
// us, and each subject's settings as footnotes.
import { markdownTable, rate, duration } from './table.mjs';

export const US = 'dokebi-lock';

const throughputColumns = (unit) => [
  { head: unit, cell: (r) => rate(r.opsPerSec) },
  { head: 'p50', cell: (r) => duration(r.p50Us) },
  { head: 'p99', cell: (r) => duration(r.p99Us) },
];

/** us ÷ peer on the headline figure, oriented so that > 1 means we win.
 *  A scenario that compares setups of ours names one as its `reference`
 *  instead: each row's figure ÷ the reference's, as measured (a cost, not a
 *  contest, so not turned around). */
function ratio(scenario, us, peer) {
  const key = scenario.headline ?? 'opsPerSec';
  if (!us || us.skipped || peer.skipped || peer.subject === us.subject) return '';
  const lowerIsBetter = scenario.lowerIsBetter ?? false;
  const x = scenario.reference ? peer[key] / us[key] : lowerIsBetter ? peer[key] / us[key] : us[key] / peer[key];
  return Number.isFinite(x) ? `${x.toFixed(2)}x` : '-';
}

/** Where the rows are ÷ a reference that is a peer (a floor), not ours:
 *  ours ÷ each other peer too, on a line of its own (null otherwise). */
function oursAgainstPeers(scenario, results) {
  const ours = results.find((r) => r.subject === US);
  if (!scenario.reference || scenario.reference === US || !ours || ours.skipped) return null;
  const contest = { ...scenario, reference: undefined };
  const peers = results.filter((r) => r.subject !== US && r.subject !== scenario.reference && !r.skipped);
  return peers.length ? `${US} ÷ peer: ${peers.map((p) => `${ratio(contest, ours, p)} ${p.subject}`).join(', ')}` : null;
}

export function render(scenario, entry) {
  const columns = scenario.columns ?? throughputColumns(scenario.unit);
  const us = entry.results.find((r) => r.subject === (scenario.reference ?? US));
  const header = ['subject', 'version', ...columns.map((c) => c.head), scenario.ratioHead ?? (scenario.lowerIsBetter ? 'us faster by' : 'us ÷ peer')];
  const rows = entry.results.map((r) =>
    r.skipped
      ? [r.subject, '', `skipped: ${r.skipped}`, ...columns.slice(1).map(() => ''), '']
      : [r.subject, r.version ?? '', ...columns.map((c) => c.cell(r)), ratio(scenario, us, r)],
  );
  const notes = entry.results
    .filter((r) => !r.skipped && r.defaults && Object.keys(r.defaults).length)
    .map((r) => `- ${r.subject}: ${Object.entries(r.defaults).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ')}`);
  const contest = oursAgainstPeers(scenario, entry.results);
  notes.push(`- run: ${entry.mode}`);
  return [
    `### ${entry.title}`,
    `Target: ${entry.target}. ${scenario.note ?? ''}`.trim(),
    '',
    markdownTable(header, rows),
    ...(contest ? ['', contest] : []),
    '',
    'Settings:',
    ...notes,
  ].join('\n');
}
