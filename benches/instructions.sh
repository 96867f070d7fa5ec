#!/usr/bin/env bash
# Instructions per uncontended C acquire + release (one key, one thread), for
# liblock and the pthread_mutex + hash map baseline of benches/c/bench.c:
# callgrind counts each at two run lengths (bench --pairs N), and the
# difference over the difference of N leaves out start-up. Instruction
# counts do not move with the load of the machine, so two trees compare
# exactly (BENCHMARKS.md's C rows are the time; this is the work).
#   bash benches/instructions.sh           # liblock release build, 100k and 300k pairs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup bench >&2
prefix=$(scripts/build-c --release)
out="$root/target/bench-instructions"
mkdir -p "$out"
static=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --static --libs-only-l liblock | sed 's/-llock//')
# shellcheck disable=SC2086 # the libraries are words
cc -O2 -std=c11 -Wall -Wextra -Werror -pedantic -pthread -DWITH_DOKEBI -I"$prefix/include" benches/c/bench.c \
  "$prefix/lib/liblock.a" $static -o "$out/c-bench"

# Total instructions of one run: callgrind's summary line.
instructions() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$out/c-bench" "$1" 1 --pairs "$2" 2>&1 >/dev/null |
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
for subject in dokebi-lock baseline; do
  short=$(instructions "$subject" 100000)
  long=$(instructions "$subject" 300000)
  echo "$subject: $(((long - short) / 200000)) instructions per acquire + release"
done
