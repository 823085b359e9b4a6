#!/usr/bin/env python3
"""Issue 13's done-when, checked from the committed files of one case (independently of qtune):
the tune's results.json (launches, minutes, VRAM budget, winner) and the compare.json of the
re-measurement (A: plain default, B: --fit-target 512, C: the tune's winner, interleaved rounds).

Per-round ratio of C against the better baseline in generation (the one with the higher mean
log ratio against the other), in logs; Student-t 95 % interval over the rounds; the median of
the per-round ratios.

usage: scripts/proof13.py TUNE_DIR COMPARE_DIR [--whole-model-fits]
"""
import json, math, statistics, sys
from paired import interval, load, log_ratios, rounds


def ci(logs):
    m, lo, hi = interval(logs)
    return math.exp(m), math.exp(lo), math.exp(hi), len(logs)


tune, comp = sys.argv[1], sys.argv[2]
whole = '--whole-model-fits' in sys.argv
res = load(f'{tune}/results.json')
d = load(f'{comp}/compare.json')
R = rounds(comp)
budget = res['vram_budget_mib']
launches = sum(1 for t in res['trials'] if t['kind'] != 'skipped')
minutes = res.get('minutes_used')
b_vs_a = ci(log_ratios(R, 1, 0, 'gen_tps'))[0]
ref = 1 if b_vs_a > 1 else 0
name = {0: 'default', 1: '--fit-target 512'}[ref]
g = log_ratios(R, 2, ref, 'gen_tps')
p = log_ratios(R, 2, ref, 'prompt_tps')
gm, glo, ghi, n = ci(g)
pm, plo, phi, _ = ci(p)
gmed = statistics.median(math.exp(x) for x in g)
pmed = statistics.median(math.exp(x) for x in p)
peak = d['peak_vram_mib'][2]
need_pp = 1.1 if whole else 1.5
checks = {
    f'tg median ratio {gmed:.3f} >= 1.00': gmed >= 1.0,
    f'tg interval lower end {glo:.3f} >= 0.97': glo >= 0.97,
    f'pp median ratio {pmed:.2f} >= {need_pp}': pmed >= need_pp,
    f'peak VRAM {peak} <= budget {budget} MiB': peak <= budget,
    f'launches {launches} <= 20': launches <= 20,
    f'minutes {minutes:.1f} <= 15': minutes is not None and minutes <= 15,
}
print(f'{tune}: winner `{res["winner"]["config"]}`' if res.get('winner') else f'{tune}: no winner')
print(f'  better baseline in generation: {name} (B/A generation {b_vs_a:.3f})')
print(f'  generation vs {name}: median ratio {gmed:.3f}, mean {gm:.3f} [{glo:.3f}, {ghi:.3f}] (95 %, {n} rounds)')
print(f'  prompt vs {name}:     median ratio {pmed:.2f}, mean {pm:.2f} [{plo:.2f}, {phi:.2f}] (95 %, {n} rounds)')
for k, ok in checks.items():
    print(f'  {"PASS" if ok else "FAIL"}  {k}')
