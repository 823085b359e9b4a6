#!/usr/bin/env python3
"""Issue 12's done-when, checked from the committed files of one case (independently of qtune):
does the re-measured gain lie inside the interval the tune claimed?

The tune's claim: results.json's race, the recommended candidate's `claim` against the baseline
(the plain default), generation and prompt, in logs, at the race's claim confidence. The
re-measurement: compare.json of a separate `qtune compare` run (command 0 the plain default,
command 2 the tune's recommendation), per-round ratios in logs; its median must lie inside the
claimed interval. A tune whose recommendation is the default claims no gain: the re-measured
C vs A then shows the box's noise between identical commands.

usage: scripts/proof12.py TUNE_DIR COMPARE_DIR [C_INDEX]
"""
import json, statistics, sys
from paired import load, log_ratios, pct, rounds

tune, comp = sys.argv[1], sys.argv[2]
ci_ = int(sys.argv[3]) if len(sys.argv) > 3 else 2
res = load(f'{tune}/results.json')
R = rounds(comp)


race = res.get('race') or {}
out = race.get('outcome') or {}
# The recommended config's race entry: the race's winner, or (a recommendation the race did not
# prove, e.g. a generation tie) the raced candidate with the recommended config.
rec = (res.get('winner') or {}).get('config')
idx = [i for i, c in enumerate(race.get('candidates') or []) if c == rec]
claim = None
if idx:
    claim = out['candidates'][idx[0]].get('claim')
print(f'{tune}: {out.get("reason", "no race")}')
if claim is None:
    print('  the tune recommends the default: no gain claimed')
ok = True
for key, k in (('gen', 'gen_tps'), ('prompt', 'prompt_tps')):
    rs = log_ratios(R, ci_, 0, k)
    med = statistics.median(rs)
    line = f'  {key:6} re-measured C vs A: median {pct(med)} over {len(rs)} rounds'
    if claim is not None:
        c = claim[key]
        inside = c['lo_log'] <= med <= c['hi_log']
        ok &= inside
        line += (f'; claimed {pct(c["mean_log"])} [{pct(c["lo_log"])[:-2]}, {pct(c["hi_log"])[:-2]}]'
                 f' ({c["confidence"] * 100:.1f} %, {c["rounds"]} rounds): '
                 + ('inside' if inside else 'OUTSIDE'))
    print(line)
sys.exit(0 if ok else 1)
