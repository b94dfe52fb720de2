#!/bin/bash
# Issue 33: the protocol interface changes no behaviour. The binary before
# the refactor (OLD, built from 2d51104, before the lock table's split too)
# and after it (NEW) run the same commands in turn, three
# times each, ticketing with all four protocols and TPC-C with Salt's mix
# and with a Callas grouping. Release builds; 2-core machine.
D=$(cd "$(dirname "$0")" && pwd)
OLD=${OLD:-/work/bin-old/brine}
NEW=${NEW:-/work/main/target/release/brine}
run() {
  name=$1; shift
  for i in 1 2 3; do
    for side in old new; do
      B=$OLD; [ $side = new ] && B=$NEW
      out=$D/$name-$side-$i
      echo "== $name $side $i: brine $*"
      $B "$@" --json $out.json > $out.txt 2>&1 || echo "FAILED: see $out.txt"
      grep -E "^ *(acid|salt|callas|raw)" $out.txt | grep -E "txn/s|[0-9]" | head -8
    done
  done
}
run ticket bench ticket --compare acid,callas,salt,raw --grouping checkout:rp=create_order,delete_order --isolation read-committed --clients 128 --duration 4 --warmup 1 --check
run tpcc-salt bench tpcc --mix salt --compare acid,salt --isolation read-committed --warehouses 1 --tpcc-order spec --clients 64 --duration 4 --warmup 1 --check
run tpcc-callas bench tpcc --compare acid,callas --grouping "orders:rp=new_order,payment" --warehouses 1 --tpcc-order spec --isolation read-committed --clients 128 --duration 4 --warmup 1 --check
