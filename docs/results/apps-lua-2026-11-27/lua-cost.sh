#!/bin/bash
# Where a ticketing call's worker CPU goes (us per call): perf samples of the
# worker thread at 4 kHz for 4 s, classified as Lua garbage collection, other
# Lua and mlua work (the interpreter, conversions, the app crate, the Lua
# client), and the rest (the engine, which the compiled workload also runs).
# Usage: lua-cost.sh LABEL BINARY ARGS... (e.g. bench app --app apps/ticket.toml)
label=$1; B=$2; shift 2
$B "$@" --protocol salt --clients 32 --duration 10 --warmup 2 > /tmp/sh.out 2>&1 &
BP=$!
sleep 5
P=$BP
perf record -F 4000 -p $P -o /tmp/sh.data -- sleep 4 >/dev/null 2>&1
wait
tps=$(awk '/^\(all\)/{print $3}' /tmp/sh.out)
perf report -i /tmp/sh.data --no-children --comm brine-worker --sort sym --stdio -n 2>/dev/null | grep -E '^ +[0-9]' > /tmp/sh.syms
python3 - "$label" "$tps" <<'PY'
import re,sys
label,tps=sys.argv[1],float(sys.argv[2])
gc=re.compile(r'sweep|markold|propagatemark|luaC_|youngcollection|atomic|traverse|reallymark|freeobj|finishgencycle|entergen|enterinc|fullgen|separatetobefnz|udata2finalize|GCTM|destroy_userdata|is_safe_to_destroy')
lua=re.compile(r'lua|mlua|brine_app|AppClient|internshrstr|unroll|moveresults|precallC|index2value')
idle=re.compile(r'finish_task_switch|_raw_spin_unlock_irqrestore')
g=l=t=i=0
for line in open('/tmp/sh.syms'):
    m=re.match(r'\s+[\d.]+%\s+(\d+)\s+\[.\]\s+(.*)',line)
    if not m: continue
    n=int(m.group(1)); s=m.group(2); t+=n
    if idle.search(s): i+=n
    elif gc.search(s): g+=n
    elif lua.search(s): l+=n
us=lambda n: n/(tps*4)*1e6/4000
print(f"{label:10s} tps={tps:8.0f} worker-busy={us(t-i):5.1f} gc={us(g):4.1f} lua={us(l):4.1f} other={us(t-i-g-l):5.1f} us/txn")
PY
