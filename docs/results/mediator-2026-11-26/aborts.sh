#!/bin/bash
# Issue 34: Mediator's abort rates on a key space with little skew per key
# (1,000,000 keys, uniform), U_4 and U_20, transactions only, 32 clients.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
$B bench ycsb --compare mediator --keys 1000000 --distribution uniform --native-ratio 0 --read-ratio 0.5,0 --txn-size 4,20 --clients 32 --duration 3 --warmup 1 --check --json $D/aborts.json > $D/aborts.txt 2>&1
grep -E "^== ycsb|^protocol:|^\(all\)" $D/aborts.txt
