#!/bin/bash
# list-append under Salt: liveness (1 s runs, --check) and isolation (0.3 s runs after 0.2 s warm-up, brine check --level salt).
B=/work/main/target/release/brine
cd /tmp/s3
for d in detect wait-die; do
  for c in 32 128; do
   for seed in 0 1 2; do
    f=la-$d-$c-s$seed
    timeout 60 $B bench list-append --protocol salt --clients $c --duration 1 --seed $seed --check --deadlock $d > $f.txt 2>&1
    rc=$?
    timeout 60 $B bench list-append --protocol salt --clients $c --warmup 0.2 --duration 0.3 --seed $seed --check --deadlock $d --history $f.jsonl > $f-short.txt 2>&1
    rc2=$?
    chk=$(ulimit -v 8000000; timeout 300 $B check $f.jsonl --level salt 2>&1 | grep -E "^level|anomalies|^transactions" | tr '\n' ' ')
    echo "$f rc=$rc $(grep -E '^check:|^\(all\)' $f.txt | tr '\n' ' ') | short rc=$rc2 $(grep -E '^check:' $f-short.txt) | $chk"
   done
  done
done
