#!/usr/bin/env bash
# Starts llama-server with the launch flags qtune found fastest on this machine.
# Written by qtune 0.1.0 from the tune started 2026-11-24T00:20:11.885333437+00:00.
# Model:  Qwen3.5-35B-A3B (qtune synthetic, random weights)
# Config: baseline (server defaults, auto-fit) (generation 200.85 tok/s, prompt 7012.99 tok/s, peak VRAM 21416 MiB)
# Ctrl-C or SIGTERM stops the server with it. QTUNE_HEALTH_TIMEOUT_S (default 600) bounds
# the wait for /health.
set -euo pipefail

SERVER=/tmp/qtune-gpu/bin/llama-server
MODEL=/tmp/qtune-gpu/qwen3.5-35b-a3b-q4_k_m.gguf
URL=http://127.0.0.1:8080
HEALTH_TIMEOUT_S=${QTUNE_HEALTH_TIMEOUT_S:-600}
NEED_VRAM_MIB=21416  # the winner's measured peak VRAM, all GPUs

say() { printf 'launch.sh: %s\n' "$*" >&2; }

if [[ ! -f "$MODEL" ]]; then
  say "model file not found: $MODEL"
  say "put the model back at that path, or tune again and write a new script (qtune script)"
  exit 1
fi
if [[ ! -x "$SERVER" ]]; then
  say "llama-server not found or not executable: $SERVER"
  say "build it again with 'qtune server build', or tune again with --server PATH"
  exit 1
fi

# Refuse to start when another process took the VRAM this config needs (it would spill or fail).
if command -v nvidia-smi >/dev/null 2>&1; then
  if free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null \
      | awk '{ s += $1 } END { print s + 0 }'); then
    if (( free_mib < NEED_VRAM_MIB )); then
      say "only ${free_mib} MiB of VRAM free; this config needs ${NEED_VRAM_MIB} MiB (its measured peak)"
      say "another process holds the GPU: check nvidia-smi, stop it, then run this script again"
      exit 1
    fi
  else
    say "nvidia-smi failed: skipping the free-VRAM check"
  fi
else
  say "nvidia-smi not found: skipping the free-VRAM check"
fi

server_pid=""
stop() {
  trap - INT TERM
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    say "stopping llama-server (pid $server_pid)"
    kill -TERM "$server_pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM

cmd=(/tmp/qtune-gpu/bin/llama-server -m /tmp/qtune-gpu/qwen3.5-35b-a3b-q4_k_m.gguf -c 32768 -np 1 --host 127.0.0.1 --port 8080)
say 'starting: /tmp/qtune-gpu/bin/llama-server -m /tmp/qtune-gpu/qwen3.5-35b-a3b-q4_k_m.gguf -c 32768 -np 1 --host 127.0.0.1 --port 8080'
exec "${cmd[@]}" &
server_pid=$!

if command -v curl >/dev/null 2>&1; then
  deadline=$((SECONDS + HEALTH_TIMEOUT_S))
  until curl -fsS --max-time 2 "$URL/health" >/dev/null 2>&1; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      rc=0
      wait "$server_pid" || rc=$?
      server_pid=""
      say "llama-server exited (status $rc) before it was ready: its log is above"
      exit 1
    fi
    if (( SECONDS >= deadline )); then
      say "llama-server not ready after ${HEALTH_TIMEOUT_S} s: stopping it"
      stop 1
    fi
    sleep 0.5
  done
  say "ready: $URL (OpenAI-compatible API at $URL/v1)"
else
  say "curl not found: not waiting for /health"
fi

rc=0
wait "$server_pid" || rc=$?
server_pid=""
exit "$rc"
