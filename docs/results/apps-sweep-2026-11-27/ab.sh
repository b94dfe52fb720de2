#!/bin/bash
# The sweep change alone, on ticketing under Salt (WORKLOAD: the compiled
# one by default, or "app --app apps/ticket.toml"):
# the binary before it (OLD) and after it (NEW), alternating; same
# settings as run.sh. us/txn = worker CPU per transaction.
for round in ${ROUNDS:-1 2 3 4}; do
    for v in old new; do
        B=$([ $v = old ] && echo "$OLD" || echo "$NEW")
        out=$($B bench ${WORKLOAD:-ticket} --protocol salt --clients 32 --duration 10 --warmup 2 --check 2>&1)
        tps=$(grep '^(all)' <<<"$out" | awk '{print $3}')
        w=$(grep '^cpu:' <<<"$out" | sed -E 's/.*brine-worker ([0-9.]+).*/\1/')
        printf '%-4s round %s tps=%9s worker=%s us/txn=%.1f checks_passed=%s\n' $v $round "$tps" "$w" \
            "$(echo "$w / $tps * 1000000" | bc -l)" "$(grep -c '^check: passed' <<<"$out")"
    done
done
