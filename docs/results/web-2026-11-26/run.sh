#!/bin/bash
# Issue 35: TPC-W and RUBiS on the embedded cluster (release build, this
# 2-core machine, default topology: 2 nodes x 1 partition, coordinators on
# their own node, 100 us link), under acid at both levels with --check,
# their histories checked, then Salt and Callas beside acid with the
# grouping the tool proposes.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; echo "exit $?"; sed -n '/== summary/,$p' $D/$name.txt | head -30; grep -E "^check:" $D/$name.txt | sort | uniq -c; }
for w in tpcw rubis; do
  for iso in serializable read-committed; do
    run $w-$iso bench $w --check --isolation $iso --clients 1,16,64,256 --duration 3 --warmup 1
  done
  for iso in serializable read-committed; do
    echo "== $w history at $iso"
    $B bench $w --isolation $iso --clients 16 --duration 2 --warmup 1 --history /tmp/$w-$iso.jsonl > /dev/null 2>&1
    $B check /tmp/$w-$iso.jsonl --level $iso 2>&1 | head -6 | tee $D/$w-history-$iso.txt
  done
  echo "== brine group $w --clients 64"
  $B group $w --clients 64 --duration 2 --warmup 1 > $D/$w-group.txt 2>&1
  tail -15 $D/$w-group.txt
done
# Salt and Callas beside acid, with the grouping `brine group` chose above
# (tpcw: hottest 3 pipelined, 1.16x there; rubis: hottest 1, 1.11x). No
# procedure is BASE, so salt runs them as ACID transactions with its own
# lock table rules (its overhead).
run tpcw-compare bench tpcw --compare acid,salt,callas --grouping "hot:rp=do_subject_search,get_related,get_book" --clients 64 --rounds 3 --duration 3 --warmup 1 --check
run rubis-compare bench rubis --compare acid,salt,callas --grouping "hot:rp=about_me_user" --clients 64 --rounds 3 --duration 3 --warmup 1 --check
