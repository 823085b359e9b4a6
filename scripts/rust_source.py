"""Reading Rust source without a parser, shared by scripts/import-graph.py and
scripts/house-rules.py: where a `{ ... }` block ends, skipping strings, raw strings, char
literals and comments."""
import re


def block_end(text, j):
    """The index just past the `}` that closes the block whose body starts at `j` (strings,
    char literals and comments skipped)."""
    depth = 1
    while j < len(text) and depth:
        c = text[j]
        if text.startswith('//', j):
            j = text.find('\n', j)
            j = len(text) if j < 0 else j
            continue
        if text.startswith('/*', j):
            j = text.find('*/', j) + 2
            continue
        m = re.match(r'r(#*)"', text[j:j + 10]) if c == 'r' and not (
            text[j - 1].isalnum() or text[j - 1] == '_') else None
        if m:
            close = '"' + m.group(1)
            j = text.find(close, j + len(m.group(0))) + len(close)
            continue
        if c == '"':
            j += 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            j += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'", text[j:j + 5])
            if m:
                j += len(m.group(0))
                continue
        depth += {'{': 1, '}': -1}.get(c, 0)
        j += 1
    return j
