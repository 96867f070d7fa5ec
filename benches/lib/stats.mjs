// Summaries of timing samples.

/** The q-quantile (0..1) of numeric samples, nearest-rank; NaN when empty. */
export function quantile(samples, q) {
  if (samples.length === 0) return NaN;
  const sorted = Float64Array.from(samples).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/** The median of numbers; NaN when empty. */
export function median(values) {
  return quantile(values, 0.5);
}

/** Nanoseconds since an arbitrary origin, from CLOCK_MONOTONIC, which every
 *  process of the machine shares: a time taken in one process can be
 *  subtracted from a time taken in another. */
export function nowNs() {
  return process.hrtime.bigint();
}

/** Microseconds between two nowNs() readings. */
export function elapsedUs(fromNs, toNs) {
  return Number(toNs - fromNs) / 1e3;
}
