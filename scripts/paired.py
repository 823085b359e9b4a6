"""Shared by the scripts that check committed `qtune compare` runs independently of qtune:
per-round ratios of one command against another, in logs, and Student-t 95 % intervals over
the rounds. (Imported by paired-intervals.py, proof12.py, proof13.py and remeasured.py, which
find it beside themselves.)"""
import gzip, json, math, os, statistics


def load(path):
    """A JSON file of a run directory, or its gzipped copy (docs/evidence/ stores journals,
    results.json and compare.json as FILE.gz)."""
    if not os.path.exists(path) and os.path.exists(path + '.gz'):
        with gzip.open(path + '.gz', 'rt') as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f)

# Student-t 97.5 % quantiles by degrees of freedom.
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
     10: 2.228, 11: 2.201, 12: 2.179}


def rounds(compare_dir):
    """The rounds of a compare run, each as {command index: launch}."""
    d = load(f'{compare_dir}/compare.json')
    return [{l['command']: l for l in r['launches']} for r in d['rounds']]


def pairs(R, c, ref, k):
    """(command c's value, reference's value) of metric k in every round both ran ok (a compare
    cut off mid-round has a last round without some commands)."""
    return [(r[c][k], r[ref][k]) for r in R
            if c in r and ref in r and r[c]['outcome'] == 'ok' and r[ref]['outcome'] == 'ok']


def log_ratios(R, c, ref, k):
    return [math.log(a / b) for a, b in pairs(R, c, ref, k)]


def interval(logs):
    """(mean, low, high) of the logs: Student-t 95 % over len(logs) values."""
    n = len(logs)
    m = statistics.mean(logs)
    h = T[n - 1] * statistics.stdev(logs) / math.sqrt(n)
    return m, m - h, m + h


def pct(x):
    """A log ratio as a signed percentage, e.g. '+4.1 %'."""
    return f'{(math.exp(x) - 1) * 100:+.1f} %'
