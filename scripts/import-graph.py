#!/usr/bin/env python3
"""The import graph of src/, read from `crate::` paths (use lines and inline paths; test
modules and comments left out), checked against the stages' layers. A module may use only
modules in lower layers (a stage uses the stages its data comes from, and the vocabulary under
them); lowest first:

    util, clock, config,         the vocabulary every stage shares (objective: the metric
    objective                    that ranks trials and decides comparisons)
    hardware                     what the box is
    engine                       what is particular to one inference server (llama.cpp,
                                 ik_llama.cpp): its flags, its logs and answers, and finding,
                                 checking and building its server
    model                        the GGUF, memory and speed prediction
    space                        search spaces (what is varied, the workload, the objective)
    trial                        one launch: the TrialRunner the search drives, the journal
    stats                        paired comparisons and the race, over trials
    fixtures, quality            test models; what a KV cache type costs
    run                          the finished run and its files
    placement, rpc               expert placements filled to a budget (search and plan use it);
                                 placements over llama.cpp's RPC workers, their command lines
    search                       the tune's search and verdict
    report, profile              what a finished run becomes
    plan                         a config for a box without trials (from a profile and the models)
    compare                      re-measuring launch commands
    app, cli                     wiring and the command line

Prints every module-level edge, then any edge to a module of a higher layer (an arrow back up
the stages) and any cycle, between modules and between the files of one module. Exit 1 when
there is either.

usage: scripts/import-graph.py [SRC_DIR]
"""
import os, re, sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rust_source import block_end  # noqa: E402

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'src')
LAYERS = [['util', 'clock', 'config', 'escape', 'objective'], ['hardware'], ['engine', 'server'], ['model'], ['workloads', 'space', 'traffic'],
          ['trial'], ['stats'], ['fixtures', 'quality'], ['run'], ['placement', 'rpc'], ['search'],
          ['report', 'profile'], ['plan'], ['compare'], ['app'], ['cli']]
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}
# Within one layer, these uses are allowed (one direction only).
SAME_LAYER_OK = {('server', 'engine'), ('quality', 'fixtures'), ('util', 'config'), ('config', 'util'),
                 ('config', 'escape'), ('space', 'workloads'), ('space', 'traffic'), ('workloads', 'util'),
                 ('clock', 'util')}


def strip_tests(text):
    """The file without its `#[cfg(test)] mod tests { ... }` blocks."""
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod \w+\s*\{', text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        i = block_end(text, m.end())
    out.append(text[i:])
    return ''.join(out)


def module_of(path):
    rel = os.path.relpath(path, SRC)
    parts = rel[:-3].split(os.sep)
    top = parts[0]
    sub = parts[1] if len(parts) > 1 else 'mod'
    return top, sub


def crate_paths(text):
    text = re.sub(r'//[^\n]*', '', text)
    paths = []
    for m in re.finditer(r'use crate::\{([^;]*)\};', text, re.S):
        for item in re.split(r',\s*(?![^{]*\})', m.group(1)):
            item = item.strip()
            if item:
                paths.append(item)
    paths += re.findall(r'crate::((?:\w+::)*\w+)', text)
    return paths


top_edges = defaultdict(set)
sub_edges = defaultdict(lambda: defaultdict(set))
for root, _, files in os.walk(SRC):
    for f in files:
        # A module's `tests.rs` is its `#[cfg(test)] mod tests;`: a test module, left out.
        if not f.endswith('.rs') or f == 'tests.rs':
            continue
        p = os.path.join(root, f)
        top, sub = module_of(p)
        if top in ('lib', 'main'):
            continue
        for path in crate_paths(strip_tests(open(p).read())):
            segs = re.split(r'::', path)
            dst = segs[0].strip('{} ')
            if dst == top:
                if len(segs) > 1:
                    dsub = segs[1].strip('{} ')
                    if dsub != sub and re.match(r'^[a-z_]+$', dsub) and os.path.exists(
                            os.path.join(SRC, top, dsub + '.rs')) or os.path.isdir(
                            os.path.join(SRC, top, dsub)):
                        sub_edges[top][sub].add(dsub)
                continue
            if re.match(r'^[a-z_]+$', dst):
                top_edges[top].add(dst)
    # super:: inside a module's files
for root, _, files in os.walk(SRC):
    for f in files:
        p = os.path.join(root, f)
        if not f.endswith('.rs') or root == SRC:
            continue
        top, sub = module_of(p)
        if f == 'mod.rs':
            continue
        # Comments (doc links such as [`super::render`]) are not uses.
        for m in re.finditer(r'super::(\w+)', re.sub(r'//[^\n]*', '', strip_tests(open(p).read()))):
            d = m.group(1)
            if d != sub and (os.path.exists(os.path.join(SRC, top, d + '.rs'))
                             or os.path.isdir(os.path.join(SRC, top, d))):
                sub_edges[top][sub].add(d)


def cycles(edges):
    """Every elementary cycle's node set, found by DFS (small graphs)."""
    found = set()
    nodes = sorted(set(edges) | {d for s in edges.values() for d in s})

    def dfs(start, node, path):
        for d in sorted(edges.get(node, ())):
            if d == start:
                found.add(tuple(path))
            elif d not in path and d > start:
                dfs(start, d, path + [d])
    for n in nodes:
        dfs(n, n, [n])
    return sorted(found)


bad = []
print('module edges (A -> B: A uses B):')
for s in sorted(top_edges):
    print(f'  {s} -> {", ".join(sorted(top_edges[s]))}')
    for d in sorted(top_edges[s]):
        if s not in RANK or d not in RANK:
            bad.append(f'not in a layer: {s} -> {d}')
        elif RANK[d] > RANK[s] or (RANK[d] == RANK[s] and (s, d) not in SAME_LAYER_OK):
            bad.append(f'back arrow: {s} -> {d}')
for c in cycles(top_edges):
    bad.append('cycle between modules: ' + ' -> '.join(c + (c[0],)))
for top in sorted(sub_edges):
    for c in cycles(sub_edges[top]):
        bad.append(f'cycle inside {top}/: ' + ' -> '.join(c + (c[0],)))
print()
if bad:
    print('\n'.join(bad))
    sys.exit(1)
print('no arrow back up the stages, no cycle')
