#!/bin/bash
# Callas `sc` with the write-ahead log: TPC-C (1 warehouse, standard
# mix), acid against Callas with new-order and payment in one group,
# pipelined (`rp`) and chopped by the classic analysis (`sc`, each piece
# committing on its own, rolled forward after a crash), all with
# --durability wal, alternating rounds, --check on every point. acid under
# wait-die and detection (the ratio is against the better), Callas under
# detection (its default).
set -e
B=${B:-target/release/brine}
for r in $(seq 1 "${ROUNDS:-2}"); do
  echo "== round $r"
  $B bench tpcc --warehouses 1 --compare acid,acid@detect,callas@rp,callas@sc \
    --grouping "rp@orders:rp=new_order,payment" --grouping "sc@orders:sc=new_order,payment" \
    --durability wal --clients 32 --duration 10 --warmup 2 --check 2>&1 |
    grep -E "^(check|cpu|wal|cluster|error):|<- peak|^ +[a-z_@,]+ +" | grep -vE "^ +base" || true
done
