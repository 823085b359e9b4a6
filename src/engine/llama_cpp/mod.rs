//! llama.cpp's `llama-server`: its flags, and the two commands a user could type without qtune.

use super::argv::{render, Dialect};
use super::log::LogDialect;
use super::{BaselineInputs, Caps, Engine, ServerBinary, ServerCommand};
use crate::config::{LaunchConfig, LoadMode};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub mod auto;
pub mod parse;
pub mod rpc_worker;
pub mod server;

/// Lines that mean llama-server rejected its command line.
pub(crate) const BAD_FLAG: &[&str] = &[
    "error: invalid argument:",
    "error while handling argument",
    "error while handling environment variable",
    "unknown argument",
    "unsupported cache type",
    "error: unknown value for",
    "expected value for argument",
];

/// Lines that mean an allocation failed (GPU or host). Matched case-insensitively.
pub(crate) const OOM: &[&str] = &[
    "out of memory",
    "cudamalloc failed",
    "hipmalloc failed",
    "failed to allocate",
    "unable to allocate",
    "cublas_status_alloc_failed",
    "erroroutofdevicememory",
    "std::bad_alloc",
    "cannot allocate memory",
];

/// Debug lines that contain an OOM word but are harmless: the server falls back and goes on.
pub(crate) const OOM_BENIGN: &[&str] = &[
    "pinned memory",
    "failed to allocate graph, reserving",
    "async uploads",
    "falling back",
];

/// Lines ggml prints as it aborts the server (its `GGML_ABORT` and `GGML_ASSERT` paths, and the
/// CUDA error that calls them: `CUDA error: an illegal memory access was encountered`,
/// `ggml-cuda.cu:132: CUDA error`). Nothing serves after one; a server that printed one and
/// still runs is hung in its abort (seen with ik_llama.cpp's CUDA build on the GPU machine).
pub(crate) const ABORT: &[&str] = &["CUDA error", "GGML_ASSERT("];

/// How llama.cpp spells what engines spell apart: `--fit on|off` and a `--fit-target` list,
/// `--load-mode`; it has no levers of its own.
const DIALECT: Dialect = Dialect {
    fit: |c, a| {
        if let Some(fit) = c.fit {
            a.pair("--fit", if fit { "on" } else { "off" });
        }
        if !c.fit_target_mib.is_empty() {
            let t: Vec<String> = c.fit_target_mib.iter().map(|v| v.to_string()).collect();
            a.pair("--fit-target", t.join(","));
        }
    },
    load_mode: |m, a| {
        if m != LoadMode::Auto {
            a.pair("--load-mode", m);
        }
    },
    own: |_, _| {},
};

/// llama.cpp's `llama-server` (the pinned build, or the user's own with the flags
/// `server::check` checks for).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LlamaCpp;

