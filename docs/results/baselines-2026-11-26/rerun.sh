#!/bin/bash
# After the Callas rank-wait fix: every Callas row again (callas.sh), the
# two four-protocol ticketing runs (salt.sh's), the nexus overhead with one
# deadlock handling for both, and Salt's TPC-C against the binary of
# 2026-11-25 (3d191bd), alternated. The first outputs, from the build
# with the regression, are in callas-before-fix/.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/tmp/brine-m}
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; sed -n '/== summary/,$p' $D/$name.txt | grep -E "^ratio|^baseline|^  (at|peak)|^share|^isolation"; }
$D/callas.sh
run ticket bench ticket --compare acid,callas,salt,raw --grouping checkout:rp=create_order,delete_order --isolation read-committed --clients 64,128,256 --duration 5 --warmup 1 --rounds 2 --check
run ticket-rare-delete bench ticket --compare acid,callas,salt,raw --grouping checkout:rp=create_order,delete_order --isolation read-committed --seats 500000 --delete-percent 5 --clients 64,128,256 --duration 5 --warmup 1 --rounds 2 --check
run callas-nexus-overhead-wait-die bench micro --rows 10000,10 --compare acid,callas --clients 16,64 --duration 5 --warmup 1 --deadlock wait-die
echo "== Salt TPC-C, 64 clients, 3 s: the 2026-11-25 binary (3d191bd) against this one, alternated"
for i in 1 2 3; do for b in /tmp/brine-old $B; do
  echo "$b: $($b bench tpcc --mix salt --protocol salt --isolation read-committed --warehouses 1 --tpcc-order spec --clients 64 --duration 3 --warmup 1 2>&1 | grep -E '^\(all\)' | awk '{print $3}')"
done; done
