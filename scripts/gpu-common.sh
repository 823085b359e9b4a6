# Sourced by scripts/gpu-first-hour.sh, gpu-ik.sh, gpu-rpc.sh and gpu-two.sh (the GPU machine's
# runs), from the repository root: the fresh set-up every run starts from (gpu_run), and the
# ballast that emulates a smaller card.

# A run's start: ROOT (the repository), OUT ($OUT, else /tmp/qtune-out), W (the run's work
# folder: QTUNE_GPU_WORK, else $1), all output also appended to $W/$2 (LOG), and a fresh HOME.
gpu_run() {
  ROOT=$PWD
  OUT=${OUT:-/tmp/qtune-out}
  W=${QTUNE_GPU_WORK:-$1}
  mkdir -p "$OUT" "$W"
  LOG="$W/$2"
  exec > >(tee -a "$LOG") 2>&1
  fresh_home
}

say() { echo "== $(date -u +%T) $*"; }

stamp() { # prefix each line with the UTC time (the phases' times are read off it)
  while IFS= read -r l; do printf '%s %s\n' "$(date -u +%T)" "$l"; done
}

# Every QTUNE_* variable unset and a fresh HOME under $W: nothing of a developer's set-up is
# used. The release binary goes where `cargo install` puts it.
fresh_home() {
  while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\(QTUNE_[A-Za-z0-9_]*\)=.*/\1/p')
  unset XDG_CACHE_HOME XDG_DATA_HOME
  export HOME="$W/home"
  export PATH="$HOME/.cargo/bin:$PATH"
  export CUDA_DEVICE_ORDER=PCI_BUS_ID
}

# The ballast: a process holding all but $1 MiB of the GPU (of GPU $2 where given), so qtune,
# --fit and llama-server see that much free. It says "ready", then sleeps; its output is in
# $W/ballast.out ($W/ballast$2.out).
start_ballast() {
  local keep=$1 gpu=${2:-} out="$W/ballast${2:-}.out"
  cat > "$W/ballast.py" <<'PY'
import sys, time, torch
keep = int(sys.argv[1]) << 20
free, total = torch.cuda.mem_get_info()
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print(f"ready free={torch.cuda.mem_get_info()[0] >> 20} MiB", flush=True)
time.sleep(1e9)
PY
  if [ -n "$gpu" ]; then
    CUDA_VISIBLE_DEVICES=$gpu setsid python3 -u "$W/ballast.py" "$keep" > "$out" 2>&1 < /dev/null &
  else
    setsid python3 -u "$W/ballast.py" "$keep" > "$out" 2>&1 < /dev/null &
  fi
  for _ in $(seq 1 120); do grep -q ready "$out" 2>/dev/null && break; sleep 0.5; done
  say "ballast${gpu:+ on GPU $gpu}: $(cat "$out")"
}

# A later lease's kit (run from the repository root): the kept CUDA build unpacked where it was
# built (its RPATH), the release binary on PATH as `cargo install` puts it, the vocabulary the
# synthetic 35B renders with.
unpack_kit() {
  local b="$HOME/.cache/qtune/llama.cpp/b11434-cuda"
  mkdir -p "$b" "$HOME/.cargo/bin"
  if [ ! -x "$b/bin/llama-server" ]; then
    cat .gpu2/cuda/cuda-bin.tar.xz.part-* | tar xJf - -C "$b" || exit 1
  fi
  # Its RUNPATH names the folder it was built in: a run in another work folder links that
  # folder to this one. Not LD_LIBRARY_PATH: that would also hand llama.cpp's libllama.so and
  # libggml.so to ik_llama.cpp's server, whose libraries have the same names.
  local built=/tmp/qtune-first/home/.cache/qtune/llama.cpp/b11434-cuda
  if [ "$b" != "$built" ] && [ ! -e "$built" ]; then
    mkdir -p "$(dirname "$built")" && ln -s "$b" "$built" || exit 1
  fi
  xz -dc .gpu2/qtune.xz > "$HOME/.cargo/bin/qtune" && chmod +x "$HOME/.cargo/bin/qtune" || exit 1
  export QTUNE_VOCAB_DIR="$ROOT/.gpu2/vocab"
  qtune server check || exit 1
}
