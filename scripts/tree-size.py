#!/usr/bin/env python3
"""The tracked tree's size: the bytes of every file `git ls-files` lists, in two parts with a
limit each (issue 55): everything outside docs/evidence/ at most 5 MB (5,000,000 bytes; issue
44), and docs/evidence/ at most 2 MB (2,000,000 bytes), which holds only what a docs table is
recomputed from (its manifest says which table each file feeds). Exit 1, with the totals and
the biggest files of the part over its limit: a checkout stays quick to clone, and evidence is
kept small (gzipped journals and results, no logs, no lock files).

usage: scripts/tree-size.py [--limit BYTES] [--evidence-limit BYTES] [REPO_DIR]
"""
import os
import subprocess
import sys

LIMIT = 5_000_000
EVIDENCE_LIMIT = 2_000_000
EVIDENCE = 'docs/evidence/'


def main(argv):
    limit, evidence_limit, repo = LIMIT, EVIDENCE_LIMIT, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == '--limit' and args:
            limit = int(args.pop(0))
        elif a == '--evidence-limit' and args:
            evidence_limit = int(args.pop(0))
        elif a.startswith('-'):
            print(__doc__.strip().splitlines()[-1], file=sys.stderr)
            return 2
        else:
            repo = a
    repo = repo or os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    try:
        out = subprocess.run(['git', '-C', repo, 'ls-files', '-z'], check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f'tree-size: cannot list the tracked files of {repo} (run it in a git checkout): {e}',
              file=sys.stderr)
        return 1
    sizes = []
    for name in out.split(b'\0'):
        if not name:
            continue
        path = os.path.join(os.fsencode(repo), name)
        if os.path.isfile(path) and not os.path.islink(path):
            sizes.append((os.path.getsize(path), name.decode(errors='replace')))
    failed = 0
    for part, files, cap in (
        ('the tracked tree outside docs/evidence', [x for x in sizes if not x[1].startswith(EVIDENCE)], limit),
        ('docs/evidence', [x for x in sizes if x[1].startswith(EVIDENCE)], evidence_limit),
    ):
        total = sum(s for s, _ in files)
        print(f'{part}: {total:,} bytes in {len(files)} files (limit {cap:,})')
        if total <= cap:
            continue
        failed = 1
        print(f'tree-size: {part} is {total - cap:,} bytes over {cap:,}; the biggest files:',
              file=sys.stderr)
        for s, n in sorted(files, reverse=True)[:15]:
            print(f'  {s:>9,}  {n}', file=sys.stderr)
    return failed

if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
