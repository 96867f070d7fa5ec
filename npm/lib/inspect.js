// backend.inspect(key)'s answer: the addon's InspectionInfo (the core's
// Backend::inspect) with every field present, `null` where nothing is known.

/** `{ backend, mode, limit, held, holders: [{ label, units, remainingMs, fence, heldForMs }], waiting, fence }`. */
export function inspection({ backend, mode = null, limit, held, holders, waiting, fence = null }) {
  return {
    backend,
    mode,
    limit,
    held,
    holders: holders.map(({ label = null, units, remainingMs = null, fence: holderFence = null, heldForMs = null }) => ({
      label,
      units,
      remainingMs,
      fence: holderFence,
      heldForMs,
    })),
    waiting,
    fence,
  };
}
