#!/bin/bash
# Issue 36 (Elia): servers as processes. Release build, this 2-core
# machine: three `brine server` processes and the bench process share 2
# cores, so the cores bound every throughput (see each point's cpu: line,
# which counts the bench process only; the servers' share is the rest).
# 1. elia-micro over three processes (real TCP on loopback, durable), one
#    fresh cluster per point: elia against partitioned acid (2PL + 2PC,
#    wait-die, the default for acid across processes), local share 30/70/90%.
# 2. Restart: three durable servers after elia-micro load; server 1 killed
#    with SIGKILL and restarted; how long until it rejoined the ring, and
#    every replica's global rows after.
# PARTS=2 runs the second part alone.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
W=$(mktemp -d)
port=17600

point() { # protocol local-percent
  local p=$1 l=$2 dir=$W/$1-$2
  port=$((port + 10))
  $B cluster up --dir $dir --workload elia-micro --workload-args "--op-ms 5" --protocol $p --durability wal --port $port > $dir.up 2>&1 &
  local up=$!
  until $B status --cluster $dir/cluster.toml > /dev/null 2>&1; do sleep 0.2; done
  echo "== $p, local $l%: brine bench elia-micro --cluster --local-percent $l --op-ms 5 --clients 24 --duration 10 --warmup 2 --check"
  $B bench elia-micro --cluster $dir/cluster.toml --local-percent $l --op-ms 5 --clients 24 --duration 10 --warmup 2 --check --json $D/micro-$p-$l.json > $D/micro-$p-$l.txt 2>&1
  echo "exit $?"; grep -E "^\(all\)|^global_op|^local_op|^check:|^cpu:|^protocol:" $D/micro-$p-$l.txt
  kill -TERM $up; wait $up
}
PARTS=${PARTS:-12}
if [[ $PARTS == *1* ]]; then for l in 30 70 90; do point acid $l; point elia $l; done; fi

# 2. Restart of server 1: 10 s of load (every server's replica gets
# thousands of updates), server 1 killed with SIGKILL, restarted; how long
# from its start to its rejoining the ring (its log recovered, the token
# regenerated), and every replica's global rows after it. (A run through
# the kill is the test crates/cli/tests/elia_processes.rs: `brine bench`
# ends a run at a call's transport error.)
R=$W/restart; mkdir -p $R/data
cat > $R/cluster.toml <<TOML
workload = "elia-micro"
workload_args = ["--op-ms", "5"]
protocol = "elia"
isolation = "serializable"
partitions_per_node = 1
durability = "wal"
data_dir = "data"
TOML
for i in 0 1 2; do printf '\n[[nodes]]\nid = %d\naddress = "127.0.0.1:%d"\n' $i $((17700 + i)) >> $R/cluster.toml; done
start() { (cd $R && RUST_LOG=brine_cluster=info $B server --config cluster.toml --node $1 2>> node-$1.log &) ; }
for i in 0 1 2; do start $i; done
until $B status --cluster $R/cluster.toml > /dev/null 2>&1; do sleep 0.2; done
echo "== restart: brine bench elia-micro --cluster --local-percent 70 --op-ms 5 --clients 24 --duration 10 --warmup 1 --check"
$B bench elia-micro --cluster $R/cluster.toml --local-percent 70 --op-ms 5 --clients 24 --duration 10 --warmup 1 --check > $D/restart.txt 2>&1
echo "exit $?"; grep -E "^\(all\)|^global_op|^check:" $D/restart.txt
pkill -9 -f "cluster.toml --node 1\$"; sleep 0.5
echo "restarted: $(date -u +%T.%N)"; start 1
for i in $(seq 400); do [ "$(grep -c 'joined the ring' $R/node-1.log)" -ge 2 ] && break; sleep 0.05; done
grep -h -E "recovered|joined the ring|token regenerated" $R/node-1.log $R/node-0.log | sed 's/\x1b\[[0-9;]*m//g' | sort | tail -n 4
# Every replica's global rows, once they agree (the token brings server 1
# what it missed).
for i in $(seq 100); do
  v=$(for s in 0 1 2; do $B call --cluster $R/cluster.toml globals_at $s 2>&1 | tail -n 1; done | sort -u)
  [ "$(echo "$v" | wc -l)" = 1 ] && break; sleep 0.1; done
echo "every replica's globals_at: $v (after $i reads)"
pkill -f "cluster.toml --node"; rm -rf $W
