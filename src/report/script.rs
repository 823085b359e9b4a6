//! `launch.sh`: a bash script that starts the winner the way it was measured, and optionally a
//! systemd unit that runs it.
//! (Over 800 lines with its tests: one script template, its argument handling and the unit and
//! compose exports share every escaped value; the tests run the rendered script for real.)
//!
//! The server's flags come from
//! [`LaunchConfig::server_args`](crate::config::LaunchConfig::server_args); the host, port,
//! model id (`--alias`) and API key are the script's own arguments (`--help`), with the
//! tune's host and port as defaults.
//! Every value from the run (paths, versions, names, the config) reaches the text through
//! [`crate::escape`] and nothing else: words with [`shell_quote`], comment text with
//! [`one_line`], unit values with [`systemd_executable`] / [`systemd_text`]. A run directory is
//! input (it travels between people): a line break or `$(...)` in it must not run.

use super::script_override as overrides;
use super::script_record as record;
use crate::engine::LaunchArgs;
use crate::escape::{
    compose_string, one_line, shell_line, shell_quote, systemd_executable, systemd_text,
};
use crate::run::TuneResult;
use anyhow::{bail, Result};
use std::fmt::Write as _;
use std::path::Path;

/// True for a host that only this machine reaches (`127.x`, `localhost`, `::1`).
pub fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost"
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The warning for a `--host` other machines can reach (None for loopback).
pub fn exposed_host_warning(host: &str) -> Option<String> {
    (!is_loopback(host)).then(|| {
        format!(
            "--host {host} is not loopback: other machines can reach the server; \
             start launch.sh with --api-key-file FILE (or --api-key KEY) so they need a key"
        )
    })
}

/// The model id clients see (`llama-server --alias`): a slug of the model's name without
/// its parenthesised notes ("Qwen3 30B-A3B Instruct (2507)" -> "qwen3-30b-a3b-instruct"),
/// never the file path.
pub fn model_alias(r: &TuneResult) -> String {
    let mut slug = String::new();
    let mut depth = 0usize;
    for c in super::markdown::model_title(r).chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > 0 || c == ')' {
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= 64 {
            break;
        }
    }
    let slug = slug.trim_matches(['-', '.']).to_string();
    if slug.is_empty() {
        "model".to_string()
    } else {
        slug
    }
}

