#!/usr/bin/env bash
# Salt and Callas against acid over three `brine server` processes on
# loopback, with 1 and with 3 replicas of every log (issue 39), in
# alternating rounds, each point on a fresh durable cluster. Usage:
#   run.sh OUT_DIR ROUNDS
set -euo pipefail
out=${1:?out dir}; rounds=${2:-2}
brine=${BRINE:-target/release/brine}
mkdir -p "$out"
point() { # label replicas workload workload-args protocol deadlock grouping bench-args...
  local label=$1 replicas=$2 workload=$3 wargs=$4 protocol=$5 deadlock=$6 grouping=$7 dir
  shift 7
  dir=$(mktemp -d)
  local up=("$brine" cluster up --nodes 3 --dir "$dir" --port 7900 --workload "$workload"
    --workload-args "$wargs" --protocol "$protocol" --deadlock "$deadlock"
    --isolation read-committed --durability wal --replicas "$replicas")
  [ -n "$grouping" ] && up+=(--grouping "$grouping")
  "${up[@]}" > "$dir/up.log" 2>&1 &
  local pid=$!
  for _ in $(seq 150); do grep -q "cluster of 3 nodes up" "$dir/up.log" && break; sleep 0.2; done
  # With replicated logs a partition serves once its log's group has a
  # leader that took it over.
  if [ "$replicas" -gt 1 ]; then
    for _ in $(seq 150); do
      [ "$("$brine" status --cluster "$dir/cluster.toml" 2>/dev/null | grep -cE '^part-[0-9]+ +leader [0-9]')" -ge 3 ] && break
      sleep 0.2
    done
  fi
  vmstat -n 1 > "$out/$label.vmstat" &
  local vm=$!
  # A partition not served yet (its takeover, its protocol's recovery)
  # refuses the load's first count: the bench goes again.
  for _ in 1 2 3 4 5; do
    # shellcheck disable=SC2086
    "$brine" bench "$workload" $wargs --cluster "$dir/cluster.toml" "$@" \
      --duration 10 --warmup 2 --check > "$out/$label.txt" 2>&1 || true
    grep -q "did not answer" "$out/$label.txt" || break
    sleep 1
  done
  kill $vm
  kill -TERM $pid; wait $pid || true
  rm -rf "$dir"
  printf '%s %s idle %s%% %s\n' "$label" \
    "$(grep -E '<- peak' "$out/$label.txt" | awk '{print $(NF-7)}')" \
    "$(awk 'NR > 2 {print $15}' "$out/$label.vmstat" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" \
    "$(grep -E '^check:' "$out/$label.txt" | head -1)" | tee -a "$out/summary.txt"
}
tpcc="--warehouses 1 --mix salt --tpcc-order spec"
ticket=""
for r in $(seq "$rounds"); do
  for n in 1 3; do
    point "r$r-${n}r-tpcc-salt" $n tpcc "$tpcc" salt detect "" --clients 32
    point "r$r-${n}r-tpcc-acid-wait-die" $n tpcc "$tpcc" acid wait-die "" --clients 32
    point "r$r-${n}r-tpcc-acid-detect" $n tpcc "$tpcc" acid detect "" --clients 32
    point "r$r-${n}r-ticket-callas" $n ticket "$ticket" callas detect "checkout:rp=create_order,delete_order" --clients 64
    point "r$r-${n}r-ticket-acid-detect" $n ticket "$ticket" acid detect "" --clients 64
    point "r$r-${n}r-ticket-acid-wait-die" $n ticket "$ticket" acid wait-die "" --clients 64
  done
done
