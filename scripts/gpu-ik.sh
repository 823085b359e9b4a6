#!/usr/bin/env bash
# Issue 56 on the GPU machine: ik_llama.cpp's CUDA build, then the engines raced. One phase per
# device call (each call is at most 10 minutes; the machine stays warm ~30 s between calls, and
# what a phase leaves in $W is there for the next):
#
#   scripts/gpu-ik.sh build    `qtune server build --engine ik --cuda` in a fresh HOME (its time
#                              is the README's figure for a GPU box), under setsid; waits at
#                              most WAIT_S (default 540 s); with PACK=1, then packs the build
#                              in pieces under 16 MiB into $OUT (195 MB: more than one call
#                              carries back, so by default each lease builds it again).
#                              Carried: .gpu-ik/qtune.xz and .gpu-ik/ik_llama_cpp_python-0.1.5.tar.gz
#                              (the pinned sdist: the GPU machine has no network).
#                              With SYNTH=1, also writes the later phases' models (kernels'
#                              tiny ones, the SHAPE/FTYPE one) on the build's spare cores;
#                              the later phases wait for them. Carried then: the vocabulary.
#   scripts/gpu-ik.sh wait     waits for that build (WAIT_S), then packs it.
#   SHAPE (default qwen3.5-35b-a3b; qwen3-30b-a3b carries .gpu2/vocab/ggml-vocab-qwen2.gguf),
#   FTYPE (default q4_k_m: qtune synth's --ftype) and NO_MTP=1 (the 35B without its MTP
#   block) pick the model of tune, probe and compare.
#   scripts/gpu-ik.sh kernels  which of ik's CUDA kernels fault (the second lease: Q4_K_M
#                              faults in mmq_id.cu, Q8_0 answers): ik's server by hand on the
#                              tiny model in each quantization qtune synth writes, and on Q4_K_M
#                              with ik's CUDA parameters (-cuda mmq-id-size=0, fusion=0,
#                              graphs=0), CUDA_LAUNCH_BLOCKING=1, one short request each; one
#                              line per server into $OUT/kernels.txt. Carried: .gpu2 (qwen2
#                              vocabulary), ik's build from `build` on the same lease.
#   scripts/gpu-ik.sh tune     llama.cpp's kept CUDA build (.gpu2/cuda, as for
#                              scripts/gpu-first-hour.sh) beside ik's, the 35B synthesized, a
#                              ballast leaving GIB GiB (default 16), then
#                              `qtune --model 35B --engine both --workload WORKLOAD --ctx CTX
#                              --budget-minutes BUDGET` under setsid. Carried: .gpu2.
#   scripts/gpu-ik.sh follow   waits for the tune (WAIT_S), then brings back its run folder.
#   scripts/gpu-ik.sh probe    which ik configs run at all: llama.cpp and ik at one placement
#                              (--n-cpu-moe NCMOE, default 30), ik with its fused ops off one
#                              by one and all at once; one round of short requests. Carried:
#                              .gpu2 (ik's build from `build` on the same lease).
#   scripts/gpu-ik.sh compare  ik (CAND, flags) against llama.cpp (REF), ROUNDS paired rounds
#                              of `qtune compare --workload WORKLOAD` under setsid into
#                              $W/$CMP; `follow-compare` waits (WAIT_S) and brings it back
#                              as $OUT/$CMP.tar.xz. Carried: .gpu2 (ik's build from `build`
#                              on the same lease).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu-common.sh
. scripts/gpu-common.sh
gpu_run /tmp/qtune-ik gpu-ik.log
SHAPE=${SHAPE:-qwen3.5-35b-a3b}
# NO_MTP=1: the 35B without its MTP block (`qtune synth --no-mtp`), the layout ik 0.1.5 loads.
MTP_ARG=${NO_MTP:+--no-mtp}
FTYPE=${FTYPE:-q4_k_m}
MODEL="$W/$SHAPE${NO_MTP:+-no-mtp}-$FTYPE.gguf"
GIB=${GIB:-16}
CTX=${CTX:-16384}
BUDGET=${BUDGET:-12}
WORKLOAD=${WORKLOAD:-agent-session}
IK="$HOME/.cache/qtune/ik_llama.cpp/0.1.5-cuda"
LL="$HOME/.cache/qtune/llama.cpp/b11434-cuda"

