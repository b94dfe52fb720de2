#!/usr/bin/env python3
"""Tabulates ab.sh's outputs: per workload and protocol entry, the
throughput of each run of the old and the new binary, their means, the
new/old ratio of the means, and each run's ratio to the best acid of the
same run (what every reported ratio is)."""
import glob, itertools, json, os, statistics, sys


def permutation_p(a, b):
    """Two-sided exact permutation test of the difference of means: the
    share of all splits of a+b into groups of len(a) and len(b) whose
    difference is at least as large as the one observed."""
    both = a + b
    observed = abs(statistics.mean(a) - statistics.mean(b))
    n, hits, total = len(a), 0, 0
    for idx in itertools.combinations(range(len(both)), n):
        x = [both[i] for i in idx]
        y = [both[i] for i in range(len(both)) if i not in idx]
        total += 1
        if abs(statistics.mean(x) - statistics.mean(y)) >= observed - 1e-9:
            hits += 1
    return hits / total

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for workload in ["ticket", "tpcc-salt", "tpcc-callas"]:
    rows = {}
    ratios = {}
    for side in ["old", "new"]:
        for f in sorted(glob.glob(f"{D}/{workload}-{side}-*.json")):
            d = json.load(open(f))
            res = d["results"]
            best_acid = max(r["throughput_tps"] for r in res if r["protocol"].startswith("acid"))
            for r in res:
                if r.get("check") not in ("passed", "skipped", None):
                    print(f"{f}: {r['protocol']} check {r.get('check')}", file=sys.stderr)
                rows.setdefault(r["protocol"], {}).setdefault(side, []).append(r["throughput_tps"])
                if not r["protocol"].startswith("acid"):
                    ratios.setdefault(r["protocol"], {}).setdefault(side, []).append(
                        r["throughput_tps"] / best_acid)
    print(f"\n{workload}")
    print(f"{'entry':<16} {'old runs (txn/s)':<44} {'new runs (txn/s)':<44} {'old mean':>9} {'new mean':>9} {'new/old':>8} {'medians':>8} {'p':>5}")
    for p, s in rows.items():
        o, n = s.get("old", []), s.get("new", [])
        if not o or not n:
            continue
        mo, mn = statistics.mean(o), statistics.mean(n)
        fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
        med = statistics.median(n) / statistics.median(o)
        print(f"{p:<16} {fmt(o):<44} {fmt(n):<44} {mo:>9,.0f} {mn:>9,.0f} {mn/mo:>7.2f}x {med:>7.2f}x {permutation_p(o, n):>5.2f}")
    for p, s in ratios.items():
        o, n = s.get("old", []), s.get("new", [])
        fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
        print(f"  ratio {p}/acid: old {fmt(o)} (mean {statistics.mean(o):.2f}); new {fmt(n)} (mean {statistics.mean(n):.2f})")
