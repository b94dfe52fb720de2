#!/bin/bash
# Alternating A/B: before/after binaries x wait-die/detect, per workload, per round.
set -u
out=/work/wt-deadlock/docs/results/deadlock-detector
mkdir -p $out
rounds=${ROUNDS:-2}
for r in $(seq 1 $rounds); do
  for w in register ticket tpcc; do
    case $w in
      register) args="register --protocol acid --isolation serializable --clients 32 --duration 3";;
      ticket)   args="ticket --protocol acid --clients 64 --duration 3";;
      tpcc)     args="tpcc --warehouses 1 --protocol acid --clients 64 --duration 3";;
    esac
    for b in before after; do
      for d in wait-die detect; do
        f=$out/$w-$b-$d-r$r
        /tmp/dl/brine-$b bench $args --deadlock $d --json $f.json > $f.txt 2>&1
        tps=$(grep -E '^\(all\)' $f.txt | awk '{print $3}')
        echo "round $r $w $b $d $tps"
      done
    done
  done
done
