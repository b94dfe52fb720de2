#!/bin/sh
# Loads pgbench's four tables at scale SCALE into a brine server that runs
# apps/pgbench.toml, over the PostgreSQL protocol, the way `pgbench -i`
# fills them (branches and tellers with zero balances, 100000 accounts per
# branch, an empty history), in multi-row INSERTs of 1000 rows.
#   apps/pgbench-load.sh HOST PORT SCALE
set -eu
host=${1:?HOST}; port=${2:?PORT}; scale=${3:?SCALE}
rows() { # TABLE COLUMNS COUNT PER_BRANCH
    awk -v t="$1" -v c="$2" -v n="$3" -v per="$4" 'BEGIN {
        for (i = 1; i <= n; i++) {
            if ((i - 1) % 1000 == 0) printf "INSERT INTO %s (%s) VALUES ", t, c
            if (t == "pgbench_branches") printf "(%d,0,%c%c)", i, 39, 39
            else printf "(%d,%d,0,%c%c)", i, int((i - 1) / per) + 1, 39, 39
            if (i % 1000 == 0 || i == n) print ";"; else printf ","
        }
    }'
}
{
    rows pgbench_branches "bid,bbalance,filler" "$scale" 1
    rows pgbench_tellers "tid,bid,tbalance,filler" $((10 * scale)) 10
    rows pgbench_accounts "aid,bid,abalance,filler" $((100000 * scale)) 100000
} | psql -q -X -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U pgbench -d brine
