#!/usr/bin/env python3
"""Paired intervals between every pair of commands of a `qtune compare` run, from its
compare.json, computed independently of qtune (a second harness for the same numbers):
per-round ratio of medians, in logs, Student-t 95 % interval over the rounds.

usage: scripts/paired-intervals.py RUN_DIR [RUN_DIR ...]
"""
import json, math, sys
# Student-t 97.5% quantiles
T={1:12.706,2:4.303,3:3.182,4:2.776,5:2.571,6:2.447,7:2.365,8:2.306,9:2.262,10:2.228}
def ci(pairs):
    l=[math.log(a/b) for a,b in pairs]; n=len(l); m=sum(l)/n
    sd=math.sqrt(sum((x-m)**2 for x in l)/(n-1)); h=T[n-1]*sd/math.sqrt(n)
    f=lambda x:(math.exp(x)-1)*100
    return f"{f(m):+.1f} % [{f(m-h):+.1f}, {f(m+h):+.1f}] (95 %, {n} rounds)"
for case in sys.argv[1:]:
    d=json.load(open(f'{case}/compare.json'))
    R=[{l['command']:l for l in r['launches']} for r in d['rounds']]
    print(case, 'peak', d['peak_vram_mib'])
    for (c,ref) in [(1,0),(2,0),(2,1)]:
        for k in ['gen_tps','prompt_tps']:
            pairs=[(r[c][k],r[ref][k]) for r in R if r[c]['outcome']=='ok' and r[ref]['outcome']=='ok']
            med=lambda v: sorted(v)[len(v)//2] if len(v)%2 else (sorted(v)[len(v)//2-1]+sorted(v)[len(v)//2])/2
            print(f"  {'ABC'[c]} vs {'ABC'[ref]} {k[:-4]:7s} {ci(pairs)}  medians {med([p[0] for p in pairs]):.1f} / {med([p[1] for p in pairs]):.1f}")
