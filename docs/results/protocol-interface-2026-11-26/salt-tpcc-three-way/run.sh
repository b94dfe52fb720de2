#!/bin/bash
# TPC-C with Salt's mix, three binaries in turn, four times each: before
# everything (2d51104), after the lock table's split only (905c898), and
# the final interface (f37a592). Which change does Salt's TPC-C feel?
D=$(cd "$(dirname "$0")" && pwd)
declare -A BIN=([old]=/work/bin-old/brine [split]=/work/bin-old/brine-split [final]=/work/bin-new/brine-final)
for i in 1 2 3 4; do
  for side in old split final; do
    ${BIN[$side]} bench tpcc --mix salt --compare acid,salt --isolation read-committed --warehouses 1 --tpcc-order spec --clients 64 --duration 4 --warmup 1 --check --json $D/tpcc-salt-$side-$i.json > $D/tpcc-salt-$side-$i.txt 2>&1
  done
done
