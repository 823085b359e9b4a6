#!/usr/bin/env python3
"""Generation of one model in two quants at the same placements (issue 46: are the seeds'
MXFP4_MOE and Q4_K_L rows slow because of their bytes or their weight types?).

  weight-types.py [DIR]      (default docs/evidence/gpu-h200-types35)

Reads DIR/lease*/types35A.jsonl.gz (Q4_K_M against MXFP4_MOE) and types35B.jsonl.gz (Q4_K_M
against Q4_K_L): llama-bench -o jsonl, one line a launch, written by scripts/gpu-proof.sh in
rounds of [Q4_K_M at -ncmoe 0, 20, 40; the other quant at -ncmoe 0, 20, 40]. Per placement it
prints the median tok/s of each quant and the ratio other/Q4_K_M: the mean of the per-round log
ratios with its Student-t 95 % interval, the rounds of every lease pooled. Python 3 standard
library only.
"""
import glob
import gzip
import json
import math
import os
import statistics
import sys

# Student-t 97.5 % quantiles by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179}
PLACEMENTS = (0, 20, 40)


def rounds(path):
    """(placement, Q4_K_M tok/s, other tok/s, other's name) per round and placement."""
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    out = []
    for i in range(0, len(lines) - len(lines) % 6, 6):
        chunk = lines[i:i + 6]
        for k, n in enumerate(PLACEMENTS):
            a, b = chunk[k], chunk[3 + k]
            if a["n_cpu_moe"] != n or b["n_cpu_moe"] != n:
                sys.exit(f"{path}: launch {i + k} is not at -ncmoe {n}")
            if "Q4_K - Medium" not in a["model_type"] or a["model_filename"] == b["model_filename"]:
                sys.exit(f"{path}: round {i // 6 + 1} is not Q4_K_M against another file")
            other = os.path.basename(b["model_filename"]).rsplit("-", 1)[-1].removesuffix(".gguf")
            out.append((n, a["avg_ts"], b["avg_ts"], other.upper()))
    return out


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "docs/evidence/gpu-h200-types35"
    print("| Quant against Q4_K_M | Experts on the CPU | Rounds (leases) | Q4_K_M tok/s | Quant tok/s | Ratio [95 % interval] |")
    print("|---|---|---|---|---|---|")
    for case in ("types35A", "types35B"):
        files = sorted(glob.glob(os.path.join(d, "lease*", case + ".jsonl.gz")))
        if not files:
            sys.exit(f"no {case}.jsonl.gz under {d}/lease*/")
        per = [rounds(f) for f in files]
        for n in PLACEMENTS:
            rows = [r for lease in per for r in lease if r[0] == n]
            logs = [math.log(b / a) for _, a, b, _ in rows]
            k = len(logs)
            mean = statistics.mean(logs)
            half = T975[k - 1] * statistics.stdev(logs) / math.sqrt(k) if k >= 3 else float("nan")
            where = {0: "none", 20: "20 of 40 blocks", 40: "all 40 blocks"}[n]
            print(f"| {rows[0][3]} | {where} | {k} ({len(files)}) "
                  f"| {statistics.median(a for _, a, _, _ in rows):.1f} "
                  f"| {statistics.median(b for _, _, b, _ in rows):.1f} "
                  f"| {math.exp(mean):.2f}x [{math.exp(mean - half):.2f}, {math.exp(mean + half):.2f}] |")


if __name__ == "__main__":
    main()
