#!/usr/bin/env bash
# Runs both candidates, interleaved, ROUNDS times (default 3), against the
# single member (23790) and the 3-member cluster's leader; results/bench.txt.
set -uo pipefail
cd "$(dirname "$0")"
rounds=${ROUNDS:-3}
leader=$(for p in 23791 23792 23793; do
  curl -s -X POST "http://127.0.0.1:$p/v3/maintenance/status" -d '{}' |
    python3 -c "import json,sys; s=json.load(sys.stdin); print($p if s['leader']==s['header']['member_id'] else '')"; done | grep -v '^$')
echo "cluster leader: 127.0.0.1:$leader; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for ep in 127.0.0.1:23790 "127.0.0.1:$leader"; do
    for c in grpc http; do
      timeout 120 "target/$c/release/spike-$c" --endpoint "$ep" 2>&1
      timeout 120 "target/$c/release/spike-$c" --endpoint "$ep" --tasks 64 2>&1
    done
  done
  echo "round $r done; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
