#!/bin/bash
# The fault suite, larger than CI's:
# 1. the seeded trials of crates/cluster/tests/faults.rs (bank under acid,
#    Callas with one 2PL group, Salt's BASE transfer; 3 nodes, virtual
#    clock, 1% loss plus one node cut for 20-200 ms), TRIALS of each;
# 2. brine bench under faults on 3 nodes (real clock, 100 us link): bank
#    and TPC-C under acid, Salt and Callas, 0.5% of messages lost and node
#    1 cut off from 3 s to 5 s after the warm-up began, 5% of messages
#    held back up to 2 ms (reordered), 5% of decisions delivered twice
#    (the copy up to 2 ms later), --check, and the recorded history
#    checked by brine check; each with seeds SEEDS.
set -u
B=${B:-target/release/brine}
TRIALS=${TRIALS:-300}
OUT=${OUT:-/tmp/brine-faults}
mkdir -p "$OUT"
[ "$TRIALS" -gt 0 ] && BRINE_FAULT_TRIALS=$TRIALS cargo test -q -p brine-cluster --test faults -- --nocapture 2>&1 |
  grep -E "fault trials|test result"
SEEDS=${SEEDS:-"7 8 9"}
REORDER=${REORDER:-0.05}
DUPLICATE=${DUPLICATE:-0.05}
run() { # label level args...
  label=$1; level=$2; shift 2
  for seed in $SEEDS; do
    echo "== $label seed $seed"
    $B bench "$@" --nodes 3 --loss 0.005 --reorder "$REORDER" --duplicate "$DUPLICATE" --cut 1@3000-5000 --seed "$seed" \
      --clients 16 --duration 8 --warmup 1 --check --history "$OUT/$label-$seed.jsonl" 2>&1 |
      grep -E "^(faults|check|cluster):|<- peak"
    $B check --level "$level" "$OUT/$label-$seed.jsonl" 2>&1 | grep -E "^(transactions|anomalies|level)"
  done
}
# Salt runs with its log: a BASE transaction given up in doubt is rolled
# forward from its logged contexts (without a log it stays half done).
run bank-acid serializable bank --protocol acid
run bank-salt salt bank --protocol salt --durability wal
run bank-callas serializable bank --protocol callas
run tpcc-acid serializable tpcc --warehouses 1 --protocol acid
run tpcc-salt salt tpcc --warehouses 1 --protocol salt --durability wal
run tpcc-callas serializable tpcc --warehouses 1 --protocol callas --grouping "orders:rp=new_order,payment"
# Callas `sc` with its log: each piece commits on its own; a piece's
# commit resent until acknowledged, and a chopped transaction cut by a
# crash rolled forward (none here: no crash, only link faults).
run tpcc-callas-sc serializable tpcc --warehouses 1 --protocol callas --grouping "orders:sc=new_order,payment" --durability wal
