#!/usr/bin/env python3
"""The workload results table of docs/results.md, from committed evidence.

For each case: the tune (results.json.gz) says which command it recommended for its workload and
which config was best for each built-in workload; the re-measurement (compare.json.gz, `qtune
compare --workload`, ABBA rounds, every workload measured in each launch) gives each command's
time per request and the paired ratio against the better baseline (A: the default, B: --fit-target
512), with its 95 % Student-t interval over the rounds.

usage: scripts/workload-table.py docs/evidence/gpu-h100-workload1 [...]
"""
import gzip, json, math, os, sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def t95(df):
    # two-sided 95 % Student-t quantiles for small df
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    return table.get(df, 1.96)


def paired(rounds, c, r, mix):
    """Ratio of requests per second (time of r over time of c) over the rounds, with its 95 % interval."""
    def t(rd, k):
        for l in rd["launches"]:
            if l["command"] == k and l.get("gen_tps") is not None:
                return request_s(l.get("shapes", []), mix)
        return None
    d = []
    for rd in rounds:
        a, b = t(rd, c), t(rd, r)
        if a and b:
            d.append(math.log(b / a))
    if len(d) < 2:
        return None
    m = sum(d) / len(d)
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
    h = t95(len(d) - 1) * sd / math.sqrt(len(d))
    return math.exp(m), math.exp(m - h), math.exp(m + h), len(d)


def request_s(shapes, mix):
    tot, w = 0.0, 0.0
    for s in mix["shapes"]:
        m = [x for x in shapes if (x["shape"]["held"], x["shape"]["new"], x["shape"]["gen"]) == (s["held"], s["new"], s["gen"])]
        if not m or m[0]["gen_tps"] <= 0:
            return None
        tot += s.get("weight", 1) * (m[0]["prompt_ms"] / 1000 + s["gen"] / m[0]["gen_tps"])
        w += s.get("weight", 1)
    return tot / w


def pair_of(w, c, r):
    """Command c against command r on this workload: (ratio, lo, hi, rounds), from compare.json."""
    for p in w["pairs"]:
        cmp = p.get("comparison")
        if not cmp or cmp.get("lo_log") is None:
            continue
        if (p["command"], p["reference"]) == (c, r):
            return math.exp(cmp["mean_log"]), math.exp(cmp["lo_log"]), math.exp(cmp["hi_log"]), cmp["rounds"]
        if (p["command"], p["reference"]) == (r, c):
            return math.exp(-cmp["mean_log"]), math.exp(-cmp["hi_log"]), math.exp(-cmp["lo_log"]), cmp["rounds"]
    return None


def same(a, b):
    keys = ("n_cpu_moe", "cpu_experts", "ubatch", "batch", "cache_type_k", "threads", "fit", "fit_target_mib", "load_mode")
    return all(a.get(k) == b.get(k) for k in keys)


def main():
    print("| case | workload | reference: the better baseline, s per request | qtune's pick, s per request | pick against the reference (per request, 95 %) | best other re-measured config against the reference |")
    print("| --- | --- | --- | --- | --- | --- |")
    for run in sys.argv[1:]:
        for case in sorted(os.listdir(run)):
            comp = os.path.join(run, case, "compare.json.gz")
            if not os.path.exists(comp):
                continue
            r = load(os.path.join(run, case[: -len("-compare")], "results.json.gz"))
            c = load(comp)
            cfgs = [cmd["config"] for cmd in c["commands"]]
            names = [cmd["name"] for cmd in c["commands"]]
            picks = {p["workload"]: p["config"] for p in r.get("workload_picks", [])}
            picks[r["space"]["workload"]["mixes"][0]["name"]] = r["winner"]["config"]
            card = open(os.path.join(run, case, "card.txt")).read().split(" free")[0].replace("emulated card: ", "")
            shape = "Qwen3.5-35B-A3B" if "35" in case else "Qwen3-30B-A3B"
            for w in c["workloads"]:
                med = w["median_request_s"]
                ref = 0 if (med[0] or 1e9) <= (med[1] or 1e9) else 1
                ref_cell = ["A (default)", "B (--fit-target 512)"][ref] + f", {med[ref]:.2f} s"
                pick = picks.get(w["workload"])
                roles = {json.dumps(t["config"], sort_keys=True): t["role"] for t in r["trials"] if t["role"] in ("baseline", "second-baseline")}
                role = roles.get(json.dumps(pick, sort_keys=True)) if pick else None
                if role == "baseline":
                    k = 0
                elif role == "second-baseline":
                    k = 1
                else:
                    k = next((i for i, x in enumerate(cfgs) if i >= 2 and pick is not None and same(x, pick)), None)
                if k is None:
                    pick_cell, vs = "not re-measured", "-"
                else:
                    pick_cell = f"{names[k]}{' (a baseline)' if k < 2 else ''}, {med[k]:.2f} s"
                    p = pair_of(w, k, ref) if k != ref else None
                    vs = "it is the reference" if k == ref else (f"{p[0]:.2f}x [{p[1]:.2f}, {p[2]:.2f}], {p[3]} rounds" if p else "-")
                others = [(pair_of(w, i, ref), i) for i in range(2, len(cfgs)) if i != k]
                others = [(p, i) for p, i in others if p]
                best = max(others, key=lambda x: x[0][0], default=None)
                other_cell = f"{names[best[1]]}: {best[0][0]:.2f}x [{best[0][1]:.2f}, {best[0][2]:.2f}]" if best else "-"
                print(f"| {shape}, {card} | {w['workload']} | {ref_cell} | {pick_cell} | {vs} | {other_cell} |")


main()
