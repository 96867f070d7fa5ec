// "Where we stand": every scenario of a full run against its peers, one table
// per driver, and a chart of the same ratios (an SVG). Both are derived from
// the run's tables (results/latest.md, which the harness writes from
// results/latest.json and benches/publish.mjs copies into BENCHMARKS.md's
// "Latest run"), so the summary can never say what the tables do not.
import { markdownTable, scenarioTables } from './table.mjs';

const US = 'dokebi-lock';
/** The last column of a table where > 1 means ours is better. */
const CONTEST_HEADS = ['us ÷ peer', 'us faster by', 'us leaner by'];
const isContest = (head) => CONTEST_HEADS.some((h) => head.startsWith(h));
/** 1.5 -> "1.50x", 0.07 -> "0.070x"; the tables print 2 decimals, so 0 is below 0.005. */
export const times = (ratio) => (ratio === 0 ? '< 0.01x' : `${ratio >= 0.1 ? ratio.toFixed(2) : ratio.toPrecision(2)}x`);

const number = (text) => Number.parseFloat(String(text).replace(/x$/, ''));

/**
 * The scenarios of a run's tables that compare ours with peers:
 * `{ driver, title, unit, ours, peers: [{ subject, ratio }] }`, ratio being
 * ours ÷ peer oriented so that > 1 means ours is better. Scenarios that
 * compare setups of ours only (Cluster vs one server, replicaAcks, with and
 * without a tracing subscriber) have no peer and are left out.
 */
export function scenariosOf(markdown) {
  const scenarios = [];
  for (const { title: fullTitle, lines, head, rows } of scenarioTables(markdown)) {
    const last = head.at(-1);
    const ours = rows.find((r) => r[0] === US);
    if (!ours || ours[2].startsWith('skipped')) continue;
    const peers = [];
    if (isContest(last)) {
      for (const r of rows) if (r[0] !== US && Number.isFinite(number(r.at(-1)))) peers.push({ subject: r[0], ratio: number(r.at(-1)) });
    } else if (last === '÷ floor') {
      // Rows ÷ the floor, and ours ÷ every other peer on the line under the table.
      const floor = rows.find((r) => r.at(-1) === '');
      if (floor && Number.isFinite(number(ours.at(-1)))) peers.push({ subject: floor[0], ratio: number(ours.at(-1)) });
      const line = lines.find((l) => l.startsWith(`${US} ÷ peer: `));
      for (const m of (line ?? '').matchAll(/([\d.]+)x ([^,]+)/g)) peers.push({ subject: m[2].trim(), ratio: Number(m[1]) });
    }
    if (!peers.length) continue;
    const [driver, title] = fullTitle.includes(': ') ? [fullTitle.slice(0, fullTitle.indexOf(': ')), fullTitle.slice(fullTitle.indexOf(': ') + 2)] : ['', fullTitle];
    // Figures per N (the scale scenario): its ratio compares the largest N.
    const perN = head.findLastIndex((h) => /^N=\d+$/.test(h));
    const column = perN > 0 ? perN : 2;
    const unit = perN > 0 ? `at ${head[column]}` : head[2];
    scenarios.push({ driver, title, unit, ours: ours[column], peers });
  }
  return scenarios;
}

const drivers = (scenarios) => [...new Set(scenarios.map((s) => s.driver))];

/** One markdown table per driver: scenario, ours' figure, ours ÷ each peer. */
export function standingTables(scenarios) {
  return drivers(scenarios)
    .map((driver) => {
      const rows = scenarios
        .filter((s) => s.driver === driver)
        .map((s) => [s.title, `${s.ours} ${s.unit}`, s.peers.map((p) => `${times(p.ratio)} ${p.subject}`).join(', ')]);
      return [`#### ${driver}`, '', markdownTable(['scenario', 'ours', 'ours ÷ peer (> 1: ours is better)'], rows)].join('\n');
    })
    .join('\n\n');
}

const escape = (text) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * A bar per (scenario, peer): ours ÷ peer on a log scale from 1/8x to 8x
 * (beyond it the bar stops at the edge and the label says the figure),
 * green where ours is better, red where it is not. Deterministic: the same
 * tables give the same bytes.
 */
export function chartSvg(scenarios, [title, subtitle]) {
  const rowHeight = 16;
  const labelWidth = 660;
  const plotWidth = 360;
  const left = labelWidth + 10;
  const half = plotWidth / 2;
  const x1 = left + half; // the 1.0x line
  const scale = half / Math.log2(8);
  const out = [];
  let y = 56;
  for (const driver of drivers(scenarios)) {
    out.push(`<text x="10" y="${y + 12}" font-weight="bold">${escape(driver)}</text>`);
    y += rowHeight + 4;
    for (const s of scenarios.filter((s) => s.driver === driver)) {
      for (const p of s.peers) {
        const clipped = Math.max(-3, Math.min(3, Math.log2(p.ratio || 1 / 1024)));
        const width = Math.abs(clipped * scale);
        const x = clipped >= 0 ? x1 : x1 - width;
        const fill = p.ratio >= 1 ? '#3a8d3a' : '#c0392b';
        const title = s.title.length > 72 ? `${s.title.slice(0, 71)}…` : s.title;
        out.push(`<text x="${labelWidth}" y="${y + 12}" text-anchor="end">${escape(`${title} — vs ${p.subject}`)}</text>`);
        out.push(`<rect x="${x.toFixed(1)}" y="${y + 2}" width="${Math.max(width, 1).toFixed(1)}" height="${rowHeight - 4}" fill="${fill}"/>`);
        const labelX = clipped >= 0 ? x1 + width + 4 : x1 + 4;
        out.push(`<text x="${labelX.toFixed(1)}" y="${y + 12}">${escape(times(p.ratio))}</text>`);
        y += rowHeight;
      }
    }
    y += 8;
  }
  const height = y + 10;
  const ticks = [1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8].map((t) => {
    const x = x1 + Math.log2(t) * scale;
    const label = t < 1 ? `1/${1 / t}x` : `${t}x`;
    return `<line x1="${x.toFixed(1)}" y1="46" x2="${x.toFixed(1)}" y2="${height - 10}" stroke="${t === 1 ? '#000' : '#ddd'}"/><text x="${x.toFixed(1)}" y="42" text-anchor="middle">${label}</text>`;
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${left + plotWidth + 60}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="14" font-weight="bold">${escape(title)}</text>`,
    `<text x="10" y="28">${escape(subtitle)}</text>`,
    ...ticks,
    ...out,
    '</svg>',
    '',
  ].join('\n');
}
