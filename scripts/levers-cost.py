#!/usr/bin/env python3
"""What two levers past placement cost on this box (issue 42), measured against a running
llama-server with nothing but its own timings. Python 3 standard library only.

  levers-cost.py verify --port P --depths 2048,24000 --ks 1,2,3,4,5,6,8 --rounds 6 --out F.json
      The verify batch of speculative decoding: the time to decode a batch of k tokens at a
      depth, against one token. Each request extends the previous prompt by exactly k new
      tokens and generates one token (so the server's state ends where the prompt ended and
      the next request re-reads nothing but its k tokens); `prompt_ms` of a k-token batch is
      the server's own time for it. The ks are shuffled within each round. A sample whose
      `prompt_n` is not k (something was re-read) is kept in the file and left out of the
      statistics.

  levers-cost.py slots --port P --streams 4 --depth 24000 --new 64 --gen 128 --rounds 4 --out F.json
      Parallel sub-agents: STREAMS clients, each deep in its own conversation of DEPTH tokens,
      send their next turn (NEW tokens, GEN generated) at the same moment, round after round.
      Per request: time from sending to the last token (queueing included), the tokens it
      re-read (`prompt_n`), its generation speed; per round: the aggregate generated tokens
      over the round's wall time. Round 0 puts each conversation in the cache and is not
      counted.

Token ids are random (seeded) ids below 150,000: the synthetic models' text means nothing,
only the shapes matter. Statistics: medians, and Student-t 95 % intervals of the mean over
rounds (per-round values, so requests of one round are not counted as independent); a ratio's
interval is taken over the rounds' log ratios.
"""
import argparse
import json
import math
import random
import statistics
import sys
import threading
import time
import urllib.request

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df):
    if df <= 0:
        return float("nan")
    keys = sorted(T975)
    for k in keys:
        if df <= k:
            return T975[k]
    return 1.96


def interval(xs):
    """Mean and Student-t 95 % interval of the mean, or None for fewer than 2 values."""
    if len(xs) < 2:
        return None
    m = statistics.fmean(xs)
    h = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return {"mean": m, "lo": m - h, "hi": m + h, "n": len(xs)}


def ratio_interval(rs):
    """A ratio's geometric mean and 95 % interval, from the per-round log ratios."""
    ci = interval([math.log(r) for r in rs if r > 0])
    if ci is None:
        return None
    return {"mean": math.exp(ci["mean"]), "lo": math.exp(ci["lo"]), "hi": math.exp(ci["hi"]),
            "n": ci["n"]}


def post(port, body, timeout=900):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read(16 << 20))
    return out, time.monotonic() - t0


def complete(port, ids, n_predict):
    body = {"prompt": ids, "n_predict": n_predict, "ignore_eos": True, "cache_prompt": True,
            "temperature": 0, "seed": 42, "stream": False}
    out, wall = post(port, body)
    t = out.get("timings", {})
    return {k: t.get(k) for k in ("cache_n", "prompt_n", "prompt_ms", "predicted_n",
                                  "predicted_ms")} | {"wall_s": wall}


def ids(rng, n):
    return [rng.randrange(1000, 150000) for _ in range(n)]


def verify(a):
    rng = random.Random(a.seed)
    ks = [int(x) for x in a.ks.split(",")]
    out = {"kind": "verify", "ks": ks, "rounds": a.rounds, "depths": {}}
    for depth in [int(x) for x in a.depths.split(",")]:
        prompt = ids(rng, depth)
        fill = complete(a.port, prompt, 1)
        print(f"depth {depth}: filled, prompt_n {fill['prompt_n']} in "
              f"{fill['prompt_ms'] / 1000:.1f} s", flush=True)
        samples = []
        for r in range(a.rounds):
            order = ks[:]
            rng.shuffle(order)
            for k in order:
                prompt = prompt + ids(rng, k)
                s = complete(a.port, prompt, 1)
                s.update(k=k, round=r, depth=len(prompt) - k)
                samples.append(s)
        ok = [s for s in samples if s["prompt_n"] == s["k"]]
        per_k = {}
        for k in ks:
            per_k[k] = {"median_ms": statistics.median([s["prompt_ms"] for s in ok if s["k"] == k])
                        if any(s["k"] == k for s in ok) else None}
        # the per-round ratio T(k) / T(1): paired within a round
        for k in ks:
            ratios = []
            for r in range(a.rounds):
                one = [s["prompt_ms"] for s in ok if s["k"] == 1 and s["round"] == r]
                kk = [s["prompt_ms"] for s in ok if s["k"] == k and s["round"] == r]
                if one and kk:
                    ratios.append(kk[0] / one[0])
            per_k[k]["ratio_to_1"] = ratio_interval(ratios)
            per_k[k]["ratio_median"] = statistics.median(ratios) if ratios else None
        out["depths"][depth] = {"samples": samples, "left_out": len(samples) - len(ok),
                                "per_k": per_k}
        print(f"depth {depth}: {len(ok)} of {len(samples)} samples read exactly k tokens")
        for k in ks:
            p = per_k[k]
            ci = p["ratio_to_1"]
            civ = f"[{ci['lo']:.2f}, {ci['hi']:.2f}]" if ci else "(too few)"
            med = p["median_ms"]
            print(f"  k={k}: median {med:.1f} ms" if med is not None else f"  k={k}: -",
                  f"· T(k)/T(1) {p['ratio_median']:.2f} {civ}" if p["ratio_median"] else "")
    return out


