#!/bin/bash
# Since 2026-11-27 `chop@orders:chop=payment` is refused at start: the finest
# chopping of payment has an SC-cycle (docs/callas.md, `chop`). The figures
# in this directory were measured before.
# Every Callas mechanism (sc over the whole application, sc over two
# procedures, chop, rp) on TPC-C with --check, old (2d51104) and final
# (f37a592) binary, one run each: the mechanisms the A/B above does not
# time run the same after the refactor.
D=$(cd "$(dirname "$0")" && pwd)
for side in old final; do
  B=/work/bin-old/brine; [ $side = final ] && B=/work/bin-new/brine-final
  $B bench tpcc --compare acid,callas@sc-app,callas@sc-groups,callas@chop,callas@rp \
    --grouping "sc-app@app:sc=new_order,payment,delivery,order_status,stock_level" \
    --grouping "sc-groups@orders:sc=new_order,payment" --grouping "chop@orders:chop=payment" \
    --grouping "rp@orders:rp=new_order,payment" --warehouses 1 --tpcc-order spec \
    --isolation read-committed --clients 64 --duration 3 --warmup 1 --check \
    --json $D/$side.json > $D/$side.txt 2>&1
done
