#!/usr/bin/env python3
"""Paired intervals between every pair of commands of a `qtune compare` run, from its
compare.json, computed independently of qtune (a second harness for the same numbers):
per-round ratio of medians, in logs, Student-t 95 % interval over the rounds.

usage: scripts/paired-intervals.py RUN_DIR [RUN_DIR ...]
"""
import json, statistics, sys
from paired import interval, load, log_ratios, pairs, pct, rounds

for case in sys.argv[1:]:
    d = load(f'{case}/compare.json')
    R = rounds(case)
    print(case, 'peak', d['peak_vram_mib'])
    n = len(d['peak_vram_mib'])
    for (c, ref) in [(1, 0)] + [(c, r) for c in range(2, n) for r in (0, 1)]:
        for k in ['gen_tps', 'prompt_tps']:
            ps = pairs(R, c, ref, k)
            m, lo, hi = interval(log_ratios(R, c, ref, k))
            med = statistics.median
            print(f"  {'ABCDEF'[c]} vs {'ABCDEF'[ref]} {k[:-4]:7s} {pct(m)} [{pct(lo)[:-2]}, {pct(hi)[:-2]}]"
                  f" (95 %, {len(ps)} rounds)  medians {med([p[0] for p in ps]):.1f} / {med([p[1] for p in ps]):.1f}")
