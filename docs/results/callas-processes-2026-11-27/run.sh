#!/usr/bin/env bash
# TPC-C at 1 warehouse over three `brine server` processes on loopback:
# Callas (new-order and payment pipelined) against acid with each of its
# deadlock handlings, in alternating rounds, each point on a fresh cluster
# (TPC-C runs on the data its own load wrote). Usage:
#   run.sh OUT_DIR DURABILITY ROUNDS
set -euo pipefail
out=${1:?out dir}; durability=${2:-wal}; rounds=${3:-3}
brine=${BRINE:-target/release/brine}
mkdir -p "$out"
point() { # label protocol deadlock grouping
  local label=$1 protocol=$2 deadlock=$3 grouping=$4 dir
  dir=$(mktemp -d)
  local up=("$brine" cluster up --nodes 3 --dir "$dir" --port 7900 --workload tpcc
    --workload-args "--warehouses 1" --protocol "$protocol" --deadlock "$deadlock"
    --durability "$durability")
  [ -n "$grouping" ] && up+=(--grouping "$grouping")
  "${up[@]}" > "$dir/up.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q "cluster of 3 nodes up" "$dir/up.log" && break; sleep 0.2; done
  # The whole machine's CPU (the three servers and the bench's clients
  # share its 2 cores), each second while the bench loads, runs, checks.
  vmstat -n 1 > "$out/$label.vmstat" &
  local vm=$!
  "$brine" bench tpcc --warehouses 1 --cluster "$dir/cluster.toml" --clients 32 \
    --duration 10 --warmup 2 --check > "$out/$label.txt" 2>&1 || true
  kill $vm
  kill -TERM $pid; wait $pid || true
  rm -rf "$dir"
  # tps, and the median idle share of the machine's CPU over the bench.
  printf '%s %s idle %s%%\n' "$label" \
    "$(grep -E '<- peak' "$out/$label.txt" | awk '{print $(NF-7)}')" \
    "$(awk 'NR > 2 {print $15}' "$out/$label.vmstat" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
}
for r in $(seq "$rounds"); do
  point "r$r-callas" callas detect "orders:rp=new_order,payment"
  point "r$r-acid-wait-die" acid wait-die ""
  point "r$r-acid-detect" acid detect ""
done