qtune_from() { # the release binary on PATH, as `cargo install` puts it
  mkdir -p "$HOME/.cargo/bin"
  [ -x "$HOME/.cargo/bin/qtune" ] && return 0
  xz -dc "$1" > "$HOME/.cargo/bin/qtune" && chmod +x "$HOME/.cargo/bin/qtune"
}

pack_build() {
  if [ -n "${PACK:-}" ] && [ -f "$W/build.rc" ] && [ "$(cat "$W/build.rc")" = 0 ] && [ -x "$IK/bin/llama-server" ]; then
    echo "ik CUDA build at $IK ($(du -sh "$IK/bin" | cut -f1))"
    # The binaries' RUNPATH is the build folder: unpack at the same absolute path. Only the
    # server, its shared libraries (ik leaves them where cmake made them: src/, ggml/src/) and
    # the build's stamp: a later lease carries these beside llama.cpp's build.
    (cd "$IK" && { echo bin/llama-server; find . -name '*.so*' -not -path '*/CMakeFiles/*'; } \
      | tar -T - -cf - qtune-built) | xz -T0 -6 | split -b 15M - "$OUT/ik-cuda-bin.tar.xz.part-"
    (cd "$IK" && readelf -d bin/llama-server | grep -E 'NEEDED|RUNPATH|RPATH')
    du -ch "$OUT"/ik-cuda-bin.tar.xz.part-* | tail -1
  fi
  cp "$LOG" "$W/build.stderr" "$OUT/" 2>/dev/null
  ls -la "$OUT"
}

wait_for() { # $1: the file that says the job ended
  local deadline=$((SECONDS + ${WAIT_S:-540}))
  while [ ! -f "$1" ] && [ $SECONDS -lt $deadline ]; do sleep 10; done
}

synth_wait() { # the build phase's background synth (SYNTH=1), where one was started
  [ -f "$W/synth.log" ] && WAIT_S=${SYNTH_WAIT_S:-400} wait_for "$W/synth.done"
  [ -f "$W/synth.log" ] && say "synth: done at $(cat "$W/synth.done" 2>/dev/null)"
  return 0
}

kit() { # llama.cpp's kept CUDA build (unpack_kit) and ik's, where this lease lacks them
  unpack_kit
  mkdir -p "$IK"
  if [ ! -x "$IK/bin/llama-server" ]; then
    cat .gpu-ik/cuda/ik-cuda-bin.tar.xz.part-* | tar xJf - -C "$IK" || exit 1
  fi
  qtune server path --engine ik || exit 1
}

