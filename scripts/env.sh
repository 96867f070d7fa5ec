# Sourced by the project's scripts: puts the project's Node 24 first on PATH
# (the system npm then runs on it too).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$root/.tools/node24/bin:$PATH"
# Runs a cargo command linted: clippy-driver as the workspace's compiler
# wrapper, warnings are errors. The wrapper is part of the hash cargo gives a
# workspace crate's artifacts, so every build of the tests in a run goes
# through it (scripts/test, test-faults, test-partitions) and reuses the
# crates the others compiled.
linted() {
  RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver)" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" "$@"
}
