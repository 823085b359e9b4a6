#!/usr/bin/env python3
"""The house rules that a script can check (issue 55). Prints one line per breach and exits 1
when there is any; prints one summary line and exits 0 when there is none.

- No file in src/ has more than 800 lines of non-test code. Counted: every line of the file
  (blank lines and comments included) outside its `#[cfg(test)] mod NAME { ... }` blocks, so
  code placed after a test module counts too. A module's `tests.rs` (its `mod tests;`) is test
  code and not counted.
- README.md has at most 300 lines.
- No literal duplicate of 10 or more lines anywhere in src/ (test modules included). The
  comparison is on normalized lines: each line's leading and trailing whitespace is dropped,
  and blank lines and lines made only of closing/opening brackets and punctuation (`}`, `});`,
  `],`, `{`) are left out, so a copy that was re-indented still counts, and 10 lines of
  `}` do not. Two windows of 10 such lines that are equal are a duplicate; overlapping windows
  of one copy are reported once, as one span.
- Every folder under docs/evidence/ is a run listed in docs/evidence/manifest.json (the
  manifest says what each run is and what reads it), and no run there lacks its folder.
- Every run in the manifest has a non-empty "feeds": the docs/ section or table recomputed
  from it, or "nothing in docs/ cites it: ..." (issue 55).
- The integration tests are one binary (issue 55): every tests/it/NAME.rs but main.rs has its
  `mod NAME;` line in tests/it/main.rs (a file without one is silently never compiled), and
  tests/ holds no test binary of its own but those that need their own process (SEPARATE).
- scripts/tree-size.py passes: the tracked tree outside docs/evidence at most 5 MB,
  docs/evidence at most 2 MB.

usage: scripts/house-rules.py [REPO_DIR]
       scripts/house-rules.py --self-test   (plants an 801-line file and a 10-line copy in a
                                             temporary tree and checks that both are caught)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rust_source import block_end  # noqa: E402

MAX_CODE_LINES = 800
MAX_README_LINES = 300
DUP_LINES = 10
HERE = os.path.dirname(os.path.abspath(__file__))
# Test binaries kept out of tests/it (tests/it/main.rs says why): a test that reads its own
# process's peak memory, and real tunes that need no other test's server beside them.
SEPARATE = {'hostile_fuzz.rs', 'tune_cli.rs'}
TEST_MOD = re.compile(r'#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod \w+\s*\{')
ONLY_BRACKETS = re.compile(r'^[{}()\[\];,]*$')


def non_test_lines(text):
    """How many lines of `text` lie outside its `#[cfg(test)] mod NAME { ... }` blocks."""
    test, i = 0, 0
    for m in TEST_MOD.finditer(text):
        if m.start() < i:
            continue
        end = block_end(text, m.end())
        test += text.count('\n', m.start(), end) + 1
        i = end
    return len(text.splitlines()) - test


def rust_files(src):
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            if f.endswith('.rs'):
                yield os.path.join(root, f)


def check_sizes(repo, src):
    bad = []
    for p in rust_files(src):
        if os.path.basename(p) == 'tests.rs':
            continue
        n = non_test_lines(open(p, encoding='utf-8').read())
        if n > MAX_CODE_LINES:
            bad.append(f'{os.path.relpath(p, repo)}: {n} lines of non-test code (at most '
                       f'{MAX_CODE_LINES}; split it into submodules)')
    return bad


def check_readme(repo):
    p = os.path.join(repo, 'README.md')
    if not os.path.exists(p):
        return []
    n = len(open(p, encoding='utf-8').read().splitlines())
    if n > MAX_README_LINES:
        return [f'README.md: {n} lines (at most {MAX_README_LINES}; move detail to docs/)']
    return []


def normalized(path):
    """(line number, text) of the lines that take part in the duplicate comparison."""
    out = []
    for no, line in enumerate(open(path, encoding='utf-8').read().splitlines(), 1):
        s = line.strip()
        if s and not ONLY_BRACKETS.match(s):
            out.append((no, s))
    return out


def check_duplicates(repo, src):
    files = {os.path.relpath(p, repo): normalized(p) for p in rust_files(src)}
    seen = {}  # window text -> the first (file, index) it was found at
    matches = []  # (first file, second file, offset between them, first index)
    for f, lines in files.items():
        for i in range(len(lines) - DUP_LINES + 1):
            key = '\n'.join(s for _, s in lines[i:i + DUP_LINES])
            if key not in seen:
                seen[key] = (f, i)
                continue
            g, j = seen[key]
            if g == f and i - j < DUP_LINES:
                continue  # a repeated short pattern overlapping itself
            matches.append((g, f, i - j, j))
    # Consecutive windows of one copy (same files, same offset) make one span.
    spans = []
    for g, f, off, j in sorted(matches):
        if spans and spans[-1][:3] == [g, f, off] and spans[-1][4] == j - 1:
            spans[-1][4] = j
        else:
            spans.append([g, f, off, j, j])
    bad = []
    for g, f, off, j0, j1 in spans:
        n = j1 - j0 + DUP_LINES
        a, b = files[g], files[f]
        bad.append(f'{g}:{a[j0][0]}-{a[j0 + n - 1][0]} and {f}:{b[j0 + off][0]}-'
                   f'{b[j0 + off + n - 1][0]}: {n} lines copied literally (at most '
                   f'{DUP_LINES - 1}; share one function)')
    return bad


def check_evidence(repo):
    ev = os.path.join(repo, 'docs', 'evidence')
    if not os.path.isdir(ev):
        return []
    manifest = os.path.join(ev, 'manifest.json')
    try:
        runs = json.load(open(manifest, encoding='utf-8'))['runs']
        listed = {r['folder'].rstrip('/') for r in runs}
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f'docs/evidence/manifest.json: cannot read its runs ({e})']
    folders = {d for d in os.listdir(ev) if os.path.isdir(os.path.join(ev, d))}
    bad = [f'docs/evidence/{d}/: not listed in docs/evidence/manifest.json (say what reads it)'
           for d in sorted(folders - listed)]
    bad += [f'docs/evidence/manifest.json: run folder {d}/ does not exist'
            for d in sorted(listed - folders)]
    bad += [f'docs/evidence/manifest.json: run {r.get("id", r["folder"])} has no "feeds" (the '
            'docs/ section or table recomputed from it, or "nothing in docs/ cites it: ...")'
            for r in runs if not (isinstance(r.get('feeds'), str) and r['feeds'].strip())]
    return bad


def check_tests(repo):
    tests = os.path.join(repo, 'tests')
    it = os.path.join(tests, 'it')
    if not os.path.isdir(it):
        return []
    main = open(os.path.join(it, 'main.rs'), encoding='utf-8').read()
    declared = set(re.findall(r'(?m)^\s*(?:pub\s+)?mod\s+(\w+)\s*;', main))
    bad = [f'tests/it/{f}: no `mod {f[:-3]};` in tests/it/main.rs (never compiled)'
           for f in sorted(os.listdir(it))
           if f.endswith('.rs') and f != 'main.rs' and f[:-3] not in declared]
    bad += [f'tests/{f}: a test binary of its own; move it to tests/it/ (see tests/it/main.rs)'
            for f in sorted(os.listdir(tests)) if f.endswith('.rs') and f not in SEPARATE]
    return bad


def check_tree_size(repo):
    r = subprocess.run([sys.executable, os.path.join(HERE, 'tree-size.py'), repo],
                       capture_output=True, text=True)
    if r.returncode == 0:
        return []
    lines = [x for x in r.stderr.splitlines() if x.startswith('tree-size:')]
    return lines or [f'scripts/tree-size.py failed (exit {r.returncode})']


def check(repo, tree_size=True):
    src = os.path.join(repo, 'src')
    bad = check_sizes(repo, src) + check_readme(repo) + check_duplicates(repo, src)
    bad += check_evidence(repo) + check_tests(repo)
    if tree_size:
        bad += check_tree_size(repo)
    return bad


def self_test():
    """Plants each breach in a temporary tree and checks that it, and only it, is reported."""
    def tree(files):
        d = tempfile.mkdtemp(prefix='house-rules-')
        for name, text in files.items():
            p = os.path.join(d, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, 'w', encoding='utf-8').write(text)
        return d

    def body(prefix, n):
        return ''.join(f'let {prefix}{k} = {k} * 3;\n' for k in range(n))

    def evidence(feeds):
        run = {'id': 'r1', 'folder': 'r1/'}
        if feeds is not None:
            run['feeds'] = feeds
        return {'src/ok.rs': '', 'docs/evidence/r1/card.txt': '16\n',
                'docs/evidence/manifest.json': json.dumps({'runs': [run]})}

    tests = '#[cfg(test)]\nmod tests {\n' + body('t', 500) + '}\n'
    cases = [
        ('a file of 800 lines of code passes', {'src/ok.rs': body('a', 800)}, []),
        ('an 801-line file fails', {'src/big.rs': body('a', 801)}, ['src/big.rs: 801 lines']),
        ('test modules are not counted',
         {'src/t.rs': body('a', 400) + tests + body('b', 300)}, []),
        ('code after the test module is counted',
         {'src/t.rs': body('a', 400) + tests + body('b', 401)}, ['src/t.rs: 801 lines']),
        ('9 copied lines pass', {'src/a.rs': body('x', 9) + body('a', 5),
                                 'src/b.rs': body('b', 5) + body('x', 9)}, []),
        ('a 10-line copy in two files fails',
         {'src/a.rs': body('a', 3) + body('x', 10), 'src/b.rs': body('x', 10) + body('b', 3)},
         ['src/a.rs:4-13 and src/b.rs:1-10: 10 lines']),
        ('a re-indented copy with blank and brace lines between fails',
         {'src/a.rs': body('x', 12),
          'src/m/c.rs': '\n'.join('        ' + ln + '\n    }\n' for ln in body('x', 12).split('\n'))},
         ['src/a.rs:1-12 and src/m/c.rs:1-34: 12 lines']),
        ('a 301-line README fails', {'src/ok.rs': '', 'README.md': 'x\n' * 301},
         ['README.md: 301 lines']),
        ('an evidence run with its feeds passes', evidence('docs/results.md, a table'), []),
        ('an evidence run without feeds fails', evidence(None),
         ['docs/evidence/manifest.json: run r1 has no "feeds"']),
        ('an evidence run with empty feeds fails', evidence(' '),
         ['docs/evidence/manifest.json: run r1 has no "feeds"']),
        ('a test module with its mod line passes',
         {'src/ok.rs': '', 'tests/it/main.rs': 'mod support;\nmod a;\n', 'tests/it/a.rs': '',
          'tests/tune_cli.rs': ''}, []),
        ('a test module without its mod line fails',
         {'src/ok.rs': '', 'tests/it/main.rs': 'mod support;\n', 'tests/it/a.rs': ''},
         ['tests/it/a.rs: no `mod a;`']),
        ('a new test binary in tests/ fails',
         {'src/ok.rs': '', 'tests/it/main.rs': '', 'tests/new_one.rs': ''},
         ['tests/new_one.rs: a test binary of its own']),
    ]
    failed = 0
    for name, files, want in cases:
        got = check(tree(files), tree_size=False)
        ok = len(got) == len(want) and all(g.startswith(w) for g, w in zip(got, want))
        if not ok:
            failed += 1
            print(f'house-rules self-test: {name}: expected {want}, got {got}', file=sys.stderr)
    print(f'house-rules self-test: {len(cases) - failed} of {len(cases)} planted cases as expected')
    return 1 if failed else 0


def main(argv):
    if argv[:1] == ['--self-test']:
        return self_test()
    if len(argv) > 1 or (argv and argv[0].startswith('-')):
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    repo = argv[0] if argv else os.path.join(HERE, '..')
    bad = check(repo)
    for b in bad:
        print(f'house-rules: {b}')
    if not bad:
        print(f'house-rules: no file over {MAX_CODE_LINES} lines of code, README at most '
              f'{MAX_README_LINES} lines, no {DUP_LINES}-line copy in src/, evidence listed with its feeds, '
              'every test file a module of tests/it, '
              'tree within its size limits')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
