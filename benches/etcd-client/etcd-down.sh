#!/usr/bin/env bash
# Stops the etcd members etcd-up.sh started (by their pids) and deletes their data.
[ -f /tmp/etcd-spike.pids ] && while read -r pid; do kill "$pid" 2>/dev/null; done </tmp/etcd-spike.pids
sleep 1; rm -rf /tmp/etcd-spike.s1 /tmp/etcd-spike.m1 /tmp/etcd-spike.m2 /tmp/etcd-spike.m3 /tmp/etcd-spike.pids
