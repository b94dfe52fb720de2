#!/bin/bash
# Issue 32: the Salt rows of targets.md re-measured under the `best`
# baseline policy (acid under wait-die and under the detector, the best at
# each client count). Release build of the commit that adds the policy.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/tmp/brine-m}
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; sed -n '/== summary/,$p' $D/$name.txt | grep -E "^ratio|^baseline|^  (at|peak)|^share|^isolation"; }
run timeout-ticket bench ticket --compare acid@timeout,acid@wait-die,acid@detect --baseline acid@timeout --isolation read-committed --clients 64,256 --duration 3 --warmup 1
run timeout-tpcc bench tpcc --compare acid@timeout,acid@wait-die,acid@detect --baseline acid@timeout --warehouses 1 --clients 64 --duration 3 --warmup 1
run timeout-register bench register --compare acid@timeout,acid@wait-die,acid@detect --baseline acid@timeout --clients 32 --duration 3 --warmup 1
run salt-tpcc bench tpcc --mix salt --compare acid,salt --isolation read-committed --warehouses 1 --tpcc-order spec --clients 16,96,128 --duration 5 --warmup 1 --rounds 2 --check
for base in new_order,payment new_order,payment,delivery all; do
  list=$base
  run salt-tpcc-incr-$base bench tpcc --mix salt --compare acid,salt --isolation read-committed --warehouses 1 --tpcc-order spec --clients 64,128 --duration 5 --warmup 1 --base $list --check
done
run ticket bench ticket --compare acid,callas,salt,raw --grouping checkout:rp=create_order,delete_order --isolation read-committed --clients 64,128,256 --duration 5 --warmup 1 --rounds 2 --check
run ticket-rare-delete bench ticket --compare acid,callas,salt,raw --grouping checkout:rp=create_order,delete_order --isolation read-committed --seats 500000 --delete-percent 5 --clients 64,128,256 --duration 5 --warmup 1 --rounds 2 --check
run salt-micro1 bench micro --rows 10,100,1000,10000,100000 --compare acid,salt-nolocal,salt --isolation read-committed --clients 64 --duration 3 --warmup 1
run salt-micro2 bench micro2 --position 1,4,7,10 --compare acid,salt-nolocal,salt --isolation read-committed --clients 64 --duration 3 --warmup 1
run salt-micro3 bench micro3 --read-only-percent 0,50,80,95 --compare acid,salt-nolocal,salt --isolation read-committed --clients 64 --duration 3 --warmup 1
run salt-lowload bench tpcc --mix salt --compare acid,salt --isolation read-committed --warehouses 1 --clients 1 --duration 5 --warmup 1
