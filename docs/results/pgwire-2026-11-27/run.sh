#!/bin/bash
# pgbench's built-in TPC-B-like script, unchanged (`pgbench -n`), against
# PostgreSQL 15 and against brine over the PostgreSQL protocol, on this
# machine, same clients, alternating runs (PostgreSQL, then brine, per
# round). PostgreSQL: setup-pg.sh (fsync on). brine: one `brine server`
# from `brine cluster up --durability wal` (WAL on, fsync at commit) with
# apps/pgbench.toml, loaded by apps/pgbench-load.sh (multi-row INSERTs
# over the wire).
#   cargo build --release -p brine
#   docs/results/pgwire-2026-11-27/setup-pg.sh
#   docs/results/pgwire-2026-11-27/run.sh > docs/results/pgwire-2026-11-27/results.txt
set -euo pipefail
cd "$(dirname "$0")/../../.."
BRINE=${BRINE:-target/release/brine}
T=${T:-20}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-"1 4 16 32"}
DIR=$(mktemp -d /tmp/pgbench-brine.XXXX)
PG="-h 127.0.0.1 -p 5433 -U postgres"
BR="-h 127.0.0.1 -p 7800 -U pgbench"
brine_pid=

stop_brine() {
    if [ -n "$brine_pid" ]; then kill "$brine_pid" 2>/dev/null || true; wait "$brine_pid" 2>/dev/null || true; fi
    brine_pid=
}
trap stop_brine EXIT

start_brine() { # PARTITIONS SCALE
    stop_brine
    rm -rf "$DIR/c"
    "$BRINE" cluster up --nodes 1 --partitions-per-node "$1" --deadlock detect \
        --dir "$DIR/c" --port 7600 --app apps/pgbench.toml --durability wal >"$DIR/up.log" 2>&1 &
    brine_pid=$!
    until psql -X -q $BR -d brine -c "SELECT 1" >/dev/null 2>&1; do sleep 0.2; done
    local t0=$SECONDS
    apps/pgbench-load.sh 127.0.0.1 7800 "$2"
    echo "# brine partitions=$1 scale=$2 loaded in $((SECONDS - t0)) s"
}

# SYSTEM LABEL PGBENCH-ARGS...: one run, one result line.
one() {
    local system=$1 label=$2; shift 2
    local out
    out=$(pgbench -n -T "$T" -j 2 "$@" 2>&1) || { echo "$system $label FAILED: $out"; return; }
    local tps lat failed
    tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
    failed=$(echo "$out" | sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p')
    printf '%-8s %-34s tps=%9.1f latency_ms=%7.3f failed=%s\n' "$system" "$label" "$tps" "$lat" "${failed:-0}"
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) T=${T}s rounds=$ROUNDS; cpu: $(nproc) cores"
echo "# $(pgbench --version)"
for scale in 1 10; do
    start_brine 1 "$scale"
    for round in $(seq "$ROUNDS"); do
        for c in $CLIENTS; do
            for mode in simple prepared; do
                one postgres "s=$scale c=$c $mode r=$round" $PG -c "$c" -M "$mode" "pgb$scale"
                one brine "s=$scale c=$c $mode r=$round" $BR -c "$c" -M "$mode" brine
            done
        done
        # The transaction as one procedure call, in both systems.
        for c in 4 16; do
            one postgres "s=$scale c=$c call r=$round" $PG -c "$c" -M prepared -f apps/pgbench-call.sql "pgb$scale"
            one brine "s=$scale c=$c call r=$round" $BR -c "$c" -M prepared -f apps/pgbench-call.sql brine
        done
    done
done
# brine with its tables spread over four partitions (two-phase commit
# inside the process, one log per partition), against PostgreSQL again.
start_brine 4 1
for c in 4 16; do
    one postgres "s=1 c=$c prepared p=4" $PG -c "$c" -M prepared pgb1
    one brine "s=1 c=$c prepared p=4" $BR -c "$c" -M prepared brine
done
# Serializable PostgreSQL (brine always is), retrying its serialization
# failures as pgbench can.
for c in 4 16; do
    PGOPTIONS="-c default_transaction_isolation=serializable" \
        one postgres "s=1 c=$c prepared serializable" $PG -c "$c" -M prepared --max-tries=1000 pgb1
done
