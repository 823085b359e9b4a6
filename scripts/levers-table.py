#!/usr/bin/env python3
"""The tables of docs/results.md's "Levers past placement: their cost on the GPU" from the
evidence of scripts/levers-cost.py, pooled over leases:

  scripts/levers-table.py docs/evidence/gpu-h200-levers1 docs/evidence/gpu-h200-levers2

Verify batch: per depth and k, the time to decode k new tokens against one, from each round's
log ratio T(k)/T(1) (the ks of a round were measured back to back in shuffled order, so a round
pairs them), Student-t 95 % over all rounds of all leases; and the acceptance rate a draft of
k - 1 tokens needs to break even when drafting is free (n-gram): the expected tokens per verify,
(1 - a^k) / (1 - a), equal to the batch's cost in single-token steps.

Slots: per -np, 4 streams 24k deep sending their next turn at once; per round the aggregate
generated tokens over the round's wall time, the round's wall time (the last stream's answer:
what a parent agent waiting for its sub-agents feels) and the mean time per request; Student-t
95 % over the rounds of all leases. Each -np is its own launch, one per lease, in the order
1, 2, 4: the ratios between them are not paired rounds, so their intervals (from the two means'
standard errors) are wider than a paired race's.
"""
import gzip
import json
import math
import os
import statistics
import sys

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086]


def t975(df):
    return T975[df - 1] if 1 <= df <= len(T975) else 2.042 if df <= 30 else 1.96


def mean_ci(xs):
    m = statistics.fmean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs))
    return m, se, t975(len(xs) - 1)


def geo(xs):
    """Geometric mean and 95 % interval of ratios."""
    m, se, t = mean_ci([math.log(x) for x in xs])
    return math.exp(m), math.exp(m - t * se), math.exp(m + t * se)


def breakeven(k, cost):
    """The acceptance rate a at which (1 - a^k) / (1 - a) = cost; None if even a = 1 is short."""
    if cost <= 1:
        return 0.0
    if cost >= k:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        e = k if a == 1 else (1 - a ** k) / (1 - a)
        lo, hi = (a, hi) if e < cost else (lo, a)
    return (lo + hi) / 2


def load(path):
    """A JSON file, kept gzipped in the tree (path.gz) or not."""
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt") as f:
            return json.load(f)
    return json.load(open(path))


def main(dirs):
    verify, slots, machines = {}, {}, []
    for d in dirs:
        c = os.path.join(d, "levers35-16")
        machines.append(open(os.path.join(c, "card.txt")).read().strip())
        v = load(os.path.join(c, "verify.json"))
        for depth, dd in v["depths"].items():
            ok = [s for s in dd["samples"] if s["prompt_n"] == s["k"]]
            for r in {s["round"] for s in ok}:
                one = [s["prompt_ms"] for s in ok if s["round"] == r and s["k"] == 1]
                for s in ok:
                    if s["round"] == r and one:
                        verify.setdefault((int(depth), s["k"]), []).append(s["prompt_ms"] / one[0])
        for np_ in (1, 2, 4):
            p = os.path.join(c, f"slots-np{np_}.json")
            if not (os.path.exists(p) or os.path.exists(p + ".gz")):
                continue
            s = load(p)
            for r in s["rounds"][1:]:
                slots.setdefault(np_, []).append(
                    (r["aggregate_gen_tps"], r["wall_s"],
                     statistics.fmean([q["end_s"] for q in r["requests"]]),
                     statistics.fmean([1000 * q["predicted_n"] / q["predicted_ms"] for q in r["requests"]])))
    print(f"Leases: {len(dirs)} ({'; '.join(machines)}).\n")
    print("| depth | new tokens in one batch (k) | time against one token (95 %) | rounds | "
          "acceptance a draft of k - 1 needs to break even |")
    print("|---|---|---|---|---|")
    for (depth, k) in sorted(verify):
        if k == 1:
            continue
        rs = verify[(depth, k)]
        g, lo, hi = geo(rs)
        be = breakeven(k, g)
        bes = "none: the batch costs more than k tokens" if be is None else f"{100 * be:.0f} %"
        print(f"| {depth:,} | {k} | {g:.2f}x [{lo:.2f}, {hi:.2f}] | {len(rs)} | {bes} |")
    print()
    print("| -np | aggregate tok/s (95 %) | round wall s, the last answer (95 %) | "
          "mean time per request s (95 %) | per-stream tok/s | rounds |")
    print("|---|---|---|---|---|---|")
    base = None
    for np_ in sorted(slots):
        rows = slots[np_]
        cols = []
        for i in range(4):
            m, se, t = mean_ci([r[i] for r in rows])
            cols.append((m, se, t))
        if base is None:
            base = cols

        def vs(i):
            if cols is base:
                return ""
            m0, se0, _ = base[i]
            m1, se1, _ = cols[i]
            ratio = m1 / m0
            # delta method on the log ratio, normal quantile: unpaired launches
            sl = math.sqrt((se0 / m0) ** 2 + (se1 / m1) ** 2)
            return f"; {ratio:.2f}x [{ratio * math.exp(-1.96 * sl):.2f}, {ratio * math.exp(1.96 * sl):.2f}] of -np 1"

        def fmt(i, nd=1):
            m, se, t = cols[i]
            return f"{m:.{nd}f} [{m - t * se:.{nd}f}, {m + t * se:.{nd}f}]{vs(i)}"
        print(f"| {np_} | {fmt(0)} | {fmt(1, 2)} | {fmt(2, 2)} | {cols[3][0]:.0f} | {len(rows)} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
