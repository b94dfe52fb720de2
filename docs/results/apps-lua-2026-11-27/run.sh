#!/bin/bash
# Issue 37: ticketing (and bank) as application files beside the compiled
# workloads under Salt, alternating, after the Lua path's costs were cut.
# Release build; the default runtime (1 worker thread on this 2-core
# machine); 32 clients, 10 s after 2 s of warm-up, --check on every run.
D=${OUT:-$(cd "$(dirname "$0")" && pwd)}
B=${BRINE:-/work/main/target/release/brine}
A=/work/main/apps
run() { # NAME ARGS...
    name=$1; shift
    $B "$@" --protocol salt --clients 32 --duration 10 --warmup 2 --check > "$D/$name.txt" 2>&1
    tps=$(grep '^(all)' "$D/$name.txt" | awk '{print $3}')
    cpu=$(grep '^cpu:' "$D/$name.txt")
    chk=$(grep -c '^check: passed' "$D/$name.txt")
    printf '%-22s tps=%9s checks_passed=%s %s\n' "$name" "$tps" "$chk" "$cpu"
}
for round in ${ROUNDS:-1 2 3 4 5 6}; do
    run ticket-compiled-$round bench ticket
    run ticket-file-$round bench app --app $A/ticket.toml
done
for round in ${BANK_ROUNDS:-1 2 3}; do
    run bank-compiled-$round bench bank
    run bank-file-$round bench app --app $A/bank.toml
done
