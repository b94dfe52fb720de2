#!/bin/bash
# Issue 31 item 4: --deadlock wait-die against detect, acid, alternating, 3 rounds.
B=/work/main/target/release/brine
cd /tmp/dl4
line() { grep -E '^\(all\)' $1 | awk '{print $3}'; }
for r in 1 2 3; do
 for d in wait-die detect; do
  $B bench tpcc --warehouses 1 --protocol acid --clients 64 --duration 3 --deadlock $d --json tpcc-$d-r$r.json > tpcc-$d-r$r.txt 2>&1
  echo "r$r tpcc $d $(line tpcc-$d-r$r.txt)"
  $B bench tpcc --warehouses 1 --protocol acid --clients 64 --duration 3 --deadlock $d --stock-level-isolation serializable --json tpcc-slser-$d-r$r.json > tpcc-slser-$d-r$r.txt 2>&1
  echo "r$r tpcc-slser $d $(line tpcc-slser-$d-r$r.txt)"
  $B bench ticket --protocol acid --clients 64 --duration 3 --deadlock $d --json ticket-$d-r$r.json > ticket-$d-r$r.txt 2>&1
  echo "r$r ticket $d $(line ticket-$d-r$r.txt)"
  $B bench register --protocol acid --isolation serializable --clients 32 --duration 3 --deadlock $d --json register-$d-r$r.json > register-$d-r$r.txt 2>&1
  echo "r$r register $d $(line register-$d-r$r.txt)"
 done
done
