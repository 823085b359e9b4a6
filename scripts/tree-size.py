#!/usr/bin/env python3
"""The tracked tree's size: the bytes of every file `git ls-files` lists, against a limit
(5 MB, 5,000,000 bytes, by default; issue 44). Exit 1, with the total and the biggest files,
when the tree is over it: a checkout stays quick to clone, and evidence is kept small
(gzipped journals and results, no logs, no lock files).

usage: scripts/tree-size.py [--limit BYTES] [REPO_DIR]
"""
import os
import subprocess
import sys

LIMIT = 5_000_000


def main(argv):
    limit, repo = LIMIT, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == '--limit' and args:
            limit = int(args.pop(0))
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
    total = sum(s for s, _ in sizes)
    print(f'tracked tree: {total:,} bytes in {len(sizes)} files (limit {limit:,})')
    if total <= limit:
        return 0
    print(f'tree-size: the tracked tree is {total - limit:,} bytes over {limit:,}; the biggest files:',
          file=sys.stderr)
    for s, n in sorted(sizes, reverse=True)[:15]:
        print(f'  {s:>9,}  {n}', file=sys.stderr)
    return 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
