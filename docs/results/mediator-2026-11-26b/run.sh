#!/bin/bash
# Issue 34, measurements with the write-ahead log off (the figures compare
# protocols, not logs) on the commit that added durable Mediator, the
# running helper, read-only serializable snapshots and 8192-bit write-set
# filters. Release build; this 2-core machine; the default 100 us link;
# 2 nodes x 1 partition, coordinators on their own node, the TSO on the
# next. Every figure is a ratio of two protocols in one run.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; sed -n '/== summary/,$p' $D/$name.txt | grep -E "^ratio|^ +[a-z]" | head -40; }
# Single operations: native (Mediator) against the raw store (kv: the
# same partitions, each get and put one request on the bare store) and
# transactified (omid). Low load for latency, higher for throughput.
run single-ops bench ycsb --compare kv,omid,mediator --keys 100000 --native-ratio 1 --txn-size 1 --read-ratio 0.9,0.5 --clients 4,32,64 --duration 3 --warmup 1 --check
# U_1 traffic, all transactional: the no-commit and local-commit shortcuts.
run u1 bench ycsb --compare omid,mediator --keys 100000 --native-ratio 0 --txn-size 1 --read-ratio 0.9,0.5,0 --clients 8,32,64 --duration 3 --warmup 1 --check
# The rho x nu grid at U_4 and U_20, 32 clients.
run grid-u4 bench ycsb --compare omid,mediator --keys 100000 --native-ratio 0,0.25,0.5,0.75,1 --read-ratio 0,0.25,0.5,0.75,1 --txn-size 4 --clients 32 --duration 2 --warmup 1 --check --plot $D/grid-u4.svg
run grid-u20 bench ycsb --compare omid,mediator --keys 100000 --native-ratio 0,0.25,0.5,0.75,1 --read-ratio 0,0.25,0.5,0.75,1 --txn-size 20 --clients 32 --duration 2 --warmup 1 --check --plot $D/grid-u20.svg
# Serializable against SI, transactions only.
run ser-vs-si bench ycsb --compare mediator,mediator-ser --keys 100000 --native-ratio 0 --read-ratio 0.9,0.5 --txn-size 4 --clients 32 --duration 3 --warmup 1 --check
# Abort rates on 1M uniform keys (the sources' setting), transactions
# only: read-mostly, even, write-heavy.
run aborts bench ycsb --compare mediator,mediator-ser --keys 1000000 --distribution uniform --native-ratio 0 --read-ratio 0.9,0.5,0 --txn-size 4,20 --clients 32 --duration 3 --warmup 1
