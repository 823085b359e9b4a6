#!/usr/bin/env python3
"""The engine seam (issue 56): an inference server's flag spellings live in src/engine/ only.

The banned spellings are taken from the engine modules themselves: every string literal in
src/engine/ (its non-test code, the sdist build's cmake flags in build.rs left out) that is a
server flag (`"-ctk"`, `"--fit-margin"`), or starts with one (`"--load-mode dio"`), and every
spelling in a `&[...]` table there (FLAG_SPELLINGS, REQUIRED_FLAGS). A few words every program
shares are not an engine's (GENERIC, below). Then every string literal in the rest of src/
(test modules and `tests.rs` files exempt, as are tests/ and docs/) that holds one of them as
a word is an error: `file:line: "literal" spells FLAG`. A third engine with other spellings is
then an edit under src/engine/ only.

Exit 1 when there is any, 0 otherwise (it prints how many spellings it checked). There is no
allowance: the 77 literals outside src/engine/ that spelled a flag when the check came (issue
56) now name it through `crate::engine::Flag`, whose spelling is the engine's; a new one fails.
A literal marked `// not a server flag: WHY` (on its line or the line above) is another
program's flag of the same spelling (Python's `-c`, pip's and docker compose's `-d`) or no flag.

usage: scripts/engine-seam.py [SRC_DIR]
"""
import importlib.util
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'src')
ENGINE = os.path.join(SRC, 'engine')

# The import graph's test-module stripper: the same notion of "test code".
_spec = importlib.util.spec_from_file_location(
    'import_graph_strip', os.path.join(os.path.dirname(__file__), 'import-graph.py'))
_src = open(_spec.origin).read()
_src = _src[:_src.index('\ndef module_of')]  # only the helpers, not the graph walk
_mod = {'__file__': _spec.origin}
exec(compile(_src, _spec.origin, 'exec'), _mod)
strip_tests = _mod['strip_tests']

# Words every program (or every server) has, and qtune's own flags of the same spelling
# (`qtune tune --server`, `--rpc`; `qtune rpc serve --threads`): not one engine's spelling.
GENERIC = {'--help', '-h', '--version', '--host', '--port', '-m', '--model', '--server', '--rpc',
           '--threads'}
# The mark that exempts the literals starting on its line (the reason follows it).
MARK = '// not a server flag:'
# A server flag: lowercase after the dashes (cmake's -S, -B, -G, -D... are not the server's).
FLAG = re.compile(r'^(--?[a-z][a-z0-9-]*)(?:$|[ =])')
# "..." literals (escapes skipped) and raw r"..." / r#"..."# literals.
LITERAL = re.compile(r'r(#*)"(.*?)"\1|"((?:\\.|[^"\\])*)"', re.S)


def literals(text):
    """(offset, content) of every string literal, comments left out."""
    out = []
    i = 0
    for m in LITERAL.finditer(text):
        if m.start() < i:
            continue
        # A literal inside a `//` comment is not code.
        line_start = text.rfind('\n', 0, m.start()) + 1
        if '//' in text[line_start:m.start()] and not re.search(
                r'"[^"]*//', text[line_start:m.start()]):
            continue
        # A char literal's quote ('"') is not the start of a string.
        if m.start() > 0 and text[m.start() - 1] == "'" and text[m.start() + 1:m.start() + 2] == "'":
            continue
        body = m.group(2) if m.group(2) is not None else m.group(3)
        out.append((m.start(), body))
        i = m.end()
    return out


def rust_files(root):
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith('.rs') and f != 'tests.rs':
                yield os.path.join(d, f)


def spellings():
    found = set()
    for p in rust_files(ENGINE):
        if os.path.basename(p) == 'build.rs':
            continue
        for _, body in literals(strip_tests(open(p).read())):
            m = FLAG.match(body)
            if m:
                found.add(m.group(1))
    return sorted(found - GENERIC)


def main():
    flags = spellings()
    if not flags:
        print('engine-seam: no flag spelling found under src/engine/ (is SRC right?)')
        return 1
    word = re.compile(r'(?<![\w-])(' + '|'.join(re.escape(f) for f in sorted(
        flags, key=len, reverse=True)) + r')(?![\w-])')
    hits = []
    for p in rust_files(SRC):
        if os.path.commonpath([os.path.abspath(p), os.path.abspath(ENGINE)]) == os.path.abspath(ENGINE):
            continue
        whole = open(p).read()
        text = strip_tests(whole)
        for at, body in literals(text):
            # A literal marked `// not a server flag: WHY` on the line it starts on, or on the
            # line above, is another program's flag of the same spelling (Python's `-c`,
            # docker compose's `-d`), or no flag at all (a file name's `-c{ctx}`).
            start = text.rfind('\n', 0, at) + 1
            above = text.rfind('\n', 0, max(start - 1, 0)) + 1
            line_end = text.find('\n', at)
            if MARK in text[above:line_end if line_end >= 0 else None]:
                continue
            for m in word.finditer(body):
                # The line in the file itself (test modules left in), where the text is unique.
                found = whole.find('"' + body + '"')
                line = whole.count('\n', 0, found) + 1 if found >= 0 else text.count('\n', 0, at) + 1
                shown = body if len(body) <= 60 else body[:57] + '...'
                where = os.path.relpath(p, os.path.join(SRC, '..'))
                hits.append((m.group(1), f'{where}:{line}: "{shown}" spells {m.group(1)}'))
    if hits:
        for _, text in hits:
            print(text)
        print(f'engine-seam: {len(hits)} string literal(s) outside src/engine/ spell an engine flag '
              f'(of {len(flags)} spellings the engines use): name the flag through '
              f'crate::engine::Flag, or mark another program\'s flag `{MARK} WHY`')
        return 1
    print(f'engine-seam: no literal outside src/engine/ spells an engine flag '
          f'({len(flags)} spellings checked)')
    return 0

if __name__ == '__main__':
    sys.exit(main())