/// The winner's launch script. Errors when the run has no winner.
pub fn launch_script(r: &TuneResult, host: &str, port: u16) -> Result<String> {
    let Some(w) = &r.winner else {
        bail!(
            "this run has no winner (every configuration failed; see its report.md): nothing to launch"
        );
    };
    let flags = w.config.server_args();
    let alias = model_alias(r);
    let uses_gpu = r.inputs.hardware.has_gpu() && w.config.n_gpu_layers != Some(0);
    // Two GPUs or more: the winner's measured peak on each card (highest over its ok trials),
    // checked card by card instead of summed.
    let card_peaks: Vec<u64> = if r.inputs.gpu_budgets.len() >= 2 && uses_gpu {
        let mut peaks = vec![0u64; r.inputs.gpu_budgets.len()];
        for t in r
            .trials
            .iter()
            .filter(|t| t.config == w.config && t.kind.is_ok())
        {
            for (i, p) in t.peak_vram_mib.iter().enumerate().take(peaks.len()) {
                peaks[i] = peaks[i].max(*p);
            }
        }
        if peaks.iter().any(|&p| p > 0) {
            peaks
        } else {
            Vec::new()
        }
    } else {
        Vec::new()
    };
    let need_vram = w
        .peak_vram_mib
        .filter(|_| uses_gpu && card_peaks.is_empty());

    let mut s = String::new();
    let m = &mut s;
    let _ = writeln!(m, "#!/usr/bin/env bash");
    let _ = writeln!(
        m,
        "# Starts llama-server with the launch flags qtune found fastest on this machine."
    );
    let _ = writeln!(
        m,
        "# Written by qtune {} from the tune started {}.",
        one_line(&r.qtune_version),
        one_line(&r.inputs.started_at)
    );
    let _ = writeln!(
        m,
        "# Model:  {}",
        one_line(&super::markdown::model_title(r))
    );
    let _ = writeln!(
        m,
        "# Config: {} (generation {:.2} tok/s, prompt {:.2} tok/s{})",
        one_line(&w.config.flags()),
        w.gen_tps.median,
        w.prompt_tps.median,
        w.peak_vram_mib
            .map(|v| format!(", peak VRAM {v} MiB"))
            .unwrap_or_default()
    );
    if let Some(note) = super::slots::note(&w.config) {
        let _ = writeln!(m, "# Slots: {}.", one_line(&note));
    }
    let _ = write!(
        m,
        "#\n\
         # Usage: ./launch.sh [--host HOST] [--port PORT] [--alias NAME]\n\
         #                    [--api-key KEY | --api-key-file FILE] [LLAMA-SERVER FLAGS...]\n\
         #   --host HOST          address to listen on (default {host}; env QTUNE_HOST). Any\n\
         #                        address but loopback lets other machines in: launch.sh warns,\n\
         #                        and warns again when no API key is set.\n\
         #   --port PORT          port to listen on (default {port}; env QTUNE_PORT)\n\
         #   --alias NAME         the model id clients see in /v1/models (default {alias};\n\
         #                        env QTUNE_ALIAS)\n\
         #   --api-key KEY        clients must send this key (env QTUNE_API_KEY)\n\
         #   --api-key-file FILE  read the key from FILE instead, kept out of ps (env\n\
         #                        QTUNE_API_KEY_FILE)\n\
         #   --record FILE        record what clients send to FILE.jsonl ('qtune record' on the\n\
         #                        port, the server on PORT+1 or QTUNE_SERVER_PORT; env\n\
         #                        QTUNE_RECORD). The trace holds your prompts: keep it private.\n\
         #   anything else        passed on to llama-server after the tuned flags (so it wins;\n\
         #                        a note says which tuned flag it replaces);\n\
         #                        `--` passes on everything after it\n\
         # Ctrl-C or SIGTERM stops the server with it. QTUNE_HEALTH_TIMEOUT_S (default 600)\n\
         # bounds the wait for /health.\n",
        host = one_line(host),
        alias = one_line(&alias),
    );
    let _ = writeln!(m, "set -euo pipefail\n");
    m.push_str(&crate::rpc::script_block(&w.config));
    if r.inputs.gpu_budgets.len() >= 2 && uses_gpu {
        // The split (-ts) and any -ot ...=CUDAn name the cards in this order.
        let _ = writeln!(
            m,
            "# The cards, in the order the split names them (CUDA0, CUDA1, ...):"
        );
        for (i, g) in r.inputs.gpu_budgets.iter().enumerate() {
            let _ = writeln!(
                m,
                "#   CUDA{i} = GPU {} {} (budget {} MiB at the tune)",
                g.index,
                one_line(&g.name),
                g.budget_mib
            );
        }
        for (k, v) in crate::hardware::cuda_device_env(&r.inputs.gpu_budgets) {
            let _ = writeln!(m, "export {k}={}", shell_quote(&v));
        }
        let _ = writeln!(m);
    }
    let _ = writeln!(
        m,
        "SERVER={}",
        shell_quote(
            &crate::engine::select::server_for(
                w.config.engine,
                &r.inputs.server_path,
                &r.inputs.engine_servers
            )
            .display()
            .to_string()
        )
    );
    let _ = writeln!(
        m,
        "MODEL={}",
        shell_quote(&r.inputs.model_path.display().to_string())
    );
    let _ = writeln!(m, "DEFAULT_HOST={}", shell_quote(host));
    let _ = writeln!(m, "DEFAULT_PORT={port}");
    let _ = writeln!(m, "DEFAULT_ALIAS={}", shell_quote(&alias));
    let _ = writeln!(m, "{}", record::defaults());
    m.push_str(
        r#"HOST=${QTUNE_HOST:-$DEFAULT_HOST}
PORT=${QTUNE_PORT:-$DEFAULT_PORT}
ALIAS=${QTUNE_ALIAS:-$DEFAULT_ALIAS}
API_KEY=${QTUNE_API_KEY:-}
API_KEY_FILE=${QTUNE_API_KEY_FILE:-}
RECORD=${QTUNE_RECORD:-}
HEALTH_TIMEOUT_S=${QTUNE_HEALTH_TIMEOUT_S:-600}
"#,
    );
    if let Some(v) = need_vram {
        let _ = writeln!(
            m,
            "NEED_VRAM_MIB={v}  # the winner's measured peak VRAM, all GPUs"
        );
    }
    m.push_str(
        r#"
say() { printf 'launch.sh: %s\n' "$*" >&2; }
usage() { sed -n '/^# Usage:/,/^# bounds the wait/s/^# \{0,1\}//p' "$0"; }
# The value of option $1 (the rest of the arguments follow it), or exit when there is none.
value() {
  if (( $# < 2 )); then
    say "$1 needs a value (see --help)"
    exit 2
  fi
}

extra=()
while (( $# > 0 )); do
  case $1 in
    --host) value "$@"; HOST=$2; shift 2 ;;
    --host=*) HOST=${1#*=}; shift ;;
    --port) value "$@"; PORT=$2; shift 2 ;;
    --port=*) PORT=${1#*=}; shift ;;
    --alias) value "$@"; ALIAS=$2; shift 2 ;;
    --alias=*) ALIAS=${1#*=}; shift ;;
    --api-key) value "$@"; API_KEY=$2; shift 2 ;;
    --api-key=*) API_KEY=${1#*=}; shift ;;
    --api-key-file) value "$@"; API_KEY_FILE=$2; shift 2 ;;
    --api-key-file=*) API_KEY_FILE=${1#*=}; shift ;;
    --record) value "$@"; RECORD=$2; shift 2 ;;
    --record=*) RECORD=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra+=("$@"); break ;;
    *) extra+=("$1"); shift ;;
  esac
