// What a publish calls out against the previous published run (issue 55 §3),
// on two small "Latest run" sections written for the purpose.
// Run: node --test benches/lib/regressions.test.mjs (scripts/test runs it).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compareRuns, figure, regressionLines } from './regressions.mjs';

const before = `<!-- latest-run:start (written by benches/publish.mjs) -->
Run of 2026-12-01 10:00:00 UTC on commit aaaaaaa: 3 rounds of 1 s per subject and scenario, median round shown; unpinned.

#### Node local: uncontended acquire+release, one key
Target: at least async-lock.

| subject     | version | pairs/s | p50     | p99     | us ÷ peer |
|-------------|---------|---------|---------|---------|-----------|
| dokebi-lock | 0.4.1   | 1.00M   | 100 ns  | 900 us  |           |
| async-lock  | 1.5.0   | 5.00M   | 150 ns  | 200 ns  | 0.20x     |

#### Node redis: 64 tasks on 64 keys over one connection
| subject     | version | pairs/s | p50    | p99     | us ÷ peer |
|-------------|---------|---------|--------|---------|-----------|
| dokebi-lock | 0.4.1   | 100.00k | 610 us | 1.14 ms |           |
| redlock     | 4.2.0   | 59.13k  | 973 us | 2.85 ms | 1.73x     |

#### Node redis: hand-off to a waiter in another process
| subject     | version | median | p99    | hand-offs | commands/s while waiting | us faster by |
|-------------|---------|--------|--------|-----------|--------------------------|--------------|
| dokebi-lock | 0.4.1   | 417 us | 720 us | 150       | 4.0                      |              |

#### Node local tracing: uncontended acquire+release, with and without a subscriber
| subject                           | version | pairs/s | p50    | p99     | ÷ nobody subscribed |
|-----------------------------------|---------|---------|--------|---------|---------------------|
| dokebi-lock, nobody subscribed    | 0.4.1   | 8.28M   | 117 ns | 175 ns  |                     |
| dokebi-lock, a tracing subscriber | 0.4.1   | 1.63M   | 568 ns | 1.27 us | 0.20x               |

#### Node postgres: sequential acquire+release of one key
| subject     | version | pairs/s | p50    | p99    | us ÷ peer |
|-------------|---------|---------|--------|--------|-----------|
| dokebi-lock | 0.4.1   | 1.57k   | 613 us | 892 us |           |
`;

const after = `<!-- latest-run:start (written by benches/publish.mjs) -->
Run of 2026-12-06 10:00:00 UTC on commit bbbbbbb: 3 rounds of 1 s per subject and scenario, median round shown; unpinned.

#### Node local: uncontended acquire+release, one key
Target: at least async-lock.

| subject     | version | pairs/s | p50     | p99     | us ÷ peer |
|-------------|---------|---------|---------|---------|-----------|
| dokebi-lock | 0.4.1   | 850.00k | 109 ns  | 1.25 ms |           |
| async-lock  | 1.5.0   | 1.00M   | 150 ns  | 200 ns  | 0.85x     |

#### Node redis: 64 tasks on 64 keys over one connection
| subject     | version | pairs/s | p50    | p99     | us ÷ peer |
|-------------|---------|---------|--------|---------|-----------|
| dokebi-lock | 0.4.1   | 120.00k | 500 us | 1.14 ms |           |
| redlock     | 4.2.0   | 30.00k  | 2.0 ms | 9.85 ms | 4.00x     |

#### Node redis: hand-off to a waiter in another process
| subject     | version | median | p99    | hand-offs | commands/s while waiting | us faster by |
|-------------|---------|--------|--------|-----------|--------------------------|--------------|
| dokebi-lock | 0.4.1   | 500 us | 720 us | 150       | 94.0                     |              |

#### Node local tracing: uncontended acquire+release, with and without a subscriber
| subject                        | version | pairs/s | p50    | p99    | ÷ nobody subscribed |
|--------------------------------|---------|---------|--------|--------|---------------------|
| dokebi-lock, nobody subscribed | 0.4.1   | 8.30M   | 117 ns | 175 ns |                     |

#### Node file: sequential acquire+release on one key
| subject     | version | pairs/s | p50     | p99     | us ÷ peer |
|-------------|---------|---------|---------|---------|-----------|
| dokebi-lock | 0.4.1   | 79.52k  | 12.1 us | 23.3 us |           |
`;

