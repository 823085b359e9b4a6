#!/usr/bin/env bash
# The GPU proof: run on the GPU machine from the repo root, one command per call:
#
#   scripts/gpu-proof.sh CASE...
#
# It needs, carried in .gpu/ (gitignored): the qtune release binary (.gpu/qtune or .gpu/qtune.xz), a CUDA build of
# the pinned llama-server (.gpu/cuda-b11434/cuda-bin.tar.xz.part-*; or nvcc + the source to build
# one) and the tokenizer files (.gpu/vocab/ggml-vocab-*.gguf.xz). Everything it produces goes to
# $OUT (default /tmp/qtune-out): one tar.xz per case plus a log.
#
# Cases:
#   hw            qtune hw, without and with a 16 GiB ballast
#   calib35       memory prediction vs llama-server's report, qwen3.5-35b-a3b q4_k_m
#                 (--n-cpu-moe 0/20/40 x ctx 8k/64k x KV f16/q8_0)
#   calib30       the same for qwen3-30b-a3b q4_k_m
#   heldout       both models at placements, contexts and ubatch sizes the prediction was not fitted on
#   tune35-16     qwen3.5-35b-a3b on an emulated 16 GiB card (sweep35-16, depth35-16 after it)
#   tune35-24     the same on 24 GiB (sweep35-24 after it)
#   tune30-16     qwen3-30b-a3b on 16 GiB (sweep30-16, depth30-16 after it)
#   plan35        qtune plan on 16 GiB starting from the 24 GiB profile, then the plan launched
#   work35-16, work35-24, work30-16, work30-24
#                 the workload objective: tune for $WORKLOAD (chat), then qtune compare
#                 --workload of A, B and each built-in workload's pick ($ROUNDS rounds;
#                 PICKS_FOR=long-doc,...: only those workloads' picks)
#   proof35-16, proof35-24, proof30-16, proof30-24
#                 issue 13's proof: plan (predicted speeds written first), tune (default space),
#                 then qtune compare of the winner vs the default vs --fit-target 512
#                 (proofNN-GG-tune: the plans and the tune only)
#   again30-16, again30-24
#                 qtune compare: plain default vs --fit-target 512 vs run 4's committed winner
#                 (docs/evidence/gpu-h100-run4/proof30-NN/results.json), on another lease (issue 12)
#   run7-30-16    qtune compare: A, B and run 7's 30B 16 GiB recommendation (issue 14)
#   trade30-16    qtune compare: A, B, run 4's 30B 16 GiB winner (ub 512) and run 5's raced
#                 candidate (ub 2048, one block more on the CPU)
#   session35-16  issue 41: qtune compare --workload agent-session, the plain default vs
#                 --fit-target 512 on the 35B at 16 GiB (CTX, default 8192; ROUNDS)
#   sessiontune35-16  issue 41: qtune tune --workload agent-session on the 35B at 16 GiB (CTX,
#                 BUDGET minutes), then its pick vs the plain default vs --fit-target 512
#                 (ROUNDS, default 3) when it is not a baseline
#   remeasure35-16, remeasure35-24, remeasure30-16
#                 qtune compare: plain default vs --fit-target 512 vs the committed winner ($ROUNDS rounds)
#   Two GPUs (issue 15; the nvidia-h200-x2 machine, one ballast per GPU):
#   hw2           qtune hw and qtune plan (Q8_0 Qwen3.5-35B-A3B) on emulated 24 + 16 GiB cards
#   multi35-24-16 Qwen3.5-35B-A3B Q8_0 on emulated 24 + 16 GiB: tune (default space), then its
#                 winner vs the plain default vs --fit-target 512,512 in qtune compare ($ROUNDS rounds)
#   multi30-16-12 the same for Qwen3-30B-A3B Q4_K_M on emulated 16 + 12 GiB
#   multi35-16-12 Qwen3.5-35B-A3B Q8_0 on emulated 16 + 12 GiB: ~8 GiB of experts must go to the
#                 CPU (the issue's two cases both fit whole on their cards, 2026-11-23)
#                 (TUNE_ONLY=1: the tune alone; CASE-compare: the re-measurement alone, in a
#                 later session, with FROM=DIR holding the tune's results.json)
#   resume-proofNN-GG  resume a proof tune cut off by a lease's end (.gpu/resume/proofNN-GG)
#   planned30-16, planned35-16
#                 qtune compare: A, B and the config run 6's plan proposed for the 16 GiB card
#                 (docs/evidence/gpu-h100-run6/proofNN-16/*-tune-plan.json)
#   levers35-16   issue 42's cost side on an emulated 16 GiB card: the speculative verify batch of
#                 k = 1..8 tokens at depth 2k and 24k, and 4 streams at 24k depth with -np 1/2/4
#                 (scripts/levers-cost.py; ROUNDS, SLOT_ROUNDS, NPS)
#   types35A, types35B  issue 46: generation of Qwen3.5-35B-A3B in Q4_K_M against MXFP4_MOE (A)
#                 and Q4_K_L (B): llama-bench tg128, experts all on the GPU, 20 of 40 and all 40
#                 blocks' experts on the CPU, -t 16, $ROUNDS interleaved rounds of -r 3 (the
#                 seeds' 5080 rows miss there; is it the bytes or the weight types?). B removes
#                 A's MXFP4 file first (the disk holds two 35B files)
#   tensor35-24-16, tensor30-16-12
#                 issue 15's two cases: -sm tensor (tensor parallelism) vs the plain default vs
#                 --fit-target 512,512 in qtune compare ($ROUNDS rounds)
#
# Without a kept build, .gpu/llama-src.tar.xz (the pinned source less docs, models and
# Python, ~8 MB) is built there in about 5 minutes; PRESYNTH="shape ..." writes those models
# meanwhile.
# The device tool carries at most 64 MiB: the tracked tree (~22 MB by run 10, 2026-11-23) plus
# what is carried (the CUDA build ~44 MB stripped, qtune ~2.7 MB, each vocab ~1.3 MB) no longer
# fits in one call. Carry the build in two calls made back to back (the machine stays warm
# 30 s): the first carries parts aa and ab and copies them to /tmp/kept
# (`mkdir -p /tmp/kept && cp .gpu/cuda-b11434/*part-a[ab] /tmp/kept/`); the second carries
# part ac, qtune and the vocabs and runs this script, which takes the missing parts from
# /tmp/kept (KEPT=DIR elsewhere).

