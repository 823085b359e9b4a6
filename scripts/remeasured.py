#!/usr/bin/env python3
"""Issue 12: does a later, separate re-measurement land inside an earlier reported interval?

For two compare.json files of the same three commands (0: the plain default, 1: --fit-target 512,
2: the recommendation), each made in its own lease of the GPU machine: the earlier run's 95 %
Student-t interval of the mean per-round log ratio (as the README reports it) against the later
run's median per-round ratio, for C vs A and C vs B, generation and prompt. Then every run
pooled as one sample per day (the mean of each run's log ratios) with a t interval over days:
the interval a claim needs to survive another day's box.

usage: scripts/remeasured.py COMPARE_DIR COMPARE_DIR [COMPARE_DIR ...]   (oldest first)
"""
import statistics, sys
from paired import interval, log_ratios, pct, rounds


runs = [(p, rounds(p)) for p in sys.argv[1:]]
for name, c, ref in (('C vs A', 2, 0), ('C vs B', 2, 1)):
    for key, k in (('generation', 'gen_tps'), ('prompt', 'prompt_tps')):
        print(f'{name} {key}:')
        for (pa, da), (pb, db) in zip(runs, runs[1:]):
            m, lo, hi = interval(log_ratios(da, c, ref, k))
            med = statistics.median(log_ratios(db, c, ref, k))
            verdict = 'inside' if lo <= med <= hi else 'OUTSIDE'
            print(f'  {pa}: {pct(m)} [{pct(lo)[:-2]}, {pct(hi)[:-2]}]; '
                  f'{pb}: median {pct(med)}: {verdict}')
        days = [statistics.mean(log_ratios(d, c, ref, k)) for _, d in runs]
        if len(days) >= 2:
            m, lo, hi = interval(days)
            print(f'  across {len(days)} days: {pct(m)} [{pct(lo)[:-2]}, {pct(hi)[:-2]}] (95 %, one value per day)')
