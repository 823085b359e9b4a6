#!/usr/bin/env python3
"""The workload results table of docs/results.md, from committed evidence.

For each case: the tune (results.json.gz) says which command it recommended for its workload and
which config was best for each built-in workload; the re-measurement (compare.json.gz, `qtune
compare --workload`, ABBA rounds, every workload measured in each launch) gives each command's
time per request and the paired ratio against the better baseline (A: the default, B: --fit-target
512), with its 95 % Student-t interval over the rounds.

usage: scripts/workload-table.py [--pooled] docs/evidence/gpu-h100-workload1 [...]

--pooled: instead, every config re-measured on two leases or more (the folders), per case and
workload, against the better baseline over all those rounds: its per-round ratios pooled, one
Student-t interval over them (rounds of different leases taken as exchangeable).
"""
import gzip, json, math, os, sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def t95(df):
    # Two-sided 95 % Student-t quantile (the value qtune's stats::t_quantile gives): the table
    # to 30 degrees of freedom, then linear in 1/df to 1.96 (a normal quantile for df > 10, as
    # this script used before 2026-11-24, drew intervals of 20-60 rounds 2-4 % too narrow).
    table = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
             2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
             2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
    if df <= 30:
        return table[max(df, 1) - 1]
    for (d0, t0), (d1, t1) in zip([(30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980)],
                                  [(40, 2.021), (60, 2.000), (120, 1.980), (math.inf, 1.960)]):
        if df <= d1:
            x = (1 / d0 - 1 / df) / (1 / d0 - 1 / d1)
            return t0 + x * (t1 - t0)
    return 1.960


def request_s(shapes, mix):
    tot, w = 0.0, 0.0
    for s in mix["shapes"]:
        m = [x for x in shapes if (x["shape"]["held"], x["shape"]["new"], x["shape"]["gen"]) == (s["held"], s["new"], s["gen"])]
        if not m or m[0]["gen_tps"] <= 0:
            return None
        # A held shape whose held tokens were read again is not the shape (on gpu-h100-workload3
        # the chat turn of a Qwen3.5 model could not resume from the cache): left out.
        if s["held"] > 0 and m[0].get("cache_n", s["held"]) + 16 < s["held"]:
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
    return config_key(a) == config_key(b)


def config_key(cfg):
    keys = ("n_cpu_moe", "cpu_experts", "ubatch", "batch", "cache_type_k", "threads", "fit", "fit_target_mib", "load_mode")
    return json.dumps([cfg.get(k) for k in keys])


def flags_of(cmd):
    """The llama.cpp flags of a compare command, without the model, context and listen flags."""
    a = cmd["line"].split()[1:]
    out, skip = [], False
    for i, x in enumerate(a):
        if skip:
            skip = False
            continue
        if x in ("-m", "-c", "-np", "--host", "--port"):
            skip = True
            continue
        out.append(x)
    return " ".join(out) or "(the default)"


def interval(d):
    m = sum(d) / len(d)
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
    h = t95(len(d) - 1) * sd / math.sqrt(len(d))
    return math.exp(m), math.exp(m - h), math.exp(m + h), sd


def pooled(runs):
    # (case, workload) -> list of (lease, {config key: time}, {config key: flags})
    rounds = {}
    for run in runs:
        for case in sorted(os.listdir(run)):
            comp = os.path.join(run, case, "compare.json.gz")
            if not os.path.exists(comp):
                continue
            c = load(comp)
            card = open(os.path.join(run, case, "card.txt")).read().split(" free")[0].replace("emulated card: ", "")
            shape = "Qwen3.5-35B-A3B" if "35" in case else "Qwen3-30B-A3B"
            keys = [config_key(cmd["config"]) for cmd in c["commands"]]
            for w in c["workloads"]:
                mix = next(m for m in c["workload"]["mixes"] if m["name"] == w["workload"])
                for rd in c["rounds"]:
                    t = {}
                    for l in rd["launches"]:
                        k = keys[l["command"]]
                        if l.get("gen_tps") is not None:
                            x = request_s(l.get("shapes", []), mix)
                            if x:
                                t[k] = x
                    names = {keys[i]: flags_of(cmd) for i, cmd in enumerate(c["commands"])}
                    rounds.setdefault((shape, card, w["workload"]), []).append((run, t, names))
    # A (the default) and B (--fit-target 512) are the first two commands of every compare.
    a_key = b_key = None
    for run in runs:
        for case in sorted(os.listdir(run)):
            comp = os.path.join(run, case, "compare.json.gz")
            if os.path.exists(comp):
                cmds = load(comp)["commands"]
                a_key, b_key = config_key(cmds[0]["config"]), config_key(cmds[1]["config"])
    print("| case | workload | config | better baseline over all rounds | config against it (per request, 95 %) | rounds | leases |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (shape, card, workload), rs in rounds.items():
        names = {}
        for _, _, n in rs:
            names.update(n)
        ab = [math.log(t[a_key] / t[b_key]) for _, t, _ in rs if a_key in t and b_key in t]
        if len(ab) < 2:
            continue
        ref, other = (b_key, a_key) if sum(ab) > 0 else (a_key, b_key)
        ref_name = "B (--fit-target 512)" if ref == b_key else "A (default)"
        for k in [other] + [k for k in names if k not in (a_key, b_key)]:
            d = [(math.log(t[ref] / t[k]), lease) for lease, t, _ in rs if ref in t and k in t]
            leases = sorted({l for _, l in d})
            if len(leases) < 2 or len(d) < 2:
                continue
            r, lo, hi, _ = interval([x for x, _ in d])
            label = "A (default)" if k == a_key else "B (--fit-target 512)" if k == b_key else "`" + names[k] + "`"
            print(f"| {shape}, {card} | {workload} | {label} | {ref_name} | {r:.2f}x [{lo:.2f}, {hi:.2f}] | {len(d)} | {', '.join(os.path.basename(l.rstrip('/')) for l in leases)} |")


def main():
    if sys.argv[1:2] == ["--pooled"]:
        pooled(sys.argv[2:])
        return
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
            card = f"{card} ({os.path.basename(run.rstrip('/')).replace('gpu-h100-', '')})"
            for w in c["workloads"]:
                mix = next(m for m in c["workload"]["mixes"] if m["name"] == w["workload"])
                reread = any(request_s(l.get("shapes", []), mix) is None
                             for rd in c["rounds"] for l in rd["launches"] if l.get("gen_tps") is not None)
                if reread:
                    print(f"| {shape}, {card} | {w['workload']} | left out: its held tokens were read again, not taken from the cache | - | - | - |")
                    continue
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
