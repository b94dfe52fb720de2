#!/bin/bash
# Issue 37: the compiled workloads against the same applications as files
# (apps/ticket.toml, apps/bank.toml), in alternating runs on the embedded
# cluster (defaults: 4 nodes x 2 partitions, co-located placement as the
# defaults give it, the default link delay). Release build, this 2-core
# machine. Each run compares acid (at its best of wait-die and detection)
# with salt, and checks its invariants.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
A=/work/main/apps
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; echo "exit $?"; sed -n '/== summary/,$p' $D/$name.txt | head -12; grep -E "^check:" $D/$name.txt | sort | uniq -c; }
common="--compare acid,salt --clients 32 --duration 10 --warmup 2 --check"
for round in 1 2 3; do
  run ticket-compiled-$round bench ticket $common
  run ticket-file-$round bench app --app $A/ticket.toml $common
done
for round in 1 2 3; do
  run bank-compiled-$round bench bank $common
  run bank-file-$round bench app --app $A/bank.toml $common
done
