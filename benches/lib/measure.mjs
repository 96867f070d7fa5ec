// Timed loops shared by the scenarios. A subject supplies `loop(keyAt, n)`:
// n acquire+release pairs written the way its users write them, each on the
// key keyAt() returns. Timing one pair of a local lock would cost as much as
// the pair, so local loops are timed per batch and the latency columns are
// per-pair means over a batch; redis loops use batches of 1.
import { quantile } from './stats.mjs';

const now = () => performance.now();

/** Runs `loop` for `warmupS` (discarded), then for `seconds` in batches of
 *  `batch` pairs; one caller, so every pair is uncontended. */
export async function sequential({ loop, keyAt, seconds, warmupS = seconds / 5, batch }) {
  const warmEnd = now() + warmupS * 1e3;
  let warmOps = 0;
  for (; now() < warmEnd; warmOps += batch) await loop(keyAt, batch);
  const perPairUs = [];
  const start = now();
  const end = start + seconds * 1e3;
  let ops = 0;
  for (let t = start; t < end; ) {
    await loop(keyAt, batch);
    const t2 = now();
    perPairUs.push(((t2 - t) * 1e3) / batch);
    ops += batch;
    t = t2;
  }
  return summary(ops, warmOps + ops, now() - start, perPairUs, batch);
}

/** Runs `tasks` concurrent callers for `seconds` after a warm-up; caller i
 *  uses keyAtFor(i). Each caller times its own batches, so the latency
 *  columns are how long one caller takes per pair including its waits. */
export async function concurrent({ loop, keyAtFor, tasks, seconds, warmupS = seconds / 5, batch }) {
  const perPairUs = [];
  let ops = 0;
  let allOps = 0;
  let recording = false;
  const startAll = now();
  const recordFrom = startAll + warmupS * 1e3;
  const end = recordFrom + seconds * 1e3;
  let start = Infinity;
  const worker = async (i) => {
    const keyAt = keyAtFor(i);
    for (let t = now(); t < end; ) {
      await loop(keyAt, batch);
      const t2 = now();
      allOps += batch;
      if (recording) {
        perPairUs.push(((t2 - t) * 1e3) / batch);
        ops += batch;
      } else if (t2 >= recordFrom) {
        // The first caller past the warm-up starts the clock for everyone.
        recording = true;
        start = t2;
      }
      t = t2;
    }
  };
  await Promise.all(Array.from({ length: tasks }, (_, i) => worker(i)));
  return summary(ops, allOps, now() - start, perPairUs, batch);
}

/** `ops` were timed; `allOps` counts the warm-up too (for per-pair counts of
 *  what the server saw during the whole measurement). */
function summary(ops, allOps, ms, perPairUs, batch) {
  return {
    ops,
    allOps,
    seconds: ms / 1e3,
    opsPerSec: ops / (ms / 1e3),
    p50Us: quantile(perPairUs, 0.5),
    p99Us: quantile(perPairUs, 0.99),
    latencyBatch: batch,
  };
}
