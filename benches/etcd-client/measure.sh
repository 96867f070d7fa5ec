#!/usr/bin/env bash
# Clean release build of each crate's cdylib (own target dir each), then its
# stripped size, its crate count, and its build time. One build at a time, niced.
# Usage: ./measure.sh [base grpc http]   (results in results/size-*.txt)
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
for c in "${@:-base grpc http}"; do
  for crate in $c; do
    dir=target/$crate
    rm -rf "$dir"
    start=$(date +%s.%N)
    nice -n 10 cargo build --release --locked -p "spike-$crate" --lib --target-dir "$dir" -j 2 2>"results/build-$crate.log" || { tail -30 "results/build-$crate.log"; exit 1; }
    end=$(date +%s.%N)
    so=$dir/release/libspike_${crate}.so
    strip --strip-all -o "$dir/stripped.so" "$so"
    crates=$(cargo tree --locked -p "spike-$crate" -e normal --prefix none --target x86_64-unknown-linux-gnu | sed 's/ (\*)//; s/ (proc-macro)//' | grep -v '^spike-' | sort -u | tee "results/tree-$crate.txt" | wc -l)
    printf '%s: stripped %s bytes, unstripped %s bytes, %s normal crates, clean build %.0f s\n' \
      "$crate" "$(stat -c %s "$dir/stripped.so")" "$(stat -c %s "$so")" "$crates" "$(echo "$end - $start" | bc)" | tee "results/size-$crate.txt"
  done
done