impl Engine for LlamaCpp {
    fn name(&self) -> &'static str {
        "llama.cpp"
    }

    fn server_args(&self, c: &LaunchConfig) -> Vec<String> {
        render(c, &self.caps(), &DIALECT)
    }

    /// What a user gets without qtune, in this space's context and slots; on a busy box (the
    /// space's `threads_cap`), with `-t` at the free cores: the default threads would spin on
    /// cores other processes hold and collapse (the banner says so).
    fn default_baseline(&self, fixed: &BaselineInputs) -> LaunchConfig {
        LaunchConfig {
            parallel: fixed.parallel,
            threads: fixed.threads_cap,
            rpc: fixed.rpc.clone(),
            ..LaunchConfig::baseline(fixed.ctx)
        }
    }

    /// `--fit on --fit-target <headroom>`, one target per card, over the default baseline.
    fn fit_baseline(
        &self,
        fixed: &BaselineInputs,
        headroom_mib: u32,
        cards: usize,
    ) -> LaunchConfig {
        self.default_baseline(fixed)
            .with_fit_targets(vec![headroom_mib; cards.max(1)])
    }

    /// Every setting qtune varies but another engine's own levers.
    fn caps(&self) -> Caps {
        Caps {
            own_levers: false,
            ..Caps::ALL
        }
    }

    fn log_dialect(&self) -> LogDialect {
        LogDialect {
            bad_flag: BAD_FLAG,
            oom: OOM,
            oom_benign: OOM_BENIGN,
            abort: ABORT,
            // tools/server/server-http.cpp
            bind_failed: "couldn't bind HTTP server socket",
            weights_buffer_prefix: None,
        }
    }

    fn required_flags(&self) -> &'static [&'static str] {
        &server::REQUIRED_FLAGS
    }

    fn parse_command(&self, argv: &[String]) -> Result<ServerCommand, String> {
        parse::parse_command(argv)
    }

    fn build_command(&self) -> &'static str {
        "qtune server build"
    }

    fn pinned_version(&self, raw: &str, path: &Path) -> String {
        server::pinned_version(raw, path)
    }

    fn resolve(&self, explicit: Option<&Path>) -> Result<ServerBinary> {
        server::resolve(explicit)
    }

    fn build(&self, cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf> {
        server::build(cuda, say)
    }

    /// The official llama.cpp server image at qtune's pinned llama.cpp build: CUDA 12 when the
    /// winner uses a GPU, else the CPU image.
    fn server_image(&self, gpu: bool) -> Option<String> {
        let tag = server::BUILD_TAG;
        Some(if gpu {
            format!("ghcr.io/ggml-org/llama.cpp:server-cuda12-{tag}")
        } else {
            format!("ghcr.io/ggml-org/llama.cpp:server-{tag}")
        })
    }
}

/// llama.cpp's `llama-perplexity` flags for `qtune quality`: the model, context, batch,
/// flash attention on, the KV cache types and the threads.
pub fn perplexity_args(
    model: &Path,
    ctx: u32,
    batch: u32,
    kv: [crate::config::KvType; 2],
    threads: Option<u32>,
) -> Vec<String> {
    let mut a = vec![
        "-m".to_string(),
        model.display().to_string(),
        "-c".into(),
        ctx.to_string(),
        "-b".into(),
        batch.to_string(),
        "-fa".into(),
        "on".into(),
        "-ctk".into(),
        kv[0].as_str().into(),
        "-ctv".into(),
        kv[1].as_str().into(),
    ];
    if let Some(t) = threads {
        a.push("-t".into());
        a.push(t.to_string());
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two baselines as a user would type them: the server's default in the space's
    /// context (with `-t` at the busy box's free cores), and `--fit on --fit-target` with
    /// the headroom once per card.
    #[test]
    fn the_baselines_are_the_default_and_fit_with_the_headroom_per_card() {
        let mut space = crate::space::load("default").unwrap();
        space.fixed.ctx = 8192;
        let e = LlamaCpp;
        assert_eq!(
            e.server_args(&e.default_baseline(&space.fixed.baseline_inputs()))
                .join(" "),
            "-c 8192 -np 1"
        );
        assert_eq!(
            e.server_args(&e.fit_baseline(&space.fixed.baseline_inputs(), 512, 2))
                .join(" "),
            "-c 8192 -np 1 --fit on --fit-target 512,512"
        );
        assert_eq!(
            e.server_args(&e.fit_baseline(&space.fixed.baseline_inputs(), 1024, 0))
                .join(" "),
            "-c 8192 -np 1 --fit on --fit-target 1024"
        );
        space.fixed.threads_cap = Some(3);
        assert_eq!(
            e.server_args(&e.default_baseline(&space.fixed.baseline_inputs()))
                .join(" "),
            "-c 8192 -np 1 -t 3"
        );
        let argv = e.command(
            &e.default_baseline(&space.fixed.baseline_inputs()),
            Path::new("/srv"),
            Path::new("/m.gguf"),
            "127.0.0.1",
            8080,
        );
        assert_eq!(
            argv.join(" "),
            "/srv -m /m.gguf -c 8192 -np 1 -t 3 --host 127.0.0.1 --port 8080"
        );
    }
}
