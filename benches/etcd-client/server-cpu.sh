#!/usr/bin/env bash
# etcd s1's CPU time (utime+stime) during one sequential run of each candidate,
# per txn+delete pair; results/server-cpu.txt.
cd "$(dirname "$0")"
pid=$(pgrep -u nobody -f 'etcd --name s1 ')
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$pid/stat"; }
for r in 1 2; do for c in grpc http; do
  a=$(cpu); out=$(timeout 120 "target/$c/release/spike-$c" --endpoint 127.0.0.1:23790 --events 0 | head -1); b=$(cpu)
  n=$(echo "$out" | sed 's/.*n=\([0-9]*\).*/\1/')
  echo "$c: $n pairs (+20 watch rounds), etcd CPU $(( (b-a)*1000/tck )) ms = $(echo "scale=1; ($b-$a)*1000000/$tck/$n" | bc) us/pair | $out"
done; done
