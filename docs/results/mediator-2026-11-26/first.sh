#!/bin/bash
# Issue 34, first figures of Mediator in the embedded cluster (no log yet:
# write-backs are not made durable, so these are upper bounds for both
# sides alike). Release build of the commit after 29749b7 (omid without
# Mediator's shortcuts); 2-core machine; 100 us link.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; sed -n '/== summary/,$p' $D/$name.txt | grep -E "^ratio|^ +[a-z]" | head -30; }
# Single operations: native (Mediator) against transactified (omid).
run single-ops bench ycsb --compare omid,mediator --keys 100000 --native-ratio 1 --txn-size 1 --read-ratio 0.9,0.5 --clients 8,32,64 --duration 3 --warmup 1 --check
# U_1 traffic, all transactional: the no-commit and local-commit shortcuts.
run u1 bench ycsb --compare omid,mediator --keys 100000 --native-ratio 0 --txn-size 1 --read-ratio 0.9,0.5 --clients 8,32,64 --duration 3 --warmup 1 --check
# The rho x nu grid (coarse) at U_4, 32 clients.
run grid-u4 bench ycsb --compare omid,mediator --keys 100000 --native-ratio 0,0.5,1 --read-ratio 0,0.5,1 --txn-size 4 --clients 32 --duration 3 --warmup 1 --check
# Serializable against SI, transactions only.
run ser-vs-si bench ycsb --compare mediator,mediator-ser --keys 100000 --native-ratio 0 --read-ratio 0.9,0.5 --txn-size 4 --clients 32 --duration 3 --warmup 1 --check
