#!/bin/bash
# The Callas TPC-C row of ab.sh again, three more alternations (runs 4-6):
# ab.sh's new runs fell from 5,231 to 3,662 txn/s while the old ones held.
D=$(cd "$(dirname "$0")" && pwd)
OLD=${OLD:-/work/bin-old/brine}
NEW=${NEW:-/work/bin-new/brine}
for i in ${RUNS:-4 5 6}; do
  for side in old new; do
    B=$OLD; [ $side = new ] && B=$NEW
    out=$D/tpcc-callas-$side-$i
    $B bench tpcc --compare acid,callas --grouping "orders:rp=new_order,payment" --warehouses 1 --tpcc-order spec --isolation read-committed --clients 128 --duration 4 --warmup 1 --check --json $out.json > $out.txt 2>&1
    echo "$side $i: $(grep -E '^ +.*callas +128' $out.txt | awk '{print $(NF-6)}' | head -1)"
  done
done
