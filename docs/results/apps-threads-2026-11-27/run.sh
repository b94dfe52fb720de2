#!/bin/bash
# Issue 37: is the file's remaining gap under Salt the worker's CPU? The
# compiled workloads and their application files under Salt, alternating,
# with the runtime's default single worker thread on this 2-core machine
# and with two (--threads 2). Release build; 32 clients, 8 s after 2 s of
# warm-up, --check on every run.
D=$(cd "$(dirname "$0")" && pwd)
B=${BRINE:-/work/main/target/release/brine}
A=/work/main/apps
run() { # NAME ARGS...
    name=$1; shift
    $B "$@" --protocol salt --clients 32 --duration 8 --warmup 2 --check > "$D/$name.txt" 2>&1
    tps=$(grep '^(all)' "$D/$name.txt" | awk '{print $3}')
    cpu=$(grep '^cpu:' "$D/$name.txt")
    chk=$(grep -c '^check: passed' "$D/$name.txt")
    printf '%-28s tps=%9s checks_passed=%s %s\n' "$name" "$tps" "$chk" "$cpu"
}
for round in 1 2 3; do
    for threads in 1 2; do
        run ticket-compiled-t$threads-$round bench ticket --threads $threads
        run ticket-file-t$threads-$round bench app --app $A/ticket.toml --threads $threads
        run bank-compiled-t$threads-$round bench bank --threads $threads
        run bank-file-t$threads-$round bench app --app $A/bank.toml --threads $threads
    done
done