test('a cell reads as per second or microseconds, whatever unit the table printed', () => {
  assert.equal(figure('349'), 349);
  assert.equal(figure('6.33k'), 6330);
  assert.equal(figure('1.2M'), 1.2e6);
  assert.equal(figure('149 us'), 149);
  assert.equal(figure('1.25 ms'), 1250);
  assert.equal(figure('1.16 s'), 1.16e6);
  assert.ok(Math.abs(figure('81.1 ns') - 0.0811) < 1e-12);
  for (const unreadable of ['', '-', 'skipped: no redis-server', '1.2x', undefined]) assert.ok(Number.isNaN(figure(unreadable)), String(unreadable));
});

test('a throughput more than 10% lower and a latency more than 10% higher are regressions; better, unchanged and within 10% are not', () => {
  const { regressions } = compareRuns(before, after);
  assert.deepEqual(
    regressions.map(({ scenario, subject, column, before, after }) => [scenario, subject, column, before, after]),
    [
      // 1.00M -> 850.00k: -15%; p50 100 ns -> 109 ns (+9%) is within the limit.
      ['Node local: uncontended acquire+release, one key', 'dokebi-lock', 'pairs/s', '1.00M', '850.00k'],
      // 900 us -> 1.25 ms: +39%, across units.
      ['Node local: uncontended acquire+release, one key', 'dokebi-lock', 'p99', '900 us', '1.25 ms'],
      // The hand-off median, 417 us -> 500 us: +20%.
      ['Node redis: hand-off to a waiter in another process', 'dokebi-lock', 'median', '417 us', '500 us'],
    ],
  );
  assert.ok(Math.abs(regressions[0].change - -0.15) < 1e-9);
});

test("a peer's figures and a load column (commands/s while waiting) are never called out", () => {
  // redlock fell from 59.13k to 30.00k and the waiting load rose 4 -> 94: neither is ours' throughput or latency.
  const { regressions } = compareRuns(before, after);
  assert.deepEqual(
    regressions.filter((r) => r.subject === 'redlock' || r.column.startsWith('commands')),
    [],
  );
});

test('scenarios and subjects missing on either side are named as not compared', () => {
  const { notCompared, compared } = compareRuns(before, after);
  assert.deepEqual(Object.fromEntries(notCompared), {
    'not in the previous run': ['Node file: sequential acquire+release on one key'],
    'not in this run': [
      'Node local tracing: uncontended acquire+release, with and without a subscriber (dokebi-lock, a tracing subscriber)',
      'Node postgres: sequential acquire+release of one key',
    ],
  });
  // one key, 64 tasks, hand-off, nobody subscribed.
  assert.equal(compared, 4);
});

test('a skipped row of ours is not compared, and says on which side it was skipped', () => {
  const skipped = after.replace('| dokebi-lock | 0.4.1   | 79.52k  |', '| dokebi-lock |         | skipped: no fs |');
  const withFile = before.replace('#### Node postgres', after.slice(after.indexOf('#### Node file')) + '\n#### Node postgres');
  const { notCompared } = compareRuns(withFile, skipped);
  assert.deepEqual(notCompared.get('skipped in this run'), ['Node file: sequential acquire+release on one key']);
});

test('the publish lines: one per regressed scenario, its figures before and after, then what was not compared', () => {
  const lines = regressionLines(compareRuns(before, after), 'commit aaaaaaa, 2026-12-01 10:00:00 UTC');
  assert.deepEqual(lines, [
    'Regressions against the previous published run (commit aaaaaaa, 2026-12-01 10:00:00 UTC):',
    '- Node local: uncontended acquire+release, one key — pairs/s 1.00M → 850.00k (−15%), p99 900 us → 1.25 ms (+39%)',
    '- Node redis: hand-off to a waiter in another process — median 417 us → 500 us (+20%)',
    '',
    'Not compared with it:',
    '- not in this run: Node local tracing: uncontended acquire+release, with and without a subscriber (dokebi-lock, a tracing subscriber); Node postgres: sequential acquire+release of one key',
    '- not in the previous run: Node file: sequential acquire+release on one key',
  ]);
});

test('a run compared with itself has no regression, and says so', () => {
  assert.deepEqual(regressionLines(compareRuns(after, after), 'commit bbbbbbb, 2026-12-06 10:00:00 UTC'), [
    'No scenario regressed more than 10% against the previous published run (commit bbbbbbb, 2026-12-06 10:00:00 UTC).',
  ]);
});

test('a previous section in another format compares nothing and says so instead of failing', () => {
  // An older layout: no "subject" column, throughput as ops/sec.
  const older = before.replace(/\| subject /g, '| library ').replace(/pairs\/s/g, 'ops/sec');
  const result = compareRuns(older, after);
  assert.equal(result.regressions.length, 0);
  assert.equal(result.compared, 0);
  assert.equal(regressionLines(result, 'x')[0], 'No scenario could be compared with the previous published run (x).');
  assert.equal(compareRuns('', after).notCompared.get('not in the previous run').length, 5);
});
