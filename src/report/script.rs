//! `launch.sh`: a bash script that starts the winner the way it was measured, and optionally a
//! systemd unit that runs it.
//!
//! The server's argv comes from [`LaunchConfig::command`](crate::config::LaunchConfig::command).
//! Every value from the run (paths, versions, names, the config) reaches the text through
//! [`crate::escape`] and nothing else: words with [`shell_quote`], comment text with
//! [`one_line`], unit values with [`systemd_word`] / [`systemd_text`]. A run directory is
//! input (it travels between people): a line break or `$(...)` in it must not run.

use crate::escape::{one_line, shell_line, shell_quote, systemd_text, systemd_word};
use crate::run::TuneResult;
use anyhow::{bail, Result};
use std::fmt::Write as _;
use std::path::Path;

/// The URL a client on this machine reaches a server bound to `host` at.
fn local_url(host: &str, port: u16) -> String {
    let h = match host {
        "0.0.0.0" | "" => "127.0.0.1".to_string(),
        "::" | "[::]" => "[::1]".to_string(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_string(),
    };
    format!("http://{h}:{port}")
}

/// The winner's launch script. Errors when the run has no winner.
pub fn launch_script(r: &TuneResult, host: &str, port: u16) -> Result<String> {
    let Some(w) = &r.winner else {
        bail!(
            "this run has no winner (every configuration failed; see its report.md): nothing to launch"
        );
    };
    let argv = w.config.command(&r.server_path, &r.model_path, host, port);
    let url = local_url(host, port);
    let uses_gpu = r.hardware.has_gpu() && w.config.n_gpu_layers != Some(0);
    // Two GPUs or more: the winner's measured peak on each card (highest over its ok trials),
    // checked card by card instead of summed.
    let card_peaks: Vec<u64> = if r.gpu_budgets.len() >= 2 && uses_gpu {
        let mut peaks = vec![0u64; r.gpu_budgets.len()];
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
        one_line(&r.started_at)
    );
    let _ = writeln!(
        m,
        "# Model:  {}",
        one_line(&super::markdown::model_title(r))
    );
    let _ = writeln!(
        m,
        "# Config: {} (generation {:.2} tok/s, prompt {:.2} tok/s{})",
        one_line(&w.config.label()),
        w.gen_tps.median,
        w.prompt_tps.median,
        w.peak_vram_mib
            .map(|v| format!(", peak VRAM {v} MiB"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        m,
        "# Ctrl-C or SIGTERM stops the server with it. QTUNE_HEALTH_TIMEOUT_S (default 600) bounds\n\
         # the wait for /health."
    );
    let _ = writeln!(m, "set -euo pipefail\n");
    if r.gpu_budgets.len() >= 2 && uses_gpu {
        // The split (-ts) and any -ot ...=CUDAn name the cards in this order.
        let _ = writeln!(
            m,
            "# The cards, in the order the split names them (CUDA0, CUDA1, ...):"
        );
        for (i, g) in r.gpu_budgets.iter().enumerate() {
            let _ = writeln!(
                m,
                "#   CUDA{i} = GPU {} {} (budget {} MiB at the tune)",
                g.index,
                one_line(&g.name),
                g.budget_mib
            );
        }
        for (k, v) in crate::hardware::cuda_device_env(&r.gpu_budgets) {
            let _ = writeln!(m, "export {k}={}", shell_quote(&v));
        }
        let _ = writeln!(m);
    }
    let _ = writeln!(
        m,
        "SERVER={}",
        shell_quote(&r.server_path.display().to_string())
    );
    let _ = writeln!(
        m,
        "MODEL={}",
        shell_quote(&r.model_path.display().to_string())
    );
    let _ = writeln!(m, "URL={}", shell_quote(&url));
    let _ = writeln!(m, "HEALTH_TIMEOUT_S=${{QTUNE_HEALTH_TIMEOUT_S:-600}}");
    if let Some(v) = need_vram {
        let _ = writeln!(
            m,
            "NEED_VRAM_MIB={v}  # the winner's measured peak VRAM, all GPUs"
        );
    }
    m.push_str(
        r#"
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
"#,
    );
    m.push('\n');
    let _ = writeln!(m, "cmd=({})", shell_line(&argv));
    let _ = writeln!(
        m,
        "say {}",
        shell_quote(&format!("starting: {}", shell_line(&argv)))
    );
    m.push_str(
        r#"exec "${cmd[@]}" &
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
exit "$rc""#,
    );
    m.push('\n');
    Ok(s)
}

/// A systemd unit that runs `script` (an absolute path) and restarts it when it fails.
pub fn systemd_unit(r: &TuneResult, script: &Path) -> String {
    let label = r
        .winner
        .as_ref()
        .map(|w| w.config.label())
        .unwrap_or_default();
    let name = script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "launch.sh".into());
    format!(
        "# systemd unit written by qtune {ver}: runs {script_disp}.\n\
         # Install: sudo cp {name}.service /etc/systemd/system/llama-server.service\n\
         #          sudo systemctl daemon-reload && sudo systemctl enable --now llama-server\n\
         # Add User= under [Service] to run it as your user.\n\
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
        name = one_line(&name),
        model = systemd_text(&super::markdown::model_title(r)),
        label = systemd_text(&label),
        exec = systemd_word(&script.display().to_string()),
    )
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
        assert!(s.contains("URL=http://127.0.0.1:9000"));
        let argv = r
            .winner
            .as_ref()
            .unwrap()
            .config
            .command(&srv, &model, "0.0.0.0", 9000);
        assert!(s.contains(&format!("cmd=({})", shell_line(&argv))));
        assert!(s.contains("--n-cpu-moe 11"));
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
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(local_url("::", 80), "http://[::1]:80");
        assert_eq!(local_url("::1", 80), "http://[::1]:80");
        assert_eq!(local_url("localhost", 80), "http://localhost:80");
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
                r.gpu_budgets.clear();
            }
            r.qtune_version = format!("0.1.0{evil}");
            r.started_at = format!("2025-01-01T00:00:00Z{evil}");
            r.model.name = Some(format!("Model {evil}"));
            for g in &mut r.gpu_budgets {
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

            let u = systemd_unit(&r, &dir.path().join(format!("run {evil}/launch.sh")));
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
        }
    }

    #[test]
    fn systemd_quoting() {
        let (srv, model) = weird();
        let r = crate::run::sample::gpu_result(&srv, &model);
        let u = systemd_unit(&r, Path::new("/srv/my run/launch.sh"));
        assert!(u.contains("ExecStart=\"/srv/my run/launch.sh\"\n"));
        assert!(u.contains("Restart=on-failure\n"));
    }
}
