#!/usr/bin/env bash
# Starts a private single-member etcd (client 127.0.0.1:23790) and a
# 3-member cluster (clients 127.0.0.1:23791-23793) as user nobody, data
# under /tmp/etcd-spike.*; pids in /tmp/etcd-spike.pids. ./etcd-down.sh stops them.
set -euo pipefail
start() { # name client_port peer_port initial_cluster
  local name=$1 cport=$2 pport=$3 cluster=$4 dir=/tmp/etcd-spike.$1
  rm -rf "$dir"; mkdir -p "$dir"; chown nobody:nogroup "$dir"
  runuser -u nobody -- etcd --name "$name" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "spike-$5" \
    --logger zap --log-outputs "$dir/log" >/dev/null 2>&1 &
  echo $! >>/tmp/etcd-spike.pids
}
: >/tmp/etcd-spike.pids
start s1 23790 23800 "s1=http://127.0.0.1:23800" single
c="m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802,m3=http://127.0.0.1:23803"
for i in 1 2 3; do start m$i 2379$i 2380$i "$c" cluster; done
for p in 23790 23791 23792 23793; do
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$p/health" | grep -q '"true"' && break; sleep 0.2; done
  echo "127.0.0.1:$p $(curl -s http://127.0.0.1:$p/health)"
done