def slots(a):
    rng = random.Random(a.seed)
    convs = [ids(rng, a.depth) for _ in range(a.streams)]
    rounds = []
    for r in range(a.rounds + 1):
        news = [ids(rng, a.new) for _ in range(a.streams)]
        results = [None] * a.streams
        start = time.monotonic()

        def go(i):
            t0 = time.monotonic()
            try:
                s = complete(a.port, convs[i] + news[i], a.gen)
            except Exception as e:  # a failed request is recorded, never hidden
                s = {"error": str(e)}
            s["start_s"] = t0 - start
            s["end_s"] = time.monotonic() - start
            results[i] = s

        threads = [threading.Thread(target=go, args=(i,)) for i in range(a.streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        for i in range(a.streams):
            convs[i] = convs[i] + news[i]
        gen = sum(s.get("predicted_n") or 0 for s in results)
        row = {"round": r, "wall_s": wall, "aggregate_gen_tps": gen / wall, "requests": results}
        rounds.append(row)
        reread = [s.get("prompt_n") for s in results]
        print(f"round {r}{' (fills the cache, not counted)' if r == 0 else ''}: wall {wall:.1f} s, "
              f"aggregate {gen / wall:.1f} tok/s, re-read {reread}, "
              f"per request {[round(s['end_s'], 1) for s in results]} s", flush=True)
    counted = rounds[1:]
    per_req = [statistics.fmean([s["end_s"] for s in r["requests"]]) for r in counted]
    stream_tps = [statistics.fmean([1000 * s["predicted_n"] / s["predicted_ms"]
                                    for s in r["requests"] if s.get("predicted_ms")])
                  for r in counted]
    out = {"kind": "slots", "streams": a.streams, "depth": a.depth, "new": a.new, "gen": a.gen,
           "rounds": rounds,
           "aggregate_gen_tps": interval([r["aggregate_gen_tps"] for r in counted]),
           "mean_request_s": interval(per_req),
           "per_stream_gen_tps": interval(stream_tps),
           "mean_reread_tokens": statistics.fmean(
               [s.get("prompt_n") or 0 for r in counted for s in r["requests"]])}
    for key in ("aggregate_gen_tps", "mean_request_s", "per_stream_gen_tps"):
        ci = out[key]
        if ci:
            print(f"{key}: {ci['mean']:.2f} [{ci['lo']:.2f}, {ci['hi']:.2f}] over {ci['n']} rounds")
    print(f"mean re-read tokens per request: {out['mean_reread_tokens']:.0f}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--depths", default="2048,24000")
    v.add_argument("--ks", default="1,2,3,4,5,6,8")
    s = sub.add_parser("slots")
    s.add_argument("--streams", type=int, default=4)
    s.add_argument("--depth", type=int, default=24000)
    s.add_argument("--new", type=int, default=64)
    s.add_argument("--gen", type=int, default=128)
    for q in (v, s):
        q.add_argument("--port", type=int, required=True)
        q.add_argument("--rounds", type=int, default=6)
        q.add_argument("--seed", type=int, default=7)
        q.add_argument("--out", required=True)
        q.add_argument("--note", default="")
    a = p.parse_args()
    out = verify(a) if a.cmd == "verify" else slots(a)
    out["note"] = a.note
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
