#!/bin/bash
# Salt on the checking workloads: seeds x clients x deadlock handling; each run under timeout 60.
B=/work/main/target/release/brine
cd /tmp/s3
for w in register; do
 for d in detect wait-die; do
  for c in 32 128; do
   for seed in 0 1 2; do
    f=$w-$d-$c-s$seed
    timeout 60 $B bench $w --protocol salt --clients $c --duration 1 --seed $seed --check --deadlock $d --history $f.jsonl > $f.txt 2>&1
    rc=$?
    chk=$(timeout 120 $B check $f.jsonl --level salt 2>&1 | grep -E "^level|anomalies|^transactions" | tr '\n' ' ')
    echo "$f rc=$rc $(grep -E '^check:|^\(all\)' $f.txt | tr '\n' ' ') | $chk"
   done
  done
 done
done
