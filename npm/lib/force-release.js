// backend.forceRelease(key)'s answer: the addon's ForcedReleaseInfo (the
// core's Backend::force_release) with every field present, the fence `null`
// where none was raised (the local driver).

/** `{ backend, removed, fence }`. */
export function forcedRelease({ backend, removed, fence = null }) {
  return { backend, removed, fence };
}