case "${1:-}" in
  build)
    qtune_from .gpu-ik/qtune.xz || exit 1
    mkdir -p "$HOME/.cache/qtune/src"
    cp .gpu-ik/ik_llama_cpp_python-0.1.5.tar.gz "$HOME/.cache/qtune/src/" || exit 1
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    echo "cores: $(nproc); nvcc: $(command -v nvcc); cmake: $(command -v cmake)"
    say "qtune server build --engine ik --cuda"
    rm -f "$W/build.rc"
    setsid bash -c "cd '$W' && date -u +%s > build.start && qtune server build --engine ik --cuda \
      > build.stdout 2> build.stderr; echo \$? > build.rc; date -u +%s > build.end" \
      < /dev/null > /dev/null 2>&1 &
    if [ -n "${SYNTH:-}" ]; then
      # The models of the later phases (kernels' tiny ones, then tune's), written on the
      # build's spare cores rather than on the lease's clock later. Carried: the vocabulary.
      rm -f "$W/synth.done"
      setsid bash -c "export QTUNE_VOCAB_DIR='$ROOT/.gpu2/vocab'; for f in q4_k_m q4_k_l mxfp4_moe q8_0; do \
        [ -f '$W'/tiny-\$f.gguf ] || qtune synth '$W'/tiny-\$f.gguf --shape tiny-qwen3moe --ftype \$f; done; \
        [ -f '$MODEL' ] || qtune synth '$MODEL' --shape $SHAPE --ftype $FTYPE $MTP_ARG; \
        date -u +%T > '$W/synth.done'" < /dev/null > "$W/synth.log" 2>&1 &
    fi
    wait_for "$W/build.rc"
    [ -f "$W/synth.log" ] && echo "synth: $(tail -c 300 "$W/synth.log" | tr '\n' ' ') done: $(cat "$W/synth.done" 2>/dev/null)"
    tail -15 "$W/build.stderr" | cut -c1-200
    if [ -f "$W/build.rc" ]; then
      echo "build exit $(cat "$W/build.rc") after $(( $(cat "$W/build.end") - $(cat "$W/build.start") )) s"
      pack_build
    else
      echo "build still running"
    fi
    ;;
  wait)
    wait_for "$W/build.rc"
    tail -15 "$W/build.stderr" | cut -c1-200
    [ -f "$W/build.rc" ] && echo "build exit $(cat "$W/build.rc") after $(( $(cat "$W/build.end") - $(cat "$W/build.start") )) s" && pack_build
    ;;
  tune)
    kit
    synth_wait
    [ -f "$MODEL" ] || qtune synth "$MODEL" --shape "$SHAPE" --ftype "$FTYPE" $MTP_ARG > /dev/null || exit 1
    start_ballast $((GIB * 1024))
    echo "emulated card: ${GIB} GiB free of $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" > "$W/card.txt"
    say "qtune --model $SHAPE-$FTYPE --engine both --workload $WORKLOAD --ctx $CTX --budget-minutes $BUDGET"
    rm -f "$W/tune.rc"
    setsid bash -c "cd '$W' && export QTUNE_VOCAB_DIR='$QTUNE_VOCAB_DIR' && date -u +%s > tune.start && \
      qtune --model '$MODEL' --engine both --workload $WORKLOAD --ctx $CTX --budget-minutes $BUDGET \
      --out '$W/tune' > tune.stdout 2> >(while IFS= read -r l; do printf '%s %s\n' \"\$(date -u +%T)\" \"\$l\"; done > tune.stderr); \
      echo \$? > tune.rc; date -u +%s > tune.end" < /dev/null > /dev/null 2>&1 &
    sleep 30
    tail -5 "$W/tune.stderr"
    ;;
  follow)
    wait_for "$W/tune.rc"
    tail -c 6000 "$W/tune.stderr" | cut -c1-200
    if [ -f "$W/tune.rc" ]; then
      echo "tune exit $(cat "$W/tune.rc") after $(( $(cat "$W/tune.end") - $(cat "$W/tune.start") )) s"
      cp "$W/card.txt" "$W/tune/" 2>/dev/null
      tar -C "$W" -cJf "$OUT/ik-tune.tar.xz" gpu-ik.log card.txt tune.stderr tune.stdout tune 2>/dev/null
      ls -la "$OUT"
    else
      echo "tune still running"
    fi
    ;;
  probe)
    # Which ik configs run at all (the first lease's ik launches all aborted, fused MoE on):
    # llama.cpp at a fixed placement (A), then ik at the same placement with its fused ops
    # left on, each turned off, all off, all off without flash attention, and all off with
    # nothing offloaded (the first lease's ik default, which aborted too); one round, short
    # requests.
    kit
    synth_wait
    [ -f "$MODEL" ] || qtune synth "$MODEL" --shape "$SHAPE" --ftype "$FTYPE" $MTP_ARG > /dev/null || exit 1
    start_ballast $((GIB * 1024))
    B="-m $MODEL -c $CTX -np 1"
    P="$B -ngl 999 --n-cpu-moe ${NCMOE:-30}"
    OFF="-no-fmoe -no-fug -no-mmad -no-ooae"
    say "probe: ik at the placement $P"
    qtune compare "$LL/bin/llama-server $P -fa on" "$IK/bin/llama-server $P -fa on" \
      "$IK/bin/llama-server $P -fa on -no-fmoe" "$IK/bin/llama-server $P -fa on -no-fug -no-mmad" \
      "$IK/bin/llama-server $P -fa on -no-ooae" "$IK/bin/llama-server $P -fa on $OFF" \
      "$IK/bin/llama-server $P -fa off $OFF" "$IK/bin/llama-server $B -ngl 0 -fa on $OFF" \
      --rounds 1 --prompt-tokens 512 --gen-tokens 64 --repetitions 2 \
      --out "$OUT/${CMP:-ik-probe}" 2>&1 | cut -c1-200 | tail -40
    pkill -f 'python3 -u .*[b]allast'
    cp "$LOG" "$OUT/"
    ;;
  kernels)
    kit
    synth_wait
    t="$OUT/kernels.txt"
    echo "# ik_llama.cpp 0.1.5 CUDA ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nvcc --version | tail -2 | head -1)), tiny-qwen3moe, -c 2048 -np 1 -ngl 999, CUDA_LAUNCH_BLOCKING=1, one request of 8 tokens" > "$t"
    one() { # $1: the model's ftype, then ik's flags: one line, answered or where it faulted
      local m="$W/tiny-$1.gguf" port=18181 pid r e
      [ -f "$m" ] || qtune synth "$m" --shape tiny-qwen3moe --ftype "$1" > /dev/null || return
      CUDA_LAUNCH_BLOCKING=1 timeout -s KILL 40 "$IK/bin/llama-server" -m "$m" -c 2048 -np 1 -ngl 999 \
        "${@:2}" --host 127.0.0.1 --port $port --log-disable > "$W/kernel.log" 2>&1 &
      pid=$!
      for _ in $(seq 80); do curl -s 127.0.0.1:$port/health | grep -q ok && break; sleep 0.25; done
      r=$(curl -s -m 10 127.0.0.1:$port/completion -d '{"prompt":"Hello there, how are you","n_predict":8}' | grep -c '"content"')
      # A server that faulted hangs in its abort and ignores SIGTERM (the third lease lost
      # the phase to one): KILL it, and its `timeout`.
      pkill -9 -P $pid 2> /dev/null; kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
      e=$(grep -A1 'CUDA error' "$W/kernel.log" | grep -o 'in function [a-z_0-9]* at [^ ]*' | head -1 | sed 's|at .*/ggml/src/|at |')
      echo "$1${2:+ ${*:2}}: $([ "$r" = 1 ] && echo answered || echo "no answer${e:+, CUDA error $e}")" | tee -a "$t"
    }
    # The telling ones first: whether Q8_0 answers again, and whether ik's grouped expert
    # matmul turned off (mmq-id-size=0: each expert through the plain MMQ kernel) mends Q4_K_M.
    one q8_0
    for c in mmq-id-size=0 fusion=0 graphs=0 mmq-id-size=0,fusion=0,graphs=0; do one q4_k_m -cuda "$c"; done
    for f in q4_k_m q4_k_l mxfp4_moe; do one "$f"; done
    one q4_k_m --n-cpu-moe 99
    cp "$LOG" "$OUT/"
    ;;
  compare)
    # Under setsid, like the tune: ROUNDS rounds of two launches of a 30 GiB model outlast one
    # call (each launch loads it and replays the workload, about 80 s). `follow-compare`
    # waits for it and brings back its folder.
    kit
    synth_wait
    [ -f "$MODEL" ] || qtune synth "$MODEL" --shape "$SHAPE" --ftype "$FTYPE" $MTP_ARG > /dev/null || exit 1
    pgrep -f '[b]allast.py' > /dev/null || start_ballast $((GIB * 1024))
    c=${CMP:-ik-compare}
    echo "emulated card: ${GIB} GiB free of $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" > "$W/$c-card.txt"
    say "compare, ${ROUNDS:-4} rounds: A=llama.cpp $REF B=ik_llama.cpp $CAND ($WORKLOAD)"
    rm -rf "$W/$c" "$W/$c.rc"
    # shellcheck disable=SC2086 # REF and CAND are lists of flags
    setsid bash -c "cd '$W' && date -u +%s > $c.start && qtune compare \
      \"$LL/bin/llama-server -m $MODEL -c $CTX -np 1 $REF\" \
      \"$IK/bin/llama-server -m $MODEL -c $CTX -np 1 $CAND\" --workload $WORKLOAD \
      --rounds ${ROUNDS:-4} --out '$W/$c' > $c.stdout 2> $c.stderr; echo \$? > $c.rc; \
      date -u +%s > $c.end" < /dev/null > /dev/null 2>&1 &
    sleep 20
    tail -5 "$W/$c.stderr"
    ;;
  follow-compare)
    c=${CMP:-ik-compare}
    wait_for "$W/$c.rc"
    tail -c 5000 "$W/$c.stderr" | cut -c1-200
    if [ -f "$W/$c.rc" ]; then
      echo "compare exit $(cat "$W/$c.rc") after $(( $(cat "$W/$c.end") - $(cat "$W/$c.start") )) s"
      cp "$W/$c-card.txt" "$W/$c/card.txt" 2> /dev/null
      tar -C "$W" -cJf "$OUT/$c.tar.xz" --exclude='*.lock' "$c" "$c.stderr" "$c.stdout" 2> /dev/null
      ls -la "$OUT"
    else
      echo "compare still running"
    fi
    ;;
  *)
    echo "usage: scripts/gpu-ik.sh build|wait|tune|follow|probe|kernels|compare|follow-compare" >&2
    exit 2
    ;;
esac