done
__OVERRIDE_CHECK__
if ! [[ $PORT =~ ^[0-9]{1,5}$ ]] || (( 10#$PORT < 1 || 10#$PORT > 65535 )); then
  say "the port must be a number from 1 to 65535, not '$PORT'"
  exit 2
fi
PORT=$((10#$PORT))
if [[ -z $HOST || -z $ALIAS ]]; then
  say "the host and the alias must not be empty"
  exit 2
fi
if [[ -n $API_KEY_FILE && ! -r $API_KEY_FILE ]]; then
  say "cannot read the API key file: $API_KEY_FILE"
  exit 2
fi
case $HOST in
  127.*|localhost|::1|'[::1]') ;;
  *)
    say "warning: listening on $HOST: other machines can reach this server"
    if [[ -z $API_KEY && -z $API_KEY_FILE ]]; then
      say "warning: no API key: anyone who reaches $HOST:$PORT can use it (pass --api-key-file FILE)"
    fi
    ;;
esac
__RECORD_SETUP__case $HOST in
  0.0.0.0) url_host=127.0.0.1 ;;
  ::|'[::]') url_host='[::1]' ;;
  \[*) url_host=$HOST ;;
  *:*) url_host="[$HOST]" ;;
  *) url_host=$HOST ;;
esac
URL="http://$url_host:$PORT"

if [[ ! -f "$MODEL" ]]; then
  say "model file not found: $MODEL"
  say "put the model back at that path, or tune again and write a new script (qtune script)"
  exit 1
fi
if [[ ! -x "$SERVER" ]]; then
  say "llama-server not found or not executable: $SERVER"
  say "build it again with 'qtune server build', or tune again with --server PATH"
  exit 1
