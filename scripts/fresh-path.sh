#!/usr/bin/env bash
# The README's first commands, exactly as written, as a newcomer runs them on a fresh machine:
# `cargo install --locked --path .`, then `qtune demo` by name from PATH. A throwaway HOME (so
# no ~/.cache/qtune, no ~/.local/share/qtune), XDG_CACHE_HOME, XDG_DATA_HOME and every QTUNE_*
# variable unset, and no cmake or ninja on PATH (qtune must install them itself). qtune is
# installed into the throwaway HOME (cargo install --root "$HOME/.cargo-install"), whose bin/
# goes first on PATH. It asserts exit 0, that the last stdout line is a llama-server command
# and that the demo wrote nothing into the repository, and prints how long each phase took.
# The fresh cache's path goes to the file named by $1, if given, so the suite can reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

fresh=$(mktemp -d "${TMPDIR:-/tmp}/qtune-fresh-home.XXXXXX")
# The Rust toolchain lives under the real HOME; keep it reachable, nothing else.
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
unset XDG_CACHE_HOME XDG_DATA_HOME
while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\(QTUNE_[A-Za-z0-9_]*\)=.*/\1/p')

# PATH without cmake or ninja: a folder that holds them is replaced by a copy of its links
# without them (removing /usr/bin itself would take python3 and c++ with it).
masked="$fresh/.masked-path"
mkdir -p "$masked"
new_path=""
i=0
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  if ls "$d" 2>/dev/null | grep -qE '^(cmake|ninja|ninja-build)$'; then
    i=$((i + 1))
    m="$masked/$i"
    mkdir -p "$m"
    for f in "$d"/*; do
      case "$(basename "$f")" in cmake | ninja | ninja-build) ;; *) ln -s "$f" "$m/" ;; esac
    done
    d="$m"
  fi
  new_path="${new_path:+$new_path:}$d"
done
export PATH="$new_path"
export HOME="$fresh"
for t in cmake ninja; do
  if command -v "$t" >/dev/null; then
    echo "fresh-path: $t is still on PATH ($(command -v "$t"))" >&2
    exit 1
  fi
done

echo "fresh-path: HOME=$HOME, no cmake/ninja on PATH; running: cargo install --locked --path . && qtune demo" >&2
log="$fresh/demo.stderr"
out="$fresh/demo.stdout"
install_log="$fresh/install.stderr"
root="$HOME/.cargo-install"
export PATH="$root/bin:$PATH"
repo_state_before=$(git -C "$repo" status --porcelain --untracked-files=all -- . ':!target' 2>/dev/null || true)
t0=$(date +%s)
set +e
cargo install --locked --path . --root "$root" 2> >(tee "$install_log" >&2)
rc=$?
set -e
sleep 1 # let tee flush
if [ "$rc" -ne 0 ]; then
  echo "fresh-path: FAILED: 'cargo install --locked --path .' exited $rc" >&2
  exit 1
fi
if [ "$(command -v qtune)" != "$root/bin/qtune" ]; then
  echo "fresh-path: FAILED: 'qtune' on PATH is $(command -v qtune || echo nothing), not the installed $root/bin/qtune" >&2
  exit 1
fi
t_installed=$(date +%s)
set +e
(cd "$fresh" && qtune demo) >"$out" 2> >(tee "$log" >&2)
rc=$?
set -e
t1=$(date +%s)
sleep 1 # let tee flush
if [ "$rc" -ne 0 ]; then
  echo "fresh-path: FAILED: 'qtune demo' exited $rc" >&2
  exit 1
fi
repo_state_after=$(git -C "$repo" status --porcelain --untracked-files=all -- . ':!target' 2>/dev/null || true)
if [ "$repo_state_before" != "$repo_state_after" ]; then
  echo "fresh-path: FAILED: the install or the demo changed files in the repository:" >&2
  diff <(echo "$repo_state_before") <(echo "$repo_state_after") >&2 || true
  exit 1
fi
runs="$HOME/.local/share/qtune/runs"
if ! ls -d "$runs"/*demo* >/dev/null 2>&1; then
  echo "fresh-path: FAILED: the demo's run directory is not under $runs" >&2
  exit 1
fi
# The banner's line, whether the path fits beside its label or is wrapped onto the next line
# (qtune wraps what it prints at 100 columns).
if ! grep -A1 '^  run directory:' "$log" | tr -s ' \n' ' ' | grep -q "run directory: $runs/"; then
  echo "fresh-path: FAILED: the demo's banner does not name its run directory under $runs" >&2
  exit 1
fi
last=$(tail -n 1 "$out")
first_word=${last%% *}
first_word=${first_word//\'/}
if [ "$(basename "$first_word")" != "llama-server" ] || ! grep -q -- ' -m ' <<<"$last"; then
  echo "fresh-path: FAILED: the last stdout line is not a llama-server command: $last" >&2
  exit 1
fi
# Phases, from what cargo and qtune print.
compile=$(sed -n 's/.*Finished .* in \(.*\)$/\1/p' "$install_log" | tail -1)
server=$(sed -n 's/^qtune: built llama-server in \([0-9]*\) s.*/\1/p' "$log" | tail -1)
echo "fresh-path: ok in $((t1 - t0)) s (cargo install: $((t_installed - t0)) s, compile ${compile:-?}; qtune demo: $((t1 - t_installed)) s, of which the llama.cpp build ${server:-?} s; the rest is the tool install, source download, configure and the demo's tune)" >&2
echo "fresh-path: last line: $last" >&2
if [ "${1:-}" != "" ]; then
  echo "$fresh/.cache/qtune" >"$1"
fi
