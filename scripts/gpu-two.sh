#!/usr/bin/env bash
# Issue 57's two-card part on the two-GPU machine (nvidia-h200-x2): each card emulated by its own
# ballast, the tune on the workload objective, then its pick re-measured on a later lease. One
# phase per device call (at most 10 minutes each; the machine stays warm ~30 s between calls,
# and what a phase leaves in $W is there for the next):
#
#   scripts/gpu-two.sh tune CASE     the kit unpacked, CASE's model synthesized, one ballast per
#                                    card, then `qtune --model M --workload WORKLOAD` (default
#                                    agent-session) under setsid, so it outlives the call
#   scripts/gpu-two.sh follow        waits for that tune (at most WAIT_S, default 560 s) and
#                                    brings back its run folder and log
#   scripts/gpu-two.sh compare CASE  a later lease: the default, `--fit-target 512,512` and CAND
#                                    (flags after the model, e.g. the tune's pick; CAND2 a second,
#                                    quoted as a shell reads them) in ROUNDS
#                                    (default 4) paired rounds of `qtune compare --workload W`
#                                    for each W in WORKLOADS (default agent-session)
#
# CASE: 35-12-8 and 35-16-16 (the synthetic Qwen3.5-35B-A3B, Q4_K_M, on 12 + 8 and 16 + 16 GiB)
# and 30-8-8 (Qwen3-30B-A3B, Q4_K_M, on 8 + 8 GiB): GiB free on GPU 0 and on GPU 1.
#
# Carried (gitignored): .gpu2/qtune.xz (the release binary), .gpu2/cuda/cuda-bin.tar.xz.part-*
# (the kept CUDA build; unpack_kit points LD_LIBRARY_PATH at it) and the case's vocabulary in
# .gpu2/vocab/ (ggml-vocab-qwen35.gguf for the 35B, ggml-vocab-qwen2.gguf for the 30B: carry
# only the one needed, as the tree and the build together come near the 64 MiB a call carries).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu-common.sh
. scripts/gpu-common.sh
gpu_run /tmp/qtune-two gpu-two.log
export QTUNE_VOCAB_DIR="$ROOT/.gpu2/vocab"
CTX=${CTX:-16384}
BUDGET=${BUDGET:-9}
B="$HOME/.cache/qtune/llama.cpp/b11434-cuda"

# CASE -> shape, ftype, GiB on GPU 0, GiB on GPU 1
case_of() {
  case "$1" in
    35-12-8) echo "qwen3.5-35b-a3b q4_k_m 12 8" ;;
    35-16-16) echo "qwen3.5-35b-a3b q4_k_m 16 16" ;;
    30-8-8) echo "qwen3-30b-a3b q4_k_m 8 8" ;;
    *) echo "case '$1': give 35-12-8, 35-16-16 or 30-8-8" >&2; exit 2 ;;
  esac
}

# The case's model synthesized and both cards emulated; sets MODEL and writes $W/card-CASE.txt.
prepare() {
  local spec shape ftype g0 g1
  spec=$(case_of "$1") || exit 2
  read -r shape ftype g0 g1 <<< "$spec"
  [ "$(nvidia-smi -L | wc -l)" -ge 2 ] \
    || { echo "two cards needed: run this on the nvidia-h200-x2 machine"; exit 1; }
  MODEL="$W/$shape-$ftype.gguf"
  [ -f "$MODEL" ] || qtune synth "$MODEL" --shape "$shape" --ftype "$ftype" > /dev/null || exit 1
  # A later phase on the same lease finds the ballasts still holding their cards.
  if ! pgrep -f "$W/ballast.py" > /dev/null; then
    start_ballast $((g0 * 1024)) 0
    start_ballast $((g1 * 1024)) 1
  fi
  # "GPU 1" in card.txt tells tests/it's replays of the evidence a two-card run.
  echo "emulated cards: GPU 0 $g0 GiB + GPU 1 $g1 GiB free of $(nvidia-smi --query-gpu=name \
    --format=csv,noheader | head -1) x2, $(nproc) cores, $(date -u +%F)" | tee "$W/card-$1.txt"
  qtune hw --no-bandwidth | tail -6
}

case "${1:-}" in
  tune)
    c=${2:?give the case}
    case_of "$c" > /dev/null || exit 2
    unpack_kit
    prepare "$c"
    rm -f "$W/tune.rc" "$W/tune.end"
    say "tune $c: qtune --model $(basename "$MODEL") --workload ${WORKLOAD:-agent-session} --ctx $CTX --budget-minutes $BUDGET"
    setsid bash -c "cd '$W' && date -u +%s > tune.start && qtune --model '$MODEL' \
      --workload '${WORKLOAD:-agent-session}' --ctx $CTX --budget-minutes $BUDGET --out '$W/tune-$c' \
      > tune.stdout 2> >(while IFS= read -r l; do printf '%s %s\n' \"\$(date -u +%T)\" \"\$l\"; done > tune.stderr); \
      echo \$? > tune.rc; date -u +%s > tune.end; echo $c > tune.case" < /dev/null > /dev/null 2>&1 &
    sleep 30
    tail -5 "$W/tune.stderr"
    ;;
  follow)
    deadline=$((SECONDS + ${WAIT_S:-560}))
    while [ ! -f "$W/tune.rc" ] && [ $SECONDS -lt $deadline ]; do sleep 10; done
    tail -c 7000 "$W/tune.stderr" | cut -c1-200
    if [ -f "$W/tune.rc" ]; then
      c=$(cat "$W/tune.case")
      echo "tune exit $(cat "$W/tune.rc") after $(( $(cat "$W/tune.end") - $(cat "$W/tune.start") )) s"
      echo "--- last stdout line: $(tail -1 "$W/tune.stdout")"
      cp "$W/card-$c.txt" "$W/tune-$c/card.txt" 2>/dev/null
      tar -C "$W" -cJf "$OUT/tune-$c.tar.xz" gpu-two.log tune.stdout tune.stderr "tune-$c"
      ls -la "$OUT"
    else
      echo "tune still running"
    fi
    ;;
  compare)
    c=${2:?give the case}
    case_of "$c" > /dev/null || exit 2
    unpack_kit
    prepare "$c"
    s="$B/bin/llama-server -m $MODEL -c $CTX -np 1"
    cmds=("$s" "$s --fit-target 512,512")
    [ -n "${CAND:-}" ] && cmds+=("$s $CAND")
    [ -n "${CAND2:-}" ] && cmds+=("$s $CAND2")
    for wl in ${WORKLOADS:-agent-session}; do
      dir="$W/compare-$c-$wl"
      say "compare $c on $wl, ${ROUNDS:-4} rounds: default | fit-target 512,512 | ${CAND:-(no CAND)}"
      qtune compare "${cmds[@]}" --workload "$wl" --rounds "${ROUNDS:-4}" --out "$dir" 2>&1 \
        | cut -c1-200 | tail -30
      # Packed as each workload ends: a call cut short still brings back the ones before.
      cp "$W/card-$c.txt" "$dir/card.txt"
      tar -C "$W" -cJf "$OUT/compare-$c-$wl.tar.xz" "compare-$c-$wl"
    done
    cp "$LOG" "$OUT/"
    ;;
  *)
    echo "usage: scripts/gpu-two.sh tune CASE|follow|compare CASE" >&2
    exit 2
    ;;
esac
