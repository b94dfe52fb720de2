#!/bin/bash
# Issue 33: the protocol interface changes no behaviour. The binary before
# the refactor (OLD, built from 2d51104, before the lock table's split too)
# and after it (NEW, cd337d3) run the same commands in turn, ticketing with
# all four protocols (3 times each) and TPC-C with Salt's mix and with a
# Callas grouping (6 times each). Release builds; 2-core machine.
# first-pass-6f886b7/: the same at 6f886b7 (3 times each; Callas TPC-C 3
# more with rerun-callas.sh), before the counters moved to the protocols.
D=$(cd "$(dirname "$0")" && pwd)
OLD=${OLD:-/work/bin-old/brine}
NEW=${NEW:-/work/main/target/release/brine}
run() {
  name=$1; runs=$2; shift 2
  for i in $(seq 1 $runs); do
    for side in old new; do
      B=$OLD; [ $side = new ] && B=$NEW
      out=$D/$name-$side-$i
      echo "== $name $side $i: brine $*"
      $B "$@" --json $out.json > $out.txt 2>&1 || echo "FAILED: see $out.txt"
      grep -E "^ratio" $out.txt
    done
  done
}
run ticket 3 bench ticket --compare acid,callas,salt,raw --grouping checkout:rp=create_order,delete_order --isolation read-committed --clients 128 --duration 4 --warmup 1 --check
run tpcc-salt 6 bench tpcc --mix salt --compare acid,salt --isolation read-committed --warehouses 1 --tpcc-order spec --clients 64 --duration 4 --warmup 1 --check
run tpcc-callas 6 bench tpcc --compare acid,callas --grouping "orders:rp=new_order,payment" --warehouses 1 --tpcc-order spec --isolation read-committed --clients 128 --duration 4 --warmup 1 --check
