// Plain-text tables for the terminal and for BENCHMARKS.md (GitHub markdown).

/** Renders rows (arrays of strings) under a header as a markdown table. */
export function markdownTable(header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => '| ' + cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ') + ' |';
  return [line(header), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.map(line)].join('\n');
}

/** The cells of a markdown table row. */
const cells = (line) => line.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());

/**
 * The scenarios of a run's markdown (results/latest.md, or BENCHMARKS.md's
 * "Latest run"), each a `###` or `####` heading over a table whose first
 * column is `subject`: `{ title, lines, head, rows }`, `lines` being the
 * scenario's text from its heading on, `head` and each row arrays of cells.
 * Headings without such a table are left out.
 */
export function scenarioTables(markdown) {
  const scenarios = [];
  for (const block of markdown.split(/^#{3,4} /m).slice(1)) {
    const lines = block.split('\n');
    const tableAt = lines.findIndex((l) => l.startsWith('| subject'));
    if (tableAt < 0) continue;
    const rows = [];
    for (let i = tableAt + 2; i < lines.length && lines[i].startsWith('|'); i++) rows.push(cells(lines[i]));
    scenarios.push({ title: lines[0].trim(), lines, head: cells(lines[tableAt]), rows });
  }
  return scenarios;
}

/** 1234567 -> "1.23M", 4321 -> "4.32k", for rates. */
export function rate(x) {
  if (!Number.isFinite(x)) return '-';
  if (x >= 1e6) return (x / 1e6).toFixed(2) + 'M';
  if (x >= 1e3) return (x / 1e3).toFixed(2) + 'k';
  return x.toFixed(x >= 100 ? 0 : 1);
}

/** Microseconds rendered with a unit that keeps 3 significant digits. */
export function duration(us) {
  if (!Number.isFinite(us)) return '-';
  // From a second up, seconds: toPrecision(3) would print 1160 ms as "1.16e+3".
  if (us >= 1e6) return (us / 1e6).toPrecision(3) + ' s';
  if (us >= 1e3) return (us / 1e3).toPrecision(3) + ' ms';
  if (us >= 1) return us.toPrecision(3) + ' us';
  return (us * 1e3).toPrecision(3) + ' ns';
}

/** Bytes as kB/MB. */
export function bytes(n) {
  if (!Number.isFinite(n)) return '-';
  const sign = n < 0 ? '-' : '';
  n = Math.abs(n);
  if (n >= 1 << 20) return sign + (n / (1 << 20)).toFixed(2) + ' MB';
  if (n >= 1 << 10) return sign + (n / (1 << 10)).toFixed(1) + ' kB';
  return sign + n.toFixed(0) + ' B';
}
