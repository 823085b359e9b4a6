#!/usr/bin/env bash
# Issue 57's RPC part on the two-GPU machine: one box with one rpc-server per GPU stands in for
# a head and a second box, the second behind `qtune rpc link` at 1 and 10 Gbit/s. The model is
# the synthetic 35B in Q8_0 (about 36 GB: too big for one 16-20 GiB card). One phase per device
# call (at most 10 minutes each; what a phase leaves in $W is there for the next while the
# machine stays warm):
#
#   scripts/gpu-rpc.sh setup        qtune and the CUDA build (carried) unpacked; the 35B Q8_0
#                                   synthesized; rpc-servers on GPU0 (:50052) and GPU1 (:50053)
#                                   and links in front of GPU1's: :50063 at 1 Gbit/s, :50073 at
#                                   10 Gbit/s (DELAY_MS each way, default 0.1); `qtune hw --rpc`
#                                   through each link. GPU0's worker serves a head with no GPU
#                                   of its own (CUDA_VISIBLE_DEVICES= and --rpc
#                                   127.0.0.1:50052,LINK); the phases below keep GPU0 local.
#   scripts/gpu-rpc.sh compare GBIT the head on GPU0 (CUDA_VISIBLE_DEVICES=0) against GPU1 across
#                                   the GBIT link: one box with the experts on its CPU
#                                   (`--fit-target 512`), the naive split (`--rpc`, llama.cpp's
#                                   own split) and CAND (flags, e.g. a tune's winner) if set, in
#                                   ROUNDS (default 3) paired rounds on WORKLOAD (agent-session).
#   scripts/gpu-rpc.sh tune GBIT    `qtune --model 35B --rpc LINK` under setsid (outlives the call)
#   scripts/gpu-rpc.sh wait         waits for that tune (at most WAIT_S, default 560 s)
#   scripts/gpu-rpc.sh pack         the runs, the links' byte counters and the log into $OUT
#
# Carried (gitignored), as for scripts/gpu-first-hour.sh's compare phase: .gpu2/qtune.xz,
# .gpu2/cuda/cuda-bin.tar.xz.part-* (unpacked where they were built: their RPATH) and
# .gpu2/vocab/. Each card is given GIB GiB (default 16) by a ballast, so neither card alone
# holds the model.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu-common.sh
. scripts/gpu-common.sh
gpu_run /tmp/qtune-rpc gpu-rpc.log
export QTUNE_VOCAB_DIR="$ROOT/.gpu2/vocab"
MODEL="$W/qwen3.5-35b-a3b-q8_0.gguf"
GIB=${GIB:-16}
CTX=${CTX:-16384}
BUDGET=${BUDGET:-9}
DELAY_MS=${DELAY_MS:-0.1}
B="$HOME/.cache/qtune/llama.cpp/b11434-cuda"

# The link in front of GPU1's worker for a rate: 1 -> :50063, 10 -> :50073.
link_port() {
  case "$1" in
    1) echo 50063 ;;
    10) echo 50073 ;;
    *) echo "rate $1: give 1 or 10" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  setup)
    unpack_kit
    nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv
    say "synthesizing the 35B in Q8_0"
    [ -f "$MODEL" ] || qtune synth "$MODEL" --shape qwen3.5-35b-a3b --ftype q8_0 > /dev/null || exit 1
    ls -la "$MODEL"
    start_ballast $((GIB * 1024)) 0
    start_ballast $((GIB * 1024)) 1
    for g in 0 1; do
      CUDA_VISIBLE_DEVICES=$g LLAMA_CACHE="$W/rpc-cache$g" setsid qtune rpc serve \
        --port $((50052 + g)) > "$W/worker$g.log" 2>&1 < /dev/null &
    done
    for rate in 1 10; do
      setsid qtune rpc link --listen "127.0.0.1:$(link_port $rate)" --to 127.0.0.1:50053 \
        --gbit "$rate" --delay-ms "$DELAY_MS" --stats "$W/link-$rate.json" \
        > "$W/link-$rate.log" 2>&1 < /dev/null &
    done
    sleep 5
    for rate in 1 10; do
      say "hw --rpc across the $rate Gbit/s link"
      qtune hw --no-bandwidth --rpc "127.0.0.1:$(link_port "$rate")" | tail -3
    done
    ;;
  compare)
    rate=${2:?give the link rate: 1 or 10}
    link="127.0.0.1:$(link_port "$rate")"
    s="$B/bin/llama-server -m $MODEL -c $CTX -np 1"
    cmds=("$s --fit-target 512" "$s --rpc $link")
    [ -n "${CAND:-}" ] && cmds+=("$s --rpc $link $CAND")
    say "compare at $rate Gbit/s, ${ROUNDS:-3} rounds: one box | naive split | ${CAND:-(no CAND)}"
    CUDA_VISIBLE_DEVICES=0 qtune compare "${cmds[@]}" --workload "${WORKLOAD:-agent-session}" \
      --rounds "${ROUNDS:-3}" --out "$W/compare-$rate" 2>&1 | cut -c1-200 | tail -40
    cat "$W/link-$rate.json"
    ;;
  tune)
    rate=${2:?give the link rate: 1 or 10}
    link="127.0.0.1:$(link_port "$rate")"
    say "tune across the $rate Gbit/s link"
    CUDA_VISIBLE_DEVICES=0 setsid bash -c "cd '$W' && date -u +%s > tune.start && qtune --model '$MODEL' \
      --rpc '$link' --workload '${WORKLOAD:-agent-session}' --ctx $CTX --budget-minutes $BUDGET \
      --out '$W/tune-$rate' > tune.stdout 2> tune.stderr; echo \$? > tune.rc; date -u +%s > tune.end" \
      < /dev/null > /dev/null 2>&1 &
    sleep 20
    tail -5 "$W/tune.stderr"
    ;;
  wait)
    deadline=$((SECONDS + ${WAIT_S:-560}))
    while [ ! -f "$W/tune.rc" ] && [ $SECONDS -lt $deadline ]; do sleep 10; done
    tail -c 6000 "$W/tune.stderr" | cut -c1-200
    [ -f "$W/tune.rc" ] && echo "tune exit $(cat "$W/tune.rc")" || echo "tune still running"
    ;;
  pack)
    dirs=()
    for d in "$W"/compare-* "$W"/tune-*; do [ -d "$d" ] && dirs+=("$(basename "$d")"); done
    tar -C "$W" -cJf "$OUT/gpu-rpc.tar.xz" gpu-rpc.log link-*.json worker*.log "${dirs[@]}"
    ls -la "$OUT"
    ;;
  *)
    echo "usage: scripts/gpu-rpc.sh setup|compare GBIT|tune GBIT|wait|pack" >&2
    exit 2
    ;;
esac
