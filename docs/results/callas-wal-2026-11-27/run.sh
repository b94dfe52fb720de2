#!/bin/bash
# Callas with the write-ahead log: TPC-C (1 warehouse, standard mix),
# acid against Callas with new-order and payment pipelined in one group,
# both with --durability wal, alternating rounds, each under its best
# deadlock handling (acid: wait-die, brine's default for it on TPC-C;
# callas: detection, its registration's default), --check on every point.
# Then the same comparison in memory, for the cost of the log.
set -e
B=${B:-target/release/brine}
ROUNDS=${ROUNDS:-3}
for r in $(seq 1 "$ROUNDS"); do
  for d in wal none; do
    echo "== round $r durability $d"
    $B bench tpcc --warehouses 1 --compare acid,callas --grouping "orders:rp=new_order,payment" \
      --durability "$d" --clients 32 --duration 10 --warmup 2 --check 2>&1 |
      grep -E "^(check|cpu|wal|cluster):|<- peak|^ +[a-z_,]+ +" | grep -vE "^ +base" || true
  done
done
