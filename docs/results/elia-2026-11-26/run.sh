#!/bin/bash
# Issue 36 (Elia), first measurements. Release build, this 2-core machine,
# one process: every server of a cluster shares the same 2 cores, so the
# cores, not the protocol, bound every throughput here (see the cpu: lines).
# Protocols (one run per table, ratios side by side):
#   elia           operation partitioning + Conveyor Belt, full replicas
#   acid           partitioned 2PL + 2PC, the schema's partitioning (TPC-W:
#                  customer and cart ids; what the analysis implies), the
#                  better of wait-die and detection per point
#   central        one server holds and runs everything
#   read-replicas  reads at the client's replica, writes at server 0,
#                  shipped in commit order by the token; read-your-writes
# Placement: co-located (client i at server i mod N), as the sources ran.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
T=/work/main/topologies/wan-seed004.txt
run() { name=$1; shift; echo "== $name: brine $*"; $B "$@" --json $D/$name.json > $D/$name.txt 2>&1; echo "exit $?"; sed -n '/== summary/,$p' $D/$name.txt | head -60; grep -E "^check:" $D/$name.txt | sort | uniq -c; }

# 1. LAN scale-out, 100 us link, 8 clients per server.
for n in 1 2 4 7 10 13; do
  run lan-tpcw-$n bench tpcw --nodes $n --placement colocated --compare acid,elia --clients $((8*n)) --duration 3 --warmup 1 --check
  run lan-rubis-$n bench rubis --scale small --nodes $n --placement colocated --compare acid,elia --clients $((8*n)) --duration 3 --warmup 1 --check
done

# 2. WAN, seed 004 Table 2 (round trips halved), 2 to 5 sites: light load
# (one client per site) for latency, 16 clients per site for throughput.
for n in 2 3 5; do
  for w in tpcw rubis; do
    s=standard; [ $w = rubis ] && s=small
    run wan-$w-$n bench $w --scale $s --nodes $n --placement colocated --topology $T --compare central,read-replicas,elia --clients $n,$((16*n)) --duration 6 --warmup 2 --check
  done
done

# 3. Microbenchmark: 3 WAN sites, 5 ms operations, local share 30 to 90%.
run micro bench elia-micro --nodes 3 --placement colocated --topology $T --compare central,read-replicas,elia --local-percent 30,50,70,90 --op-ms 5 --clients 48 --duration 6 --warmup 2 --check

# 4. (added) LAN at a fixed load: 32 clients whatever the number of
# servers, so the latency shows what each server added costs per call.
for n in 1 2 4 7 10 13; do
  run fixed-tpcw-$n bench tpcw --nodes $n --placement colocated --compare acid,elia --clients 32 --duration 3 --warmup 1 --check
  run fixed-rubis-$n bench rubis --scale small --nodes $n --placement colocated --compare acid,elia --clients 32 --duration 3 --warmup 1 --check
done
