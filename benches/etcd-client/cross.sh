#!/usr/bin/env bash
# One cross target as scripts/build-node builds it: cargo-zigbuild from
# the repository's .tools, aarch64-unknown-linux-gnu against glibc 2.17; stripped
# sizes of the three cdylibs; results/cross.txt.
set -euo pipefail
cd "$(dirname "$0")"
zigbuild="$(cd ../.. && pwd)/.tools/zigbuild"
for crate in base grpc http; do
  start=$SECONDS
  env CARGO_ZIGBUILD_PYTHON_PATH="$zigbuild/bin/python3" nice -n 10 "$zigbuild/bin/cargo-zigbuild" zigbuild \
    --release --locked -p "spike-$crate" --lib --target aarch64-unknown-linux-gnu.2.17 --target-dir target/cross -j 2 \
    2>"results/cross-$crate.log" || { tail -30 "results/cross-$crate.log"; exit 1; }
  so=target/cross/aarch64-unknown-linux-gnu/release/libspike_$crate.so
  llvm-strip --strip-all -o "target/cross/$crate.stripped.so" "$so"
  echo "aarch64-unknown-linux-gnu.2.17 $crate: stripped $(stat -c %s "target/cross/$crate.stripped.so") bytes ($((SECONDS - start)) s, dependencies shared with the crates built before it)"
done