# A card of N GiB is emulated by a ballast process that allocates all but N GiB of the GPU
# (python3 + torch), so llama-server, --fit and qtune see N GiB free and OOM happens for real.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/qtune-out}
W=${QTUNE_GPU_WORK:-/tmp/qtune-gpu}
mkdir -p "$OUT" "$W"
LOG="$OUT/gpu-proof.log"
exec > >(tee -a "$LOG") 2>&1
say() { echo "== $(date +%T) $*"; }

Q="$ROOT/.gpu/qtune"
if [ -f "$ROOT/.gpu/qtune.xz" ]; then
  # Carried compressed (the carry is limited to 64 MiB with the CUDA build).
  xz -dc "$ROOT/.gpu/qtune.xz" > "$W/qtune" && Q="$W/qtune"
fi
chmod +x "$Q" 2>/dev/null || true
export QTUNE_CACHE_DIR="$W/cache"
export QTUNE_VOCAB_DIR="$W/vocab"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
SPACE="$ROOT/search-spaces/gpu-proof.yaml"

setup() {
  # The tokenizers first: the models of $PRESYNTH are written while the server builds.
  mkdir -p "$QTUNE_VOCAB_DIR"
  for f in .gpu/vocab/*.xz; do
    [ -f "$QTUNE_VOCAB_DIR/$(basename "${f%.xz}")" ] || xz -dc "$f" > "$QTUNE_VOCAB_DIR/$(basename "${f%.xz}")"
  done
  if [ ! -x "$W/bin/llama-server" ]; then
    # Parts of the kept build carried by an earlier call of the same lease (see the header).
    if ls "${KEPT:-/tmp/kept}"/cuda-bin.tar.xz.part-* >/dev/null 2>&1; then
      mkdir -p .gpu/cuda-b11434 && cp -n "${KEPT:-/tmp/kept}"/cuda-bin.tar.xz.part-* .gpu/cuda-b11434/
    fi
    if ls .gpu/cuda-b11434/cuda-bin.tar.xz.part-* >/dev/null 2>&1; then
      say "unpacking the kept CUDA llama-server"
      # Its RPATH is the build folder it was made in (/tmp/b/bin): unpack there, link it here.
      mkdir -p /tmp/b && cat .gpu/cuda-b11434/cuda-bin.tar.xz.part-* | tar xJf - -C /tmp/b
      ln -sfn /tmp/b/bin "$W/bin"
    elif [ -f .gpu/llama-src.tar.xz ]; then
      # No kept build, the pinned source carried (the GPU machine has no network for pip):
      # build at /tmp/b (the kept build's RPATH) while the models of $PRESYNTH are written,
      # then keep the stripped build in $OUT, in pieces under 16 MiB, for the next lease.
      say "building the CUDA llama-server from the carried source"
      ( for s in ${PRESYNTH:-}; do model "$s" > /dev/null; done ) &
      local synth=$!
      mkdir -p /tmp/src && tar xJf .gpu/llama-src.tar.xz -C /tmp/src || exit 1
      local cc; cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
      { cmake -S /tmp/src -B /tmp/b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
          -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
          && cmake --build /tmp/b --target llama-server llama-bench -j "$(nproc)"; } > "$OUT/cuda-build.log" 2>&1 \
        || { tail -30 "$OUT/cuda-build.log"; exit 1; }
      strip --strip-unneeded /tmp/b/bin/* 2>/dev/null
      ln -sfn /tmp/b/bin "$W/bin"
      [ "${KEEP_BUILD:-1}" = 1 ] && (cd /tmp/b && tar cf - bin | xz -T0 -6 | split -b 15M - "$OUT/cuda-bin.tar.xz.part-")
      say "built ($(du -sh /tmp/b/bin | cut -f1)); waiting for the models"
      wait "$synth"
    else
      say "building the CUDA llama-server"
      "$Q" server build --cuda || exit 1
      mkdir -p "$W/bin" && cp -a "$QTUNE_CACHE_DIR"/llama.cpp/b11434-cuda/bin/. "$W/bin/"
    fi
  fi
  export QTUNE_LLAMA_SERVER="$W/bin/llama-server"
  export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd "$W/bin/llama-server" | grep "not found" && echo "(libraries missing above)"
  "$Q" server check || exit 1
}

model() { # shape [ftype, default q4_k_m] -> path (synthesized once)
  local ft=${2:-q4_k_m}
  local p="$W/$1-$ft.gguf"
  [ -f "$p" ] || "$Q" synth "$p" --shape "$1" --ftype "$ft" >&2 || exit 1
  echo "$p"
}

# The ballast: allocates all but N MiB of the GPU it sees, says "ready", and sleeps.
BALLAST_PY="$W/ballast.py"
cat > "$BALLAST_PY" <<'PY'
import sys, time, torch
keep = int(sys.argv[1]) << 20
free, total = torch.cuda.mem_get_info()
n = free - keep
x = torch.empty(n, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
free2, _ = torch.cuda.mem_get_info()
print(f"ready ballast={n >> 20} MiB free={free2 >> 20} MiB total={total >> 20} MiB", flush=True)
time.sleep(1e9)
PY

BALLAST_PID=""
ballast() { # leave N GiB free
  ballast_mib $(( $1 * 1024 ))
}
ballast_mib() { # leave N MiB free
  unballast
  python3 -u "$BALLAST_PY" "$1" > "$W/ballast.out" 2>&1 &
  BALLAST_PID=$!
  for _ in $(seq 1 120); do grep -q ready "$W/ballast.out" 2>/dev/null && break; sleep 0.5; done
  say "ballast leaving $1 MiB: $(cat "$W/ballast.out")"
  nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv
}
# Two GPUs: one ballast per GPU, each its own process seeing only its card. PCI bus order is
# the order NVML (qtune hw) numbers the cards in, and qtune's trials and launch scripts use.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
BALLAST_PIDS=""
ballast_gpu() { # device MiB: leave MiB free on that GPU only
  CUDA_VISIBLE_DEVICES=$1 python3 -u "$BALLAST_PY" "$2" > "$W/ballast-gpu$1.out" 2>&1 &
  BALLAST_PIDS="$BALLAST_PIDS $!"
  for _ in $(seq 1 120); do grep -q ready "$W/ballast-gpu$1.out" 2>/dev/null && break; sleep 0.5; done
  say "ballast on GPU $1 leaving $2 MiB: $(cat "$W/ballast-gpu$1.out")"
}
ballast2() { # GiB free on GPU 0, GiB free on GPU 1
  unballast
  [ "$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)" -ge 2 ] \
    || { echo "two-GPU case on a box with fewer than two GPUs: use the nvidia-h200-x2 machine"; exit 1; }
  ballast_gpu 0 $(( $1 * 1024 ))
  ballast_gpu 1 $(( $2 * 1024 ))
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv
}
unballast() {
  if [ -n "$BALLAST_PID" ]; then kill "$BALLAST_PID" 2>/dev/null; wait "$BALLAST_PID" 2>/dev/null; BALLAST_PID=""; sleep 1; fi
  if [ -n "$BALLAST_PIDS" ]; then
    for p in $BALLAST_PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    BALLAST_PIDS=""; sleep 1
  fi
}
trap 'unballast; host_load_stop' EXIT

# What the host did during a tune (issue 14: leases whose CPU experts ran 12-19 % slower than
# others at the same measured read bandwidth; recorded to compare leases, not used by qtune):
# every 5 s, the UTC time, /proc/stat's cpu line (user nice system idle iowait irq softirq
# steal, in clock ticks: steal is time the hypervisor gave another guest), the load average and
# the mean CPU clock (MHz). Into FILE until host_load_stop.
host_load_start() { # FILE
  ( while :; do
      printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$(head -1 /proc/stat)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
        "$(awk '/^cpu MHz/ {s += $4; n++} END {if (n) printf "%.0f", s / n}' /proc/cpuinfo)"
      sleep 5
    done ) > "$1" 2>/dev/null &
  HOST_LOAD_PID=$!
}
host_load_stop() {
  if [ -n "${HOST_LOAD_PID:-}" ]; then kill "$HOST_LOAD_PID" 2>/dev/null; wait "$HOST_LOAD_PID" 2>/dev/null; HOST_LOAD_PID=""; fi
}

pack() { # name dir: the run's files, server logs compressed too
  tar -C "$(dirname "$2")" -cJf "$OUT/$1.tar.xz" "$(basename "$2")" && ls -la "$OUT/$1.tar.xz"
}

tune_case() { # name shape gib [extra tune flags]
  local name=$1 shape=$2 gib=$3; shift 3
  local m; m=$(model "$shape")
  local run="$W/runs/$name"
  ballast "$gib"
  say "$name: tune ($GPU_NAME, emulated ${gib} GiB card)"
  local t0=$SECONDS
  "$Q" tune --model "$m" --space "$SPACE" --target-vram-headroom 512 --ctx 32768 --out "$run" "$@" > "$W/$name.cmd"
  echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$name.cmd")"
  echo "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" > "$run/card.txt"
  pack "$name" "$run"
}

sweep_case() { # name: sweep --n-cpu-moe around the winner (n-2 .. n+4), then coarse to the end
  local run="$W/runs/$1"
  local n; n=$(python3 -c "import json;w=json.load(open('$run/results.json'))['winner'];print(w['config'].get('n_cpu_moe') or 0)" 2>/dev/null || echo 0)
  local lo=$(( n > 2 ? n - 2 : 0 ))
  local blocks; blocks=$(python3 -c "import json;print(json.load(open('$run/results.json'))['model']['n_blocks'])")
  say "$1: sweep around --n-cpu-moe $n"
  "$Q" sweep "$run" --from "$lo" --to $(( n + 4 ))
  pack "$1" "$run"
  "$Q" sweep "$run" --from $(( n + 10 )) --to "$blocks" --step 10
  pack "$1" "$run"
}

oomrt_case() { # name: the winner with free VRAM just under its measured peak (OOM on a request?)
  local run="$W/runs/$1"
  [ -f "$run/results.json" ] || { echo "$1: no run here to squeeze"; return; }
  read -r n peak < <(python3 -c "import json;r=json.load(open('$run/results.json'));w=r['winner'];print(w['config'].get('n_cpu_moe') or 0, w['peak_vram_mib'])")
  for d in 64 192; do
    ballast_mib $(( peak - d ))
    say "$1: --n-cpu-moe $n with $(( peak - d )) MiB free (its peak was $peak MiB)"
    "$Q" sweep "$run" --from "$n" --to "$n"
  done
  unballast
  pack "$1" "$run"
}

compare_case() { # dir card-note fit-target command...: qtune compare of the plain default (A),
  # --fit-target (B) and the commands, $ROUNDS interleaved ABBA rounds, for the model in $m
  local dir=$1 note=$2 ft=$3; shift 3
  "$Q" compare --server "$QTUNE_LLAMA_SERVER" "llama-server -m $m -c 32768 -np 1" "llama-server -m $m -c 32768 -np 1 --fit-target $ft" \
    "$@" --rounds "${ROUNDS:-6}" \
    --prompt-tokens 2048 --gen-tokens 128 --repetitions 2 --out "$dir"
  echo "$note" > "$dir/card.txt"
}

argv_of() { # file.json model key...: the argv under those keys as a shell line, the model path made this machine's
  python3 -c "import gzip,json,os,shlex,sys
p=sys.argv[1]
a=json.load(gzip.open(p+'.gz','rt') if not os.path.exists(p) and os.path.exists(p+'.gz') else open(p))
for k in sys.argv[3:]: a=a[k]
a[a.index('-m')+1]=sys.argv[2];print(shlex.join(a))" "$@"
}
winner_of() { # results.json model: the tune's winner
  argv_of "$1" "$2" winner command
}

depth_case() { # two interleaved rounds of 0, 8k and 31k tokens already in context
  say "$1: generation at 0, 8k and 31k tokens of context"
  "$Q" depth "$W/runs/$1" --depths 0,8192,31744,0,8192,31744
  pack "$1" "$W/runs/$1"
}

setup
for c in "$@"; do
  case "$c" in
    hw)
      "$Q" hw --json > "$OUT/hw-full.json"; "$Q" hw
      ballast 16; "$Q" hw --json > "$OUT/hw-16g.json"; "$Q" hw; unballast ;;
    calib35)
      m=$(model qwen3.5-35b-a3b); "$Q" inspect "$m" --ctx 32768 --kv q8_0 > "$OUT/inspect35.txt"
      "$Q" calibrate "$m" --n-cpu-moe 0,20,40 --ctx 8192,65536 --kv f16,q8_0 --out "$W/runs/calib35" > /dev/null
      pack calib35 "$W/runs/calib35" ;;
    heldout)
      # Values the memory model was not fitted on: other contexts, placements and ubatch sizes.
      m=$(model qwen3.5-35b-a3b)
      "$Q" calibrate "$m" --n-cpu-moe 5,30 --ctx 16384 --kv q8_0,f16 --ubatch 1024,3072 --out "$W/runs/heldout35" > /dev/null
      pack heldout35 "$W/runs/heldout35"
      m=$(model qwen3-30b-a3b)
      "$Q" calibrate "$m" --n-cpu-moe 6,36 --ctx 16384 --kv q8_0 --ubatch 1024,3072 --out "$W/runs/heldout30" > /dev/null
      pack heldout30 "$W/runs/heldout30" ;;
    calib30)
      m=$(model qwen3-30b-a3b); "$Q" inspect "$m" --ctx 32768 --kv q8_0 > "$OUT/inspect30.txt"
      "$Q" calibrate "$m" --n-cpu-moe 0,24,48 --ctx 8192,65536 --kv f16,q8_0 --out "$W/runs/calib30" > /dev/null
      pack calib30 "$W/runs/calib30" ;;
    tune35-16) tune_case q35-16g qwen3.5-35b-a3b 16 ;;
    sweep35-16) ballast 16; sweep_case q35-16g ;;
    depth35-16) ballast 16; depth_case q35-16g ;;
    tune35-24) tune_case q35-24g qwen3.5-35b-a3b 24 ;;
    sweep35-24) ballast 24; sweep_case q35-24g ;;
    tune30-16) tune_case q30-16g qwen3-30b-a3b 16 ;;
    sweep30-16) ballast 16; sweep_case q30-16g ;;
    depth30-16) ballast 16; depth_case q30-16g ;;
    oomrt30-16) oomrt_case q30-16g ;;
    firstreq35)
      # Run 3's trial 22 again: --n-cpu-moe 11 with ubatch 2048 loads on 16 GiB, then the first
      # request needs more than is left. Seeds the run directory from the committed evidence.
      m=$(model qwen3.5-35b-a3b); run="$W/runs/q35-16g-firstreq"
      mkdir -p "$run" && gunzip -c docs/evidence/gpu-h200-qwen3.5-35b-a3b-16gib/run.json.gz > "$run/run.json" && gunzip -c docs/evidence/gpu-h200-qwen3.5-35b-a3b-16gib/results.json.gz > "$run/results.json"
      ballast 16; "$Q" sweep "$run" --from 11 --to 11; "$Q" sweep "$run" --from 11 --to 11; unballast
      pack q35-16g-firstreq "$run" ;;
    confirm35-16)
      SPACE="$ROOT/search-spaces/gpu-proof-confirm4.yaml" tune_case q35-16g-c4 qwen3.5-35b-a3b 16; unballast ;;
    oomrt35-16) oomrt_case q35-16g ;;
    plan35)
      m=$(model qwen3.5-35b-a3b)
      "$Q" profile export "$W/runs/q35-24g" --out "$W/q35-24g.yaml"
      ballast 16
      "$Q" plan --model "$m" --profile "$W/q35-24g.yaml" --ctx 32768 --target-vram-headroom 512 > "$W/plan35.cmd"
      cat "$W/plan35.cmd"
      # Launch exactly the planned command (on another port) and serve one request.
      cmd=$(tail -1 "$W/plan35.cmd" | sed 's/--port 8080/--port 18080/')
      say "plan35: launching the plan: $cmd"
      (eval "exec $cmd -lv 4" > "$W/plan35-server.log" 2>&1) &
      sp=$!
      for _ in $(seq 1 240); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; kill -0 $sp 2>/dev/null || break; sleep 0.5; done
      curl -s -m 120 http://127.0.0.1:18080/completion -d '{"prompt":"Hello, tell me a story about a GPU.","n_predict":64,"ignore_eos":true}' \
        | python3 -c "import json,sys;t=json.load(sys.stdin)['timings'];print('plan35 served: predicted_n',t['predicted_n'],'tg',round(t['predicted_per_second'],1),'pp',round(t['prompt_per_second'],1))" \
        || { echo "plan35: the planned config did not serve"; tail -20 "$W/plan35-server.log"; }
      nvidia-smi --query-gpu=memory.used,memory.free --format=csv
      kill $sp 2>/dev/null; wait $sp 2>/dev/null
      grep -E "out of memory|failed to allocate" "$W/plan35-server.log" | head -3
      cp "$W/plan35.cmd" "$OUT/plan35.txt"
      unballast ;;
    session35-16)
      # Issue 41: the built-in agent session (real text, the model's chat template, replayed
      # in every launch) on the 35B at an emulated 16 GiB card: the plain default against
      # --fit-target 512, ${ROUNDS:-6} interleaved rounds, context ${CTX:-8192}.
      m=$(model qwen3.5-35b-a3b); ballast 16
      say "$c: qtune compare --workload agent-session ($GPU_NAME, 16 GiB, ctx ${CTX:-8192}, ${ROUNDS:-6} rounds)"
      QTUNE_DATA_DIR="$W/data" "$Q" compare --server "$QTUNE_LLAMA_SERVER" \
        "llama-server -m $m -c ${CTX:-8192} -np 1" "llama-server -m $m -c ${CTX:-8192} -np 1 --fit-target 512" \
        --workload agent-session --rounds "${ROUNDS:-6}" --out "$W/runs/$c"
      echo "emulated card: 16 GiB free of ${GPU_NAME}, $(date -u +%F)" > "$W/runs/$c/card.txt"
      unballast; pack "$c" "$W/runs/$c" ;;
    sessiontune35-16)
      # Issue 41: the tune on the built-in agent session (35B, emulated 16 GiB card, context
      # ${CTX:-8192}, a budget of ${BUDGET:-9} minutes), then its pick, when it is not a baseline,
      # against the plain default and --fit-target 512 in ${ROUNDS:-3} interleaved rounds
      # (session35-16 measured those two alone: pool their rows over leases).
      m=$(model qwen3.5-35b-a3b); ballast 16; run="$W/runs/$c"
      card="emulated card: 16 GiB free of ${GPU_NAME}, $(date -u +%F)"
      say "$c: tune --workload agent-session ($card, ctx ${CTX:-8192}, ${BUDGET:-9} min)"
      t0=$SECONDS
      QTUNE_DATA_DIR="$W/data" "$Q" tune --model "$m" --space default --workload agent-session \
        --target-vram-headroom 512 --ctx "${CTX:-8192}" --budget-minutes "${BUDGET:-9}" \
        --server "$QTUNE_LLAMA_SERVER" --out "$run" > "$W/$c.cmd"
      echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$c.cmd")"
      echo "$card" > "$run/card.txt"
      pick=$(python3 - "$run/results.json" "$m" <<'PY'
import json, shlex, sys
r = json.load(open(sys.argv[1]))
v = r.get("verdict") or {}
argv = (v.get("recommended") or {}).get("command")
if v.get("status") != "kept" and argv:
    a = [sys.argv[2] if x == r["model_path"] else x for x in argv]
    for opt in ("--host", "--port"):
        if opt in a:
            i = a.index(opt); del a[i:i + 2]
    print(" ".join(shlex.quote(x) for x in a))
PY
)
      if [ -n "$pick" ] && [ -z "${TUNE_ONLY:-}" ]; then
        say "$c: its pick against A and B, ${ROUNDS:-3} rounds: $pick"
        QTUNE_DATA_DIR="$W/data" "$Q" compare --server "$QTUNE_LLAMA_SERVER" \
          "llama-server -m $m -c ${CTX:-8192} -np 1" "llama-server -m $m -c ${CTX:-8192} -np 1 --fit-target 512" \
          "$pick" --workload agent-session --rounds "${ROUNDS:-3}" --out "$W/runs/$c-compare"
        echo "$card" > "$W/runs/$c-compare/card.txt"
        pack "$c-compare" "$W/runs/$c-compare"
      else
        say "$c: the tune kept a baseline (or TUNE_ONLY): nothing more to race"
      fi
      unballast; pack "$c" "$run" ;;
    remeasure35-16 | remeasure35-24 | remeasure30-16)
      # Re-measure a README claim with qtune compare: the plain default, --fit-target 512 and the
      # committed winner, in interleaved ABBA rounds, on the emulated card.
      case "$c" in
        remeasure35-16) shape=qwen3.5-35b-a3b gib=16 flags="-ngl 999 --n-cpu-moe 13 -b 2048 -ub 2048 -ctk q8_0 -ctv q8_0 -fa on -t 16" ;;
        remeasure35-24) shape=qwen3.5-35b-a3b gib=24 flags="-ngl 999 --n-cpu-moe 0 -b 4096 -ub 4096 -ctk q8_0 -ctv q8_0 -fa on -t 16" ;;
        remeasure30-16) shape=qwen3-30b-a3b gib=16 flags="-ngl 999 --n-cpu-moe 13 -b 2048 -ub 512 -ctk q8_0 -ctv q8_0 -fa on -t 16" ;;
      esac
      m=$(model "$shape"); ballast "$gib"
      say "$c: qtune compare on an emulated ${gib} GiB card ($GPU_NAME), ${ROUNDS:-6} rounds"
      compare_case "$W/runs/$c" "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" 512 \
        "llama-server -m $m -c 32768 -np 1 $flags"
      unballast; pack "$c" "$W/runs/$c" ;;
    again30-16 | again30-24)
      # Issue 12: the README's headline recommendation (run 4's, committed under
      # docs/evidence/gpu-h100-run4/) re-measured unchanged on another lease of the machine, against the
      # same two baselines, ${ROUNDS:-6} interleaved rounds.
      k=${c#again}; gib=${k#*-}; m=$(model qwen3-30b-a3b); ballast "$gib"
      winner=$(winner_of "docs/evidence/gpu-h100-run4/proof$k/results.json" "$m")
      say "$c: re-measuring run 4's recommendation (${ROUNDS:-6} rounds): $winner"
      compare_case "$W/runs/$c-compare" "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" 512 \
        "$winner"
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    run7-30-16)
      # Issue 14: run 7's 30B 16 GiB recommendation (the speed model's pick, which the tune
      # launched third and raced) re-measured on another lease against the same two baselines,
      # ${ROUNDS:-6} interleaved rounds.
      m=$(model qwen3-30b-a3b); ballast 16
      winner=$(winner_of docs/evidence/gpu-h100-run7/proof30-16/results.json "$m")
      say "$c: re-measuring run 7's recommendation (${ROUNDS:-6} rounds): $winner"
      compare_case "$W/runs/$c-compare" "emulated card: 16 GiB free of ${GPU_NAME}, $(date -u +%F)" 512 \
        "$winner"
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    trade30-16)
      # Issue 13: the 30B on 16 GiB, run 4's recommendation (ub 512, blocks 36-47 + 35's down on
      # the CPU) against run 5's raced candidate (ub 2048, one block more on the CPU: blocks
      # 35-47 + 34's gate and down) and the two baselines, in one interleaved compare: what
      # generation the ubatch's prompt gain costs on that card.
      m=$(model qwen3-30b-a3b); ballast 16
      run4=$(winner_of docs/evidence/gpu-h100-run4/proof30-16/results.json "$m")
      run5="llama-server -m $m -c 32768 -np 1 -ngl 999 -ot 'blk\.(3[5-9]|4[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU' -ot 'blk\.34\.ffn_(gate|down)_(ch|)exps=CPU' -t 16 -b 2048 -ub 2048 -ctk q8_0 -ctv q8_0 -fa on --fit off --load-mode none"
      say "$c: A, B, run 4's winner, run 5's candidate (${ROUNDS:-6} rounds)"
      compare_case "$W/runs/$c-compare" "emulated card: 16 GiB free of ${GPU_NAME}, $(date -u +%F)" 512 \
        "$run4" "$run5"
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    newtune35-16 | newtune35-24)
      # The tuner with paired racing, load mode, placements and fit's candidate (default space),
      # then its winner re-measured by qtune compare against the default and --fit-target 512.
      gib=${c#newtune35-}; m=$(model qwen3.5-35b-a3b); run="$W/runs/$c"; ballast "$gib"
      say "$c: tune, default space ($GPU_NAME, emulated ${gib} GiB card)"
      t0=$SECONDS
      "$Q" tune --model "$m" --space default --target-vram-headroom 512 --ctx 32768 --out "$run" > "$W/$c.cmd"
      echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$c.cmd")"
      echo "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" > "$run/card.txt"
      pack "$c" "$run"
      say "$c: re-measuring the winner (${ROUNDS:-6} rounds)"
      compare_case "$W/runs/$c-compare" "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" 512 \
        "$(tail -1 "$W/$c.cmd")"
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    work35-16 | work35-24 | work30-16 | work30-24 | work35-16-compare | work35-24-compare | work30-16-compare | work30-24-compare)
      # The workload objective: tune for $WORKLOAD (default chat: time per request against
      # the better of the default and --fit-target 512; every built-in workload is measured in
      # each launch), then qtune compare --workload: the default (A), --fit-target 512 (B) and
      # up to $MAX_PICKS (2) built-in workloads' picks that are not a baseline, ${ROUNDS:-8}
      # ABBA rounds of $REPS (1) requests of every workload in each launch. (TUNE_ONLY=1: the tune alone;
      # CASE-compare: the re-measurement alone, of the tune whose results.json is in FROM=DIR.)
      base=${c%-compare}; k=${base#work}; gib=${k#*-}
      case "$k" in 35-*) shape=qwen3.5-35b-a3b ;; *) shape=qwen3-30b-a3b ;; esac
      m=$(model "$shape"); run="$W/runs/$base"; ballast "$gib"
      card="emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)"
      if [ "$c" = "$base" ]; then
        say "$c: tune for ${WORKLOAD:-chat} ($card)"
        t0=$SECONDS
        "$Q" tune --model "$m" --space default --workload "${WORKLOAD:-chat}" --target-vram-headroom 512 \
          --ctx 32768 --out "$run" > "$W/$c.cmd"
        echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$c.cmd")"
        echo "$card" > "$run/card.txt"
        pack "$c" "$run"
      else
        mkdir -p "$run" && cp "${FROM:?FROM=DIR with the tune results.json}/results.json" "$run/"
      fi
      if [ -z "${TUNE_ONLY:-}" ]; then
        mapfile -t picks < <(python3 - "$run/results.json" "$m" "${MAX_PICKS:-2}" <<'PY'
import json, shlex, sys
r = json.load(open(sys.argv[1]))
base = [t["config"] for t in r["trials"] if t["role"] in ("baseline", "second-baseline")]
model = r["model_path"]
seen = []
import os
only = [w for w in os.environ.get("PICKS_FOR", "").split(",") if w]
for p in r.get("workload_picks", []):
    if p["config"] in base or not p.get("command") or (only and p["workload"] not in only):
        continue
    # The model as it is on this machine, not where the tune ran.
    argv = [sys.argv[2] if a == model else a for a in p["command"]]
    line = " ".join(shlex.quote(a) for a in argv)
    if line not in seen:
        seen.append(line)
seen = seen[: int(sys.argv[3])]
# ALSO=$'cmd\ncmd': commands of earlier leases (MODEL stands for the model's path), so their rows
# can be pooled over leases; one this tune picked too is not measured twice.
def flags(line):
    a = shlex.split(line)[1:]
    for opt in ("--host", "--port"):
        if opt in a:
            i = a.index(opt)
            del a[i:i + 2]
    return a
for extra in os.environ.get("ALSO", "").split("\n"):
    extra = extra.strip().replace("MODEL", sys.argv[2])
    if extra and all(flags(extra) != flags(l) for l in seen):
        seen.append(extra)
for line in seen:
    print(line)
PY
)
        say "$c: re-measuring ${#picks[@]} pick(s) against A and B (${ROUNDS:-8} rounds)"
        printf '  %s\n' "${picks[@]}"
        "$Q" compare --server "$QTUNE_LLAMA_SERVER" "llama-server -m $m -c 32768 -np 1" \
          "llama-server -m $m -c 32768 -np 1 --fit-target 512" "${picks[@]}" \
          --rounds "${ROUNDS:-8}" --repetitions "${REPS:-1}" --workload "${WORKLOAD:-chat}" \
          --out "$W/runs/$base-compare"
        echo "$card" > "$W/runs/$base-compare/card.txt"
        pack "$base-compare" "$W/runs/$base-compare"
      fi
      unballast ;;
    proof35-16 | proof35-24 | proof30-16 | proof30-24 | proof35-16-tune | proof35-24-tune | proof30-16-tune | proof30-24-tune)
      # Issue 13 (and 12, 14): predict, tune with the default space, re-measure.
      # 1. `qtune plan` writes its predicted speeds down before anything is launched: from the
      #    model alone (run where no profile is found), and from the other card's profile when
      #    that card's proof already ran in this session.
      # 2. `qtune tune --space default --target-vram-headroom 512`.
      # 3. `qtune compare`: the plain default, --fit-target 512 and the tune's winner, ${ROUNDS:-6}
      #    interleaved rounds.
      # (CASE-tune: the plans and the tune, no re-measurement: issue 14's predictions vs the tune.)
      k=${c#proof}; k=${k%-tune}; gib=${k#*-}
      case "$k" in 35-*) shape=qwen3.5-35b-a3b ;; *) shape=qwen3-30b-a3b ;; esac
      other=$([ "$gib" = 16 ] && echo 24 || echo 16)
      m=$(model "$shape"); run="$W/runs/proof$k"; ballast "$gib"
      mkdir -p "$W/noprofile"
      say "$c: plan before the tune ($GPU_NAME, emulated ${gib} GiB card)"
      (cd "$W/noprofile" && "$Q" plan --model "$m" --ctx 32768 --target-vram-headroom 512 --no-profile --json) > "$W/$c-plan.json" 2> "$W/$c-plan.txt"
      if [ -f "$W/runs/proof${k%-*}-$other/results.json" ]; then
        "$Q" profile export "$W/runs/proof${k%-*}-$other" --out "$W/$c-other.yaml" \
          && "$Q" plan --model "$m" --profile "$W/$c-other.yaml" --ctx 32768 --target-vram-headroom 512 --json > "$W/$c-plan-from-$other.json" 2> "$W/$c-plan-from-$other.txt"
      fi
      date -u +"plans written %FT%TZ, before the tune" >> "$W/$c-plan.txt"
      cat "$W/$c"-plan*.txt
      say "$c: tune, default space"
      t0=$SECONDS
      host_load_start "$W/$c-host-load.tsv"
      "$Q" tune --model "$m" --space default --target-vram-headroom 512 --ctx 32768 --out "$run" > "$W/$c.cmd"
      echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$c.cmd")"
      host_load_stop
      echo "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" > "$run/card.txt"
      cp "$W/$c"-plan* "$W/$c-host-load.tsv" "$run/" 2>/dev/null
      pack "$c" "$run"
      case "$c" in *-tune) unballast; continue ;; esac
      say "$c: re-measuring the winner (${ROUNDS:-6} rounds)"
      compare_case "$W/runs/$c-compare" "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" 512 \
        "$(tail -1 "$W/$c.cmd")"
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    hw2)
      ballast2 24 16
      "$Q" hw --json > "$OUT/hw2-24-16.json"; "$Q" hw
      m=$(model qwen3.5-35b-a3b q8_0)
      "$Q" plan --model "$m" --ctx 32768 --target-vram-headroom 512 > "$OUT/plan2-35-24-16.txt" 2>&1
      cat "$OUT/plan2-35-24-16.txt"
      unballast ;;
    multi35-24-16 | multi30-16-12 | multi35-16-12 | multi35-24-16-compare | multi30-16-12-compare | multi35-16-12-compare)
      # Issue 15: tune on two emulated cards, then the winner against the plain default and
      # --fit-target 512,512 (fit's multi-GPU placement) in interleaved ABBA rounds. The
      # -compare cases re-measure only (a later session: the winner comes from $W/CASE.cmd,
      # else from FROM=DIR/results.json of a tune brought back, e.g. under reports/).
      base=${c%-compare}
      case "$base" in
        multi35-24-16) shape=qwen3.5-35b-a3b ft=q8_0 g0=24 g1=16 ;;
        multi30-16-12) shape=qwen3-30b-a3b ft=q4_k_m g0=16 g1=12 ;;
        multi35-16-12) shape=qwen3.5-35b-a3b ft=q8_0 g0=16 g1=12 ;;
      esac
      m=$(model "$shape" "$ft"); run="$W/runs/$base"; ballast2 "$g0" "$g1"
      card="emulated cards: GPU 0 ${g0} GiB + GPU 1 ${g1} GiB free of ${GPU_NAME} x2, $(date -u +%F)"
      if [ "$c" = "$base" ]; then
        say "$c: tune, default space ($card)"
        t0=$SECONDS
        "$Q" tune --model "$m" --space default --target-vram-headroom 512 --ctx 32768 --out "$run" > "$W/$c.cmd"
        echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$c.cmd")"
        echo "$card" > "$run/card.txt"
        python3 - "$run/results.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
cards = r.get("gpu_budgets", [])
print("cards:", ", ".join(f"CUDA{g['index']} budget {g['budget_mib']} MiB" for g in cards))
launched = [t for t in r["trials"] if t["kind"] != "skipped"]
print(f"launches: {len(launched)} (issue 15: at most 25)")
over = [(t["id"], i, p) for t in launched if t["kind"] == "ok"
        for i, p in enumerate(t.get("peak_vram_mib", [])) if i < len(cards) and p > cards[i]["budget_mib"]]
print("ok trials over a card's budget:", over or "none")
w = r.get("winner")
print("winner:", w["config"] if w else None)
PY
        pack "$c" "$run"
      fi
      if [ -n "${TUNE_ONLY:-}" ]; then unballast; continue; fi
      winner=$(tail -1 "$W/$base.cmd" 2>/dev/null)
      if [ -z "$winner" ] && [ -n "${FROM:-}" ]; then
        # The winner's argv as the tune recorded it, the model path made this machine's.
        winner=$(winner_of "$FROM/results.json" "$m")
      fi
      [ -n "$winner" ] || { echo "$c: no winner to re-measure (run $base first, or give FROM=DIR)"; unballast; continue; }
      say "$c: re-measuring the winner (${ROUNDS:-6} rounds): $winner"
      compare_case "$W/runs/$base-compare" "$card" 512,512 "$winner"
      unballast; pack "$base-compare" "$W/runs/$base-compare" ;;
    planned30-16 | planned35-16)
      # Issue 14: the config run 6's plan proposed (written before its tune, which kept the
      # default) against the plain default and --fit-target 512, in one interleaved compare on
      # another lease: the plan's config measured, and whether its generation ties the default.
      k=${c#planned}
      case "$k" in 35-*) shape=qwen3.5-35b-a3b ;; *) shape=qwen3-30b-a3b ;; esac
      m=$(model "$shape"); ballast 16
      planned=$(argv_of "docs/evidence/gpu-h100-run6/proof$k/proof$k-tune-plan.json" "$m" command)
      say "$c: A, B and run 6's planned config (${ROUNDS:-6} rounds): $planned"
      compare_case "$W/runs/$c-compare" "emulated card: 16 GiB free of ${GPU_NAME}, $(date -u +%F)" 512 "$planned"
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    tensor35-24-16 | tensor30-16-12)
      # Issue 15's two cases (the whole model fits on the two cards): llama.cpp's tensor
      # parallelism (-sm tensor: weights and KV split over both GPUs, f16 KV, fit off, layers
      # split by the cards' budgets with -ts) against the plain default (pipelined layer split)
      # and --fit-target 512,512, in one interleaved compare (${ROUNDS:-6} rounds).
      case "$c" in
        tensor35-24-16) shape=qwen3.5-35b-a3b ft=q8_0 g0=24 g1=16 ts=60,40 ;;
        tensor30-16-12) shape=qwen3-30b-a3b ft=q4_k_m g0=16 g1=12 ts=57,43 ;;
      esac
      m=$(model "$shape" "$ft"); ballast2 "$g0" "$g1"
      card="emulated cards: GPU 0 ${g0} GiB + GPU 1 ${g1} GiB free of ${GPU_NAME} x2, $(date -u +%F)"
      tp="llama-server -m $m -c 32768 -np 1 -ngl 999 -sm tensor -ts $ts -fa on --fit off"
      say "$c: $tp (${ROUNDS:-6} rounds)"
      compare_case "$W/runs/$c-compare" "$card" 512,512 "$tp"
      grep -h -i -E "nccl|tensor|out of memory" "$W/runs/$c-compare"/logs/*.log 2>/dev/null | sort | uniq -c | head -8
      unballast; pack "$c-compare" "$W/runs/$c-compare" ;;
    levers*)
      # Issue 42's cost side: the speculative verify batch and parallel slots, with experts on
      # the CPU as --fit-target 512 places them (levers35-16: the 35B on an emulated 16 GiB
      # card). llama-server started by hand; scripts/levers-cost.py reads its timings.
      k=${c#levers}; gib=${k#*-}
      case "$k" in 35-*) shape=qwen3.5-35b-a3b ;; *) shape=qwen3-30b-a3b ;; esac
      m=$(model "$shape"); dir="$W/runs/$c"; mkdir -p "$dir"; ballast "$gib"
      echo "emulated card: ${gib} GiB free of ${GPU_NAME}, $(date -u +%F)" > "$dir/card.txt"
      serve() { # log-name, then llama-server flags: start on port 18080, wait for /health
        local name=$1; shift
        "$QTUNE_LLAMA_SERVER" -m "$m" --host 127.0.0.1 --port 18080 -lv 4 "$@" > "$dir/$name.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 600); do
          python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18080/health', timeout=2)" 2>/dev/null && break
          kill -0 "$SERVER_PID" 2>/dev/null || { echo "server $name died"; tail -5 "$dir/$name.log"; return 1; }
          sleep 0.5
        done
        echo "$*" > "$dir/$name.flags"
        nvidia-smi --query-gpu=memory.used,memory.free --format=csv,noheader >> "$dir/$name.flags"
      }
      unserve() { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; sleep 2; }
      say "$c: verify batch, -c 32768 -np 1 --fit on --fit-target 512"
      if serve verify -c 32768 -np 1 --fit on --fit-target 512; then
        python3 -u scripts/levers-cost.py verify --port 18080 --depths 2048,24000 \
          --ks 1,2,3,4,5,6,8 --rounds "${ROUNDS:-6}" --out "$dir/verify.json" --note "$c $GPU_NAME"
        unserve
      fi
      for np in ${NPS:-1 2 4}; do
        say "$c: 4 streams at 24k depth, -np $np -kvu -c 131072 --fit-target 512"
        if serve "slots-np$np" -c 131072 -np "$np" -kvu --fit on --fit-target 512; then
          python3 -u scripts/levers-cost.py slots --port 18080 --streams 4 --depth 24000 \
            --new 64 --gen 128 --rounds "${SLOT_ROUNDS:-4}" --out "$dir/slots-np$np.json" --note "$c np=$np $GPU_NAME"
          unserve
        fi
      done
      grep -h -E "CPU_Mapped|CUDA0 model buffer|offloaded|n_cpu_moe|fit" "$dir"/*.log 2>/dev/null | sort | uniq -c | head -12
      unballast; pack "$c" "$dir" ;;
    resume-proof*)
      # A proof tune cut off when a lease ended, resumed on a new lease from its run directory
      # (carried in .gpu/resume/proofNN-GG: journal, checkpoint, run.json; its model is
      # re-synthesized at the same path, and qtune refuses to resume if its header differs).
      k=${c#resume-proof}; gib=${k#*-}
      case "$k" in 35-*) shape=qwen3.5-35b-a3b ;; *) shape=qwen3-30b-a3b ;; esac
      m=$(model "$shape"); run="$W/runs/proof$k"
      mkdir -p "$W/runs" && rm -rf "$run" && cp -a ".gpu/resume/proof$k" "$run" || exit 1
      ballast "$gib"
      say "$c: resuming the tune ($(wc -l < "$run/journal.jsonl") trials journaled)"
      t0=$SECONDS
      "$Q" tune --resume "$run" > "$W/$c.cmd"
      echo "tune exit $? after $((SECONDS - t0)) s; command: $(tail -1 "$W/$c.cmd")"
      echo "emulated card: ${gib} GiB free of ${GPU_NAME}, resumed $(date -u +%F) on a new lease" >> "$run/card.txt"
      unballast; pack "$c" "$run" ;;
    types35A|types35B)
      dir="$W/$c"; mkdir -p "$dir"
      if [ "$c" = types35A ]; then other=mxfp4_moe; else other=q4_k_l; rm -f "$W/qwen3.5-35b-a3b-mxfp4_moe.gguf"; fi
      a=$(model qwen3.5-35b-a3b q4_k_m); b=$(model qwen3.5-35b-a3b "$other")
      ls -la "$a" "$b"; df -h "$W" | tail -1
      for r in $(seq 1 "${ROUNDS:-2}"); do
        for m in "$a" "$b"; do
          for n in 0 20 40; do
            say "$c round $r: $(basename "$m") -ncmoe $n"
            "$W/bin/llama-bench" -m "$m" -ngl 99 -ncmoe "$n" -t 16 -fa 1 -p 0 -n 128 -r 3 -o jsonl \
              >> "$dir/bench.jsonl" 2>> "$dir/bench.err" || tail -5 "$dir/bench.err"
            tail -1 "$dir/bench.jsonl" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(d['model_type'], d.get('n_cpu_moe'), round(d['avg_ts'],2), round(d['stddev_ts'],2))"
          done
        done
      done
      echo "$GPU_NAME, $(nproc) CPUs, $(date -u +%F)" > "$dir/card.txt"
      pack "$c" "$dir" ;;
    *) echo "unknown case $c" ;;
  esac
done
say "done"
ls -la "$OUT"
