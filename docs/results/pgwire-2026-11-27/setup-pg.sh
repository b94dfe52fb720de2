#!/bin/bash
# A PostgreSQL 15 server for the pgbench comparison (run.sh): its own
# data directory, fsync and synchronous_commit on (the defaults), memory
# settings sized for this machine, pgbench's tables at scale 1 and 10
# loaded by `pgbench -i` (PostgreSQL's own fastest route), and the TPC-B
# transaction as a PL/pgSQL procedure for the CALL runs.
#   docs/results/pgwire-2026-11-27/setup-pg.sh [PGDIR]
set -euo pipefail
PGDIR=${1:-/work/pg}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PORT=5433
# PostgreSQL refuses to run as root.
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -c "$*"; else sh -c "$*"; fi; }
if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
    mkdir -p "$PGDIR"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$PGDIR"
    as_pg "$PGBIN/initdb -D $PGDIR/data -A trust -U postgres" >/dev/null
    cat >>"$PGDIR/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PGDIR'
shared_buffers = 2GB
max_wal_size = 8GB
checkpoint_timeout = 30min
fsync = on
synchronous_commit = on
CONF
fi
as_pg "$PGBIN/pg_ctl -D $PGDIR/data -l $PGDIR/log status" >/dev/null ||
    as_pg "$PGBIN/pg_ctl -D $PGDIR/data -l $PGDIR/log start -w" >/dev/null
for s in 1 10; do
    psql -X -q -h 127.0.0.1 -p $PORT -U postgres -c "DROP DATABASE IF EXISTS pgb$s" -c "CREATE DATABASE pgb$s"
    pgbench -i -q -s $s -h 127.0.0.1 -p $PORT -U postgres pgb$s 2>&1 | tail -1
    psql -X -q -h 127.0.0.1 -p $PORT -U postgres -d pgb$s <<'SQL'
CREATE PROCEDURE tpcb(p_aid int, p_tid int, p_bid int, p_delta int) LANGUAGE plpgsql AS $$
DECLARE bal int;
BEGIN
    UPDATE pgbench_accounts SET abalance = abalance + p_delta WHERE aid = p_aid;
    SELECT abalance INTO bal FROM pgbench_accounts WHERE aid = p_aid;
    UPDATE pgbench_tellers SET tbalance = tbalance + p_delta WHERE tid = p_tid;
    UPDATE pgbench_branches SET bbalance = bbalance + p_delta WHERE bid = p_bid;
    INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
        VALUES (p_tid, p_bid, p_aid, p_delta, CURRENT_TIMESTAMP);
END $$;
SQL
done
