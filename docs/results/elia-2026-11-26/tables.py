#!/usr/bin/env python3
"""Tables of docs/results/elia.md from this directory's JSON outputs."""
import json, os, glob
D = os.path.dirname(os.path.abspath(__file__))

def load(name):
    p = os.path.join(D, name + '.json')
    return json.load(open(p)) if os.path.exists(p) else None

def cpu(r):
    c = r.get('cpu') or {}
    return c.get('busy_cores') if isinstance(c, dict) else c

def lan(w, prefix='lan', title='8 clients per server'):
    print(f"\n{w} LAN {prefix} ({title})")
    print("| servers | acid (best) txn/s | p50 / mean ms | elia txn/s | p50 / mean ms | elia/acid | cpu acid / elia |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in [1, 2, 4, 7, 10, 13]:
        d = load(f'{prefix}-{w}-{n}')
        if not d: continue
        acid = [r for r in d['results'] if r['protocol'].startswith('acid')]
        best = max(acid, key=lambda r: r['throughput_tps'])
        e = [r for r in d['results'] if r['protocol'] == 'elia'][0]
        f = lambda r: f"{r['latency_us_p50']/1000:.1f} / {r['latency_us_mean']/1000:.1f}"
        print(f"| {n} | {best['throughput_tps']:.0f} ({best['protocol'].split('@')[1]}) | {f(best)} | {e['throughput_tps']:.0f} | {f(e)} | {e['throughput_tps']/best['throughput_tps']:.2f}x | {cpu(best)} / {cpu(e)} |")

def wan(w):
    print(f"\n{w} WAN (seed 004 Table 2)")
    print("| sites | clients | central txn/s, mean ms | read-replicas | elia | elia vs central: latency, throughput | elia vs read-replicas |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in [2, 3, 5]:
        d = load(f'wan-{w}-{n}')
        if not d: continue
        for c in sorted({r['clients'] for r in d['results']}):
            by = {r['protocol']: r for r in d['results'] if r['clients'] == c}
            ce, ro, el = by.get('central'), by.get('read-replicas'), by.get('elia')
            if not (ce and ro and el): continue
            g = lambda r: f"{r['throughput_tps']:.0f}, {r['latency_us_mean']/1000:.0f}"
            print(f"| {n} | {c} | {g(ce)} | {g(ro)} | {g(el)} | {ce['latency_us_mean']/el['latency_us_mean']:.1f}x lower, {el['throughput_tps']/ce['throughput_tps']:.2f}x | {ro['latency_us_mean']/el['latency_us_mean']:.1f}x lower, {el['throughput_tps']/ro['throughput_tps']:.2f}x |")

def micro():
    d = load('micro')
    if not d: return
    print("\nmicro (3 WAN sites, 5 ms operations, 48 clients)")
    print("| local % | central txn/s | read-replicas | elia | elia local / global p50 ms | global/local |")
    print("|---:|---:|---:|---:|---:|---:|")
    rows = {}
    for r in d['results']:
        rows.setdefault(r.get('local_percent'), {})[r['protocol']] = r
    for p in sorted(rows):
        by = rows[p]
        el = by.get('elia')
        pp = el['per_procedure']
        lo, gl = pp.get('local_op', {}), pp.get('global_op', {})
        lp, gp = lo.get('latency_us_p50', 0) / 1000, gl.get('latency_us_p50', 0) / 1000
        print(f"| {p} | {by['central']['throughput_tps']:.0f} | {by['read-replicas']['throughput_tps']:.0f} | {el['throughput_tps']:.0f} | {lp:.0f} / {gp:.0f} | {gp/lp if lp else 0:.1f}x |")

for w in ['tpcw', 'rubis']: lan(w)
for w in ['tpcw', 'rubis']: lan(w, 'fixed', '32 clients at every size')
for w in ['tpcw', 'rubis']: wan(w)
micro()
