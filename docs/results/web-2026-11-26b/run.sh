#!/bin/bash
# Issue 35, second run: TPC-W's loops and both workloads' user aborts are
# declared to the analysis (so `brine group` can pipeline every procedure),
# and the hot writers are BASE for Salt (tpcw: both buy-confirms; rubis:
# store_bid, store_buy_now; the default --base). Release build, this
# 2-core machine, default topology (2 nodes x 1 partition, coordinators on
# their own node, 100 us link), serializable.
# For each workload: `brine group` proposes a grouping at 64 clients; then
# acid (wait-die and detection, the better is the baseline), salt and
# callas with that grouping side by side, 3 rounds, --check; then salt
# with --base none (Salt's lock rules without BASE transactions) beside
# acid, to separate what BASE-ification buys.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; echo "exit $?"; sed -n '/== summary/,$p' $D/$name.txt | head -40; grep -E "^check:" $D/$name.txt | sort | uniq -c; }
for w in tpcw rubis; do
  echo "== brine group $w --clients 64"
  $B group $w --clients 64 --duration 2 --warmup 1 > $D/$w-group.txt 2>&1
  tail -12 $D/$w-group.txt
  g=$(grep -- '--grouping' $D/$w-group.txt | tail -1 | sed 's/.*--grouping "\(.*\)".*/\1/')
  run $w-compare bench $w --compare acid,salt,callas --grouping "$g" --clients 64 --rounds 3 --duration 3 --warmup 1 --check
  run $w-salt-base-none bench $w --compare acid,salt --base none --clients 64 --rounds 3 --duration 3 --warmup 1 --check
done
# After the buy-confirm's body changed (the cart cleared first), TPC-W
# under acid at both levels again, 1 to 256 clients, --check (run while
# another build used the second core: the checks, not the figures, are
# what this part shows).
for iso in serializable read-committed; do
  run tpcw-acid-$iso bench tpcw --check --isolation $iso --clients 1,16,64,256 --duration 2 --warmup 1
done
