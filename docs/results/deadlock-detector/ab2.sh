#!/bin/bash
set -u
out=/work/wt-deadlock/docs/results/deadlock-detector
for r in 1 2; do
  for b in before after; do
    f=$out/ticket-salt-callas-$b-r$r
    /tmp/dl/brine-$b bench ticket --compare acid,salt,callas --deadlock detect --clients 64 --duration 3 --json $f.json > $f.txt 2>&1
    echo "round $r ticket acid,salt,callas detect $b: $(grep -E '^ +[0-9]+ +(acid|salt|callas) ' $f.txt | awk '{print $2, $4}' | tr '\n' ' ')"
  done
done
for b in before after; do
  for d in wait-die detect; do
    f=$out/register-1node-$b-$d
    /tmp/dl/brine-$b bench register --protocol acid --isolation serializable --clients 32 --duration 3 --nodes 1 --deadlock $d --json $f.json > $f.txt 2>&1
    echo "register 1 node $b $d $(grep -E '^\(all\)' $f.txt | awk '{print $3}')"
  done
done