fi"#,
    );
    m.push('\n');
    if need_vram.is_some() {
        m.push_str(r#"
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
fi"#);
        m.push('\n');
    }
    if !card_peaks.is_empty() {
        let _ = writeln!(
            m,
            "\n# Refuse to start when another process took the VRAM a card needs (it would spill or fail).\n\
             NEED_VRAM_MIB_PER_GPU=({})  # the winner's measured peak on CUDA0, CUDA1, ...",
            card_peaks
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        m.push_str(
            r#"if command -v nvidia-smi >/dev/null 2>&1; then
  i=0
  for idx in ${CUDA_VISIBLE_DEVICES//,/ }; do
    need=${NEED_VRAM_MIB_PER_GPU[$i]}
    if free_mib=$(nvidia-smi -i "$idx" --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null); then
      if (( free_mib < need )); then
        say "GPU $idx has only ${free_mib} MiB free; this config needs ${need} MiB there (its measured peak)"
        say "another process holds that GPU: check nvidia-smi, stop it, then run this script again"
        exit 1
      fi
    else
      say "nvidia-smi failed on GPU $idx: skipping its free-VRAM check"
    fi
    i=$((i + 1))
  done
else
  say "nvidia-smi not found: skipping the free-VRAM check"
fi
"#,
        );
    }
    m.push_str(
        r#"
server_pid=""
record_pid=""
stop() {
  trap - INT TERM
  if [[ -n "$record_pid" ]] && kill -0 "$record_pid" 2>/dev/null; then
    kill -TERM "$record_pid" 2>/dev/null || true
    wait "$record_pid" 2>/dev/null || true
  fi
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
"#,
    );
    m.push('\n');
    let _ = writeln!(
        m,
        "cmd=(\"$SERVER\" -m \"$MODEL\" {} --host \"$HOST\" --port \"$PORT\" --alias \"$ALIAS\")",
        shell_line(&flags)
    );
    m.push_str(
        r#"shown=("${cmd[@]}")
if [[ -n $API_KEY ]]; then
  cmd+=(--api-key "$API_KEY")
  shown+=(--api-key '(hidden)')
fi
if [[ -n $API_KEY_FILE ]]; then
  cmd+=(--api-key-file "$API_KEY_FILE")
  shown+=(--api-key-file "$API_KEY_FILE")
fi
if (( ${#extra[@]} > 0 )); then
  cmd+=("${extra[@]}")
  shown+=("${extra[@]}")
fi
# The command as qtune prints commands: plain words bare, others in single quotes.
plain='^[-A-Za-z0-9_./=:,+@%]+$' sq="'" esc="'\\''" line=""
for w in "${shown[@]}"; do
  line+=${line:+ }
  if [[ $w =~ $plain ]]; then line+=$w; else line+="'${w//$sq/$esc}'"; fi
done
say "starting: $line"
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
  [[ -n $RECORD ]] || say "ready: $URL (OpenAI-compatible API at $URL/v1)"
else
  say "curl not found: not waiting for /health"
fi
__RECORD_START__
rc=0
wait "$server_pid" || rc=$?
server_pid=""
exit "$rc""#,
    );
    m.push('\n');
    let s = s.replacen(
        "__OVERRIDE_CHECK__",
        &format!(
            "{}{}",
            overrides::tuned_flag_function(&w.config),
            overrides::CHECK
        ),
        1,
    );
    Ok(record::splice(s))
}

/// A systemd unit that runs `script` (an absolute path) and restarts it when it fails.
/// `unit` is where the unit file itself is written (its install line copies it from there).
/// A script path systemd would refuse to run (a quote, a backslash or a control character in
/// it) is an error saying so, instead of a unit systemd rejects.
pub fn systemd_unit(r: &TuneResult, script: &Path, unit: &Path) -> Result<String> {
    let exec = systemd_executable(&script.display().to_string()).map_err(|why| {
        anyhow::anyhow!(
            "cannot write a systemd unit for {}: {why}; write the script to a path without one (--out)",
            one_line(&script.display().to_string())
        )
    })?;
    let label = r
        .winner
        .as_ref()
        .map(|w| w.config.flags())
        .unwrap_or_default();
    // The workers start on their own boxes, before this unit (launch.sh checks they answer).
    let workers: String = r
        .winner
        .as_ref()
        .map(|w| crate::rpc::worker_commands(&w.config))
        .unwrap_or_default()
        .iter()
        .map(|l| format!("# RPC worker, started first on its box: {}\n", one_line(l)))
        .collect();
    Ok(format!(
        "# systemd unit written by qtune {ver}: runs {script_disp}.\n\
         # Install: sudo cp {unit} /etc/systemd/system/{name}\n\
         #          sudo systemctl daemon-reload && sudo systemctl enable --now {name}\n\
         # Add User= under [Service] to run it as your user, and Environment= lines to change\n\
         # what launch.sh serves (QTUNE_HOST, QTUNE_PORT, QTUNE_ALIAS, QTUNE_API_KEY_FILE).\n\
         {workers}\
         [Unit]\n\
         Description=llama-server: {model} ({label}), tuned by qtune\n\
         After=network-online.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         Restart=on-failure\n\
         RestartSec=5\n\
         KillMode=mixed\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec=30\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        ver = one_line(&r.qtune_version),
        script_disp = one_line(&script.display().to_string()),
        unit = one_line(&shell_quote(&unit.display().to_string())),
        model = systemd_text(&super::markdown::model_title(r)),
        label = systemd_text(&label),
        name = crate::escape::systemd_unit_name(&super::model_stem(r)),
    ))
}

/// A docker compose file that serves the winner with the official llama.cpp server image:
/// the model bind-mounted read-only, the port published on `host` only, the GPUs reserved
/// when the winner uses one. Errors when the run has no winner.
pub fn compose_file(r: &TuneResult, host: &str, port: u16) -> Result<String> {
    let Some(w) = &r.winner else {
        bail!(
            "this run has no winner (every configuration failed; see its report.md): nothing to serve"
        );
    };
    let engine = crate::engine::of(w.config.engine);
    let uses_gpu = r.inputs.hardware.has_gpu() && w.config.n_gpu_layers != Some(0);
    let Some(image) = engine.server_image(uses_gpu) else {
        bail!(
            "the winner runs on {}, which has no official server image for a compose file: serve it with the launch script (qtune script without --compose, or with --systemd)",
            w.config.engine
        );
    };
    let alias = model_alias(r);
    const IN_MODEL: &str = "/models/model.gguf";
    let mut argv: Vec<String> = vec!["-m".into(), IN_MODEL.into()];
    argv.extend(w.config.server_args());
    argv.extend([
        "--host".into(),
        "0.0.0.0".into(),
        "--port".into(),
        "8080".into(),
        "--alias".into(),
        alias.clone(),
    ]);
    let host_ip = host.trim_start_matches('[').trim_end_matches(']');
    let mut m = String::new();
    let _ = write!(
        m,
        // not a server flag: docker compose's -d
        "# docker compose file written by qtune {ver}: serves {model} with the launch flags\n\
         # qtune found fastest on this machine ({label}), in the official llama.cpp server\n\
         # image at the llama.cpp build qtune tuned with ({tag}).\n\
         # Start: docker compose -f THIS_FILE up -d    Stop: docker compose -f THIS_FILE down\n\
         # Clients: http://{url_host}:{port}/v1, model id {alias}.\n",
        ver = one_line(&r.qtune_version),
        model = one_line(&super::markdown::model_title(r)),
        label = one_line(&w.config.flags()),
        tag = crate::engine::binary::BUILD_TAG,
        url_host = if is_loopback(host) || host_ip == "0.0.0.0" || host_ip == "::" {
            "127.0.0.1".to_string()
        } else {
            one_line(host)
        },
    );
    if !is_loopback(host) {
        let _ = writeln!(
            m,
            "# Published on {}: other machines can reach it. Add \"--api-key-file\", \"/run/secrets/key\"\n\
             # to the command (with the key file mounted there) so they need a key.",
            one_line(host)
        );
    }
    if uses_gpu {
        let _ = writeln!(
            m,
            "# Needs the NVIDIA Container Toolkit. For CUDA 13 drivers use the server-cuda13 image."
        );
    }
    let _ = writeln!(m, "services:\n  llama-server:");
    let _ = writeln!(m, "    image: {}", compose_string(&image));
    let _ = writeln!(m, "    command:");
    for a in &argv {
        let _ = writeln!(m, "      - {}", compose_string(a));
    }
    let _ = writeln!(
        m,
        "    volumes:\n      - type: bind\n        source: {}\n        target: {}\n        read_only: true",
        compose_string(&r.inputs.model_path.display().to_string()),
        compose_string(IN_MODEL)
    );
    let _ = writeln!(
        m,
        "    ports:\n      - target: 8080\n        published: \"{port}\"\n        host_ip: {}",
        compose_string(host_ip)
    );
    let env = crate::hardware::cuda_device_env(&r.inputs.gpu_budgets);
    if uses_gpu && !env.is_empty() {
        let _ = writeln!(m, "    environment:");
        for (k, v) in env {
            let _ = writeln!(m, "      {}: {}", compose_string(&k), compose_string(&v));
        }
    }
    if uses_gpu {
        let _ = writeln!(
            m,
            "    deploy:\n      resources:\n        reservations:\n          devices:\n            \
             - driver: nvidia\n              count: all\n              capabilities: [gpu]"
        );
    }
    let _ = writeln!(
        m,
        "    healthcheck:\n      test: [\"CMD\", \"curl\", \"-fsS\", \"http://127.0.0.1:8080/health\"]\n      \
         interval: 10s\n      timeout: 5s\n      start_period: 600s\n    restart: unless-stopped"
    );
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn weird() -> (PathBuf, PathBuf) {
        (
            PathBuf::from("/opt/llama `cpp`/bin/llama-server"),
            PathBuf::from("/data/my models/it's $HOME/m.gguf"),
        )
    }

    #[test]
    fn script_quotes_paths_and_checks_vram_on_gpu() {
        let (srv, model) = weird();
        let r = crate::run::sample::gpu_result(&srv, &model);
        let s = launch_script(&r, "0.0.0.0", 9000).unwrap();
        assert!(s.starts_with("#!/usr/bin/env bash\n"));
        assert!(s.contains("set -euo pipefail"));
        assert!(s.contains(r"MODEL='/data/my models/it'\''s $HOME/m.gguf'"));
        assert!(s.contains("SERVER='/opt/llama `cpp`/bin/llama-server'"));
        assert!(s.contains("NEED_VRAM_MIB=14935"));
        assert!(s.contains("nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits"));
        assert!(
            s.contains("DEFAULT_HOST=0.0.0.0\nDEFAULT_PORT=9000\n"),
            "{s}"
        );
        assert!(s.contains("DEFAULT_ALIAS=sample-qwen3moe\n"), "{s}");
        let flags = r.winner.as_ref().unwrap().config.server_args();
        assert!(s.contains(&format!(
            "cmd=(\"$SERVER\" -m \"$MODEL\" {} --host \"$HOST\" --port \"$PORT\" --alias \"$ALIAS\")",
            shell_line(&flags)
        )));
        assert!(s.contains("--n-cpu-moe 11"));
    }

    #[test]
    fn slots_that_win_are_explained_in_the_script_the_report_and_the_summary() {
        let (srv, model) = weird();
        let mut r = crate::run::sample::cpu_result(&srv, &model);
        let plain = launch_script(&r, "127.0.0.1", 8080).unwrap();
        assert!(!plain.contains("# Slots:"), "{plain}");
        assert!(!crate::report::markdown::render(&r, &[]).contains("Slots:"));
        assert!(crate::report::summary::verdict_lines(&r)
            .iter()
            .all(|l| !l.contains("slots:")));
        // The winner with four slots (and each its quarter of the context).
        let w = r.winner.as_mut().unwrap();
        w.config.parallel = 4;
        w.config.ctx = 8192;
        let want = "this server answers 4 requests at once (-np 4; each slot holds 2,048 of \
                    the 8,192 tokens of context); a client that sends more at once waits in \
                    the server's queue until a slot is free";
        let s = launch_script(&r, "127.0.0.1", 8080).unwrap();
        let header = s.split("# Usage:").next().unwrap();
        assert!(header.contains(&format!("# Slots: {want}")), "{header}");
        let md = crate::report::markdown::render(&r, &[]);
        assert!(md.contains(&format!("Slots: {want}")), "{md}");
        let summary = crate::report::summary::verdict_lines(&r).join("\n");
        assert!(summary.contains(&format!("slots: {want}")), "{summary}");
        // A unified KV: the slots share the context.
        r.winner.as_mut().unwrap().config.kv_unified = Some(true);
        let s = launch_script(&r, "127.0.0.1", 8080).unwrap();
        assert!(
            s.contains("(-np 4; the 4 slots share the 8,192 tokens of context)"),
            "{s}"
        );
    }

    #[test]
    fn cpu_script_skips_the_vram_check_and_no_winner_is_an_error() {
        let (srv, model) = weird();
        let mut r = crate::run::sample::cpu_result(&srv, &model);
        let s = launch_script(&r, "127.0.0.1", 8080).unwrap();
        assert!(!s.contains("NEED_VRAM_MIB"));
        assert!(!s.contains("nvidia-smi"));
        r.winner = None;
        let e = launch_script(&r, "127.0.0.1", 8080).unwrap_err();
        assert!(e.to_string().contains("no winner"), "{e}");
    }

    #[test]
    fn loopback_hosts_and_aliases() {
        for h in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"] {
            assert!(is_loopback(h), "{h}");
            assert!(exposed_host_warning(h).is_none());
        }
        for h in ["0.0.0.0", "::", "192.168.1.2", "my-box"] {
            assert!(!is_loopback(h), "{h}");
            assert!(exposed_host_warning(h).unwrap().contains("--api-key-file"));
        }
        let (srv, model) = weird();
        let mut r = crate::run::sample::cpu_result(&srv, &model);
        r.model.name = Some("Qwen3 30B-A3B  Instruct (2507)".into());
        assert_eq!(model_alias(&r), "qwen3-30b-a3b-instruct");
        r.model.name = Some("Qwen3.5-35B-A3B".into());
        assert_eq!(model_alias(&r), "qwen3.5-35b-a3b");
        r.model.name = Some("`touch x`; $HOME\n".into());
        assert_eq!(model_alias(&r), "touch-x-home");
        r.model.name = Some("!!!".into());
        assert_eq!(model_alias(&r), "model");
    }

    /// Every string of a run that reaches the script or the unit, set to a line break plus a
    /// command (and quotes, `$(...)`, backticks): `bash -n` accepts the script, running it
    /// (with a stub server that exits at once) creates nothing, and the unit holds only the
    /// lines qtune writes.
    #[test]
    fn hostile_run_values_never_run_nor_add_unit_lines() {
        let dir = tempfile::tempdir().unwrap();
        let evil = "x\ntouch PWNED\n$(touch PWNED)`touch PWNED`'\"\\";
        let srv = dir.path().join(format!("srv {evil}"));
        let model = dir.path().join(format!("m {evil}.gguf"));
        std::fs::write(&srv, "#!/bin/sh\nexit 3\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&srv, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&model, "").unwrap();
        for two_gpus in [false, true] {
            let mut r = crate::run::sample::gpu_result(&srv, &model);
            if !two_gpus {
                r.inputs.gpu_budgets.clear();
            }
            r.qtune_version = format!("0.1.0{evil}");
            r.inputs.started_at = format!("2025-01-01T00:00:00Z{evil}");
            r.model.name = Some(format!("Model {evil}"));
            for g in &mut r.inputs.gpu_budgets {
                g.name = format!("GPU {evil}");
            }
            let s = launch_script(&r, "127.0.0.1", 18080).unwrap();
            let path = dir.path().join("launch.sh");
            std::fs::write(&path, &s).unwrap();
            let n = std::process::Command::new("bash")
                .arg("-n")
                .arg(&path)
                .output()
                .unwrap();
            assert!(n.status.success(), "{}", String::from_utf8_lossy(&n.stderr));
            let o = std::process::Command::new("bash")
                .arg(&path)
                .current_dir(dir.path())
                .env("PATH", "/usr/bin:/bin")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("exited (status 3)"), "{err}");
            assert!(!dir.path().join("PWNED").exists(), "{s}");

            // A path systemd would refuse to run is refused with a reason, never rendered.
            let e = systemd_unit(
                &r,
                &dir.path().join(format!("run {evil}/launch.sh")),
                &dir.path().join(format!("run {evil}/launch.sh.service")),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("systemd refuses"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
            // What systemd accepts in its executable reaches it whole and adds no line.
            let runnable = "x $(touch PWNED)`touch PWNED` %n ${HOME};";
            let u = systemd_unit(
                &r,
                &dir.path().join(format!("run {runnable}/launch.sh")),
                &dir.path().join(format!("run {runnable}/launch.sh.service")),
            )
            .unwrap();
            for line in u.lines() {
                let known = line.is_empty()
                    || line.starts_with('#')
                    || line.starts_with('[')
                    || [
                        "Description=",
                        "After=",
                        "Wants=",
                        "Type=",
                        "ExecStart=",
                        "Restart=",
                        "RestartSec=",
                        "KillMode=",
                        "KillSignal=",
                        "TimeoutStopSec=",
                        "WantedBy=",
                    ]
                    .iter()
                    .any(|k| line.starts_with(k));
                assert!(known, "{line:?} in\n{u}");
                assert!(!line.ends_with('\\'), "{line:?}");
            }
            assert_eq!(u.lines().filter(|l| l.starts_with("ExecStart=")).count(), 1);

            // The compose file reads back as exactly the values (compose's `$$` is one `$`).
            let c = compose_file(&r, "127.0.0.1", 18080).unwrap();
            let v: serde_yaml::Value = serde_yaml::from_str(&c).unwrap();
            let svc = &v["services"]["llama-server"];
            let undollar = |s: &str| s.replace("$$", "$");
            assert_eq!(
                undollar(svc["volumes"][0]["source"].as_str().unwrap()),
                model.display().to_string()
            );
            let cmd: Vec<String> = svc["command"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|a| undollar(a.as_str().unwrap()))
                .collect();
            assert_eq!(cmd[..2], ["-m", "/models/model.gguf"]);
            let keys: Vec<&str> = v
                .as_mapping()
                .unwrap()
                .keys()
                .filter_map(|k| k.as_str())
                .collect();
            assert_eq!(keys, ["services"], "{c}");
        }
    }

    /// The script's own arguments, run with a stub server that records its argv: host, port,
    /// alias and key reach the server, anything else is passed on, the env vars work, a
    /// non-loopback host warns (twice without a key), a bad port is refused.
    #[test]
    fn launch_sh_arguments_reach_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let srv = dir.path().join("llama-server");
        let args_file = dir.path().join("argv");
        std::fs::write(
            &srv,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\nexit 5\n",
                shell_quote(&args_file.display().to_string())
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&srv, std::fs::Permissions::from_mode(0o755)).unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, "").unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "k").unwrap();
        let r = crate::run::sample::cpu_result(&srv, &model);
        let path = dir.path().join("launch.sh");
        std::fs::write(&path, launch_script(&r, "127.0.0.1", 8080).unwrap()).unwrap();
        let run = |args: &[&str], env: &[(&str, &str)]| {
            std::fs::remove_file(&args_file).ok();
            let o = std::process::Command::new("bash")
                .arg(&path)
                .args(args)
                .envs(env.iter().copied())
                .env("PATH", "/usr/bin:/bin")
                .output()
                .unwrap();
            let argv = std::fs::read_to_string(&args_file).unwrap_or_default();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
                argv.lines().map(String::from).collect::<Vec<_>>(),
            )
        };
        let after = |argv: &[String], flag: &str| -> Option<String> {
            let i = argv.iter().rposition(|a| a == flag)?;
            argv.get(i + 1).cloned()
        };

        let (code, err, argv) = run(&[], &[]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("exited (status 5)"), "{err}");
        assert_eq!(after(&argv, "--host").as_deref(), Some("127.0.0.1"));
        assert_eq!(after(&argv, "--port").as_deref(), Some("8080"));
        assert_eq!(after(&argv, "--alias").as_deref(), Some("sample-llama"));
        assert!(!err.contains("warning"), "{err}");
        assert!(!argv.iter().any(|a| a.starts_with("--api-key")));

        let (_, err, argv) = run(
            &[
                "--host",
                "0.0.0.0",
                "--port=18123",
                "--alias",
                "x",
                "-n",
                "7",
            ],
            &[],
        );
        assert_eq!(after(&argv, "--host").as_deref(), Some("0.0.0.0"));
        assert_eq!(after(&argv, "--port").as_deref(), Some("18123"));
        assert_eq!(after(&argv, "--alias").as_deref(), Some("x"));
        assert_eq!(&argv[argv.len() - 2..], ["-n", "7"], "passed on, last");
        assert!(
            err.contains("warning: listening on 0.0.0.0: other machines can reach this server"),
            "{err}"
        );
        assert!(err.contains("warning: no API key"), "{err}");

        let keyfile = key.display().to_string();
        let (_, err, argv) = run(&["--api-key-file", &keyfile], &[("QTUNE_HOST", "::")]);
        assert_eq!(after(&argv, "--host").as_deref(), Some("::"));
        assert_eq!(after(&argv, "--api-key-file"), Some(keyfile.clone()));
        assert!(err.contains("warning: listening on ::"), "{err}");
        assert!(!err.contains("no API key"), "{err}");

        let (_, err, argv) = run(
            &["--api-key", "s3cret", "--", "--alias", "y"],
            &[("QTUNE_PORT", "9001"), ("QTUNE_ALIAS", "envalias")],
        );
        assert_eq!(after(&argv, "--port").as_deref(), Some("9001"));
        assert_eq!(after(&argv, "--api-key").as_deref(), Some("s3cret"));
        assert_eq!(after(&argv, "--alias").as_deref(), Some("y"), "after --");
        assert!(argv.contains(&"envalias".to_string()));
        assert!(!err.contains("s3cret"), "the key is not printed: {err}");

        for bad in [&["--port", "abc"][..], &["--port", "70000"], &["--alias"]] {
            let (code, err, argv) = run(bad, &[]);
            assert_eq!(code, Some(2), "{bad:?}: {err}");
            assert!(argv.is_empty(), "{bad:?}");
        }
        let (code, err, _) = run(&["--api-key-file", "/nonexistent/key"], &[]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("cannot read the API key file"), "{err}");

        let o = std::process::Command::new("bash")
            .arg(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(o.status.success());
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(
            help.starts_with("Usage: ./launch.sh [--host HOST]"),
            "{help}"
        );
        assert!(help.contains("--api-key-file FILE"), "{help}");
        assert!(!std::fs::exists(&args_file).unwrap());
    }

    #[test]
    fn systemd_quoting() {
        let (srv, model) = weird();
        let r = crate::run::sample::gpu_result(&srv, &model);
        let u = systemd_unit(
            &r,
            Path::new("/srv/my run/launch.sh"),
            Path::new("/srv/my run/llama.service"),
        )
        .unwrap();
        assert!(u.contains("ExecStart=\"/srv/my run/launch.sh\"\n"));
        assert!(
            u.contains(
                "# Install: sudo cp '/srv/my run/llama.service' /etc/systemd/system/qtune-m.service\n"
            ),
            "{u}"
        );
        assert!(
            u.contains("systemctl enable --now qtune-m.service\n"),
            "{u}"
        );
        assert!(u.contains("Restart=on-failure\n"));
    }
}
