//! ik_llama.cpp's `llama-server` (the fork tuned for experts on the CPU): its flags where they
//! differ from llama.cpp's, and its two baselines.
//!
//! Read from the pinned source (the PyPI sdist `ik-llama-cpp-python` 0.1.5, its vendored
//! `ik_llama.cpp/common/common.cpp`):
//! - `--fit` is a switch (off by default) and `--fit-margin N` (MiB, one value for every
//!   device) replaces `--fit-target`: `fit: off` passes nothing;
//! - there is no `--load-mode`: `none` is `--no-mmap`, `mlock` is `--no-mmap --mlock`,
//!   `mmap+mlock` is `--mlock`, direct I/O does not exist;
//! - `-fa` takes `on`, `off` (and `auto`, read as `on`; on is its default);
//! - there is no `--no-op-offload` (its `-op` is a per-op policy), no
//!   `--checkpoint-min-step`, no `-kvu`/`-no-kvu`, and no `-sm row`/`tensor`;
//! - fused MoE is on by default (`-no-fmoe` turns it off); `-rtr` repacks and implies no mmap;
//! - `-ser K,T` (smart expert reduction): past the top K routed experts of a token, an expert
//!   whose router weight is below T times the top one's is skipped (`ggml_argsort_thresh`), so
//!   `K,1` computes K experts a token; `-1,0`, its default, turns it off.

use super::argv::{render, Dialect};
use super::log::LogDialect;
use super::{BaselineInputs, Caps, Engine, EngineKind, ServerBinary};
use crate::config::{LaunchConfig, LoadMode};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub mod parse;
pub mod server;

/// ik's own levers, in its spellings (read from the pinned `common/common.cpp`): run-time
/// repack, fused MoE off, the attention batch cap, smart expert reduction (lossy), huge
/// pages, then its other fused ops off (up-gate, mul-multiadd), offloading every expert, not
/// only a batch's active ones, and the CUDA back end's run-time parameters (`-cuda
/// mmq-id-size=0,fusion=0`). qtune passes all but `-thp`; they are named here so that
/// the seam check (`scripts/engine-seam.py`) keeps them inside `src/engine/`.
pub const OWN_FLAGS: &[&[&str]] = &[
    &["-rtr", "--run-time-repack"],
    &["-no-fmoe", "--no-fused-moe"],
    &["-amb", "--attention-max-batch"],
    &["-ser", "--smart-expert-reduction"],
    &["-thp", "--transparent-huge-pages"],
    &["-no-fug", "--no-fused-up-gate"],
    &["-no-mmad", "--no-fused-mul-multiadd"],
    &["-no-ooae", "--no-offload-only-active-experts"],
    &["-cuda", "--cuda-params"],
];

/// How ik spells what engines spell apart: `--fit` a switch with one `--fit-margin` (the
/// largest headroom asked), the load mode as `--no-mmap`/`--mlock`; then its own levers.
const DIALECT: Dialect = Dialect {
    fit: |c, a| {
        if c.fit == Some(true) {
            a.flag("--fit");
            if let Some(m) = c.fit_target_mib.iter().max() {
                a.pair("--fit-margin", m);
            }
        }
    },
    load_mode: |m, a| match m {
        LoadMode::Auto | LoadMode::Mmap | LoadMode::Dio => {}
        LoadMode::None => a.flag("--no-mmap"),
        LoadMode::Mlock => {
            a.flag("--no-mmap");
            a.flag("--mlock");
        }
        LoadMode::MmapMlock => a.flag("--mlock"),
    },
    own: |o, a| {
        if o.no_fused_moe {
            a.flag(OWN_FLAGS[1][0]);
        }
        if o.no_fused_up_gate {
            a.flag(OWN_FLAGS[5][0]);
        }
        if o.no_fused_mmad {
            a.flag(OWN_FLAGS[6][0]);
        }
        if o.no_only_active_experts {
            a.flag(OWN_FLAGS[7][0]);
        }
        if let Some(n) = o.attn_max_batch {
            a.pair(OWN_FLAGS[2][0], n);
        }
        if o.run_time_repack {
            a.flag(OWN_FLAGS[0][0]);
        }
        if let Some(k) = o.expert_reduction {
            a.pair(OWN_FLAGS[3][0], format!("{k},{SER_THRESHOLD}"));
        }
        if let Some(p) = &o.cuda_params {
            a.pair(OWN_FLAGS[8][0], p);
        }
    },
};

/// ik_llama.cpp's `llama-server` (`qtune server build --engine ik`, or the user's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IkLlama;

impl Engine for IkLlama {
    fn name(&self) -> &'static str {
        "ik_llama.cpp"
    }

    fn spelling(&self, flag: crate::engine::Flag) -> &'static str {
        match flag {
            crate::engine::Flag::FitTarget => "--fit-margin",
            f => crate::engine::flag::llama_cpp_spelling(f),
        }
    }

    fn server_args(&self, c: &LaunchConfig) -> Vec<String> {
        render(c, &self.caps(), &DIALECT)
    }

    /// Fused MoE off (on by default: measured, not assumed, on a MoE model); `-amb` where
    /// attention's compute buffer sits on a GPU; `-rtr` only where prompt processing stays on
    /// the GPU (its repacked layouts have no CUDA kernels, so experts on the CPU would lose
    /// op offload's prompt speed); `-ser` where its answers can be checked (lossy: see
    /// [`own_levers`]).
    fn own_levers(&self, c: &LaunchConfig, ctx: &super::LeverContext) -> super::OwnLevers {
        own_levers(c, ctx)
    }

    /// The server's default, as llama.cpp's: the space's context and slots, `-t` at a busy
    /// box's free cores.
    fn default_baseline(&self, fixed: &BaselineInputs) -> LaunchConfig {
        LaunchConfig {
            engine: EngineKind::IkLlama,
            ..super::LlamaCpp.default_baseline(fixed)
        }
    }

    /// `--fit --fit-margin <headroom>`: ik's auto-fit takes one margin for every device.
    fn fit_baseline(
        &self,
        fixed: &BaselineInputs,
        headroom_mib: u32,
        _cards: usize,
    ) -> LaunchConfig {
        self.default_baseline(fixed)
            .with_fit_targets(vec![headroom_mib])
    }

    /// `--log-disable`: ik has no `-lv` (an unknown flag stops its server) and logs its
    /// buffer sizes at its default verbosity; without the flag it also writes `llama.log`
    /// into its working folder (the user's, under a tune).
    fn log_args(&self) -> Vec<String> {
        vec!["--log-disable".to_string()]
    }

    /// ik has `--rpc`, but qtune builds it without GGML_RPC; it has no `--load-mode`
    /// (direct I/O), `--no-op-offload`, `--checkpoint-min-step`, `-kvu`, `-sm row`/`tensor`,
    /// and one `--fit-margin` for every device.
    fn caps(&self) -> Caps {
        Caps {
            direct_io: false,
            no_op_offload: false,
            checkpoint_min_step: false,
            kv_unified: false,
            rpc: false,
            split_row_tensor: false,
            fit_target_per_card: false,
            cuda_build: false,
            // ik_llama.cpp drafts with MTP through its own flags, not --spec-type draft-mtp.
            draft_mtp: false,
            own_levers: true,
        }
    }

    /// ik's load and memory lines are llama.cpp's own, but for its weights' buffers
    /// (`llm_load_tensors:        CPU buffer size = ...`, no "model") and its port line.
    fn log_dialect(&self) -> LogDialect {
        use super::llama_cpp::{ABORT, BAD_FLAG, OOM, OOM_BENIGN};
        LogDialect {
            bad_flag: BAD_FLAG,
            oom: OOM,
            oom_benign: OOM_BENIGN,
            abort: ABORT,
            // examples/server/server.cpp
            bind_failed: "couldn't bind to server socket",
            weights_buffer_prefix: Some("llm_load_tensors:"),
        }
    }

    fn required_flags(&self) -> &'static [&'static str] {
        &server::REQUIRED_FLAGS
    }

    /// ik's help names `--run-time-repack` and `--fit-margin`, flags llama.cpp does not have.
    fn recognizes(&self, help: &str) -> bool {
        super::server::help_has_flag(help, OWN_FLAGS[0][1])
            || super::server::help_has_flag(help, "--fit-margin")
    }

    fn build_command(&self) -> &'static str {
        "qtune server build --engine ik"
    }

    fn parse_command(&self, argv: &[String]) -> Result<super::ServerCommand, String> {
        parse::parse_command(argv)
    }

    /// qtune's build has no build number, and reads as its source package
    /// (`ik-llama-cpp-python 0.1.5`).
    fn is_pinned_build(&self, raw: &str) -> bool {
        raw.contains(server::VERSION_TAG)
    }

    fn version_text(&self, raw: &str) -> String {
        if self.is_pinned_build(raw) {
            return server::SDIST.replace("==", " ");
        }
        super::server::short_version(raw)
    }

    fn resolve(&self, explicit: Option<&Path>) -> Result<ServerBinary> {
        server::resolve(explicit)
    }

    fn build(&self, cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf> {
        server::build(cuda, say)
    }
}

/// The attention batch cap tried (`-amb 512`, the value ik's docs suggest for large batches).
pub const AMB_TRIED: u32 = 512;

/// ik's own levers on `c` ([`Engine::own_levers`]), each skipped lever with its reason.
pub fn own_levers(c: &LaunchConfig, ctx: &super::LeverContext) -> super::OwnLevers {
    let mut out = super::OwnLevers::default();
    let with = |f: &dyn Fn(&mut crate::config::EngineOpts)| {
        let mut v = c.clone();
        f(&mut v.engine_opts);
        v
    };
    if ctx.moe {
        out.configs.push(with(&|o| o.no_fused_moe = true));
    } else {
        out.skipped
            .push("ik_llama.cpp's fused MoE: not tried, the model has no experts".into());
    }
    if ctx.has_gpu {
        out.configs
            .push(with(&|o| o.attn_max_batch = Some(AMB_TRIED)));
    } else {
        out.skipped.push(
            "ik_llama.cpp's -amb: not tried, it caps attention's compute buffer on a GPU and this box has none"
                .into(),
        );
    }
    if ctx.has_gpu && !ctx.experts_on_cpu {
        out.configs.push(with(&|o| o.run_time_repack = true));
    } else {
        out.skipped.push(format!(
            "ik_llama.cpp's -rtr: not tried, {}",
            if ctx.has_gpu {
                "experts sit on the CPU and its repacked layouts have no CUDA kernels for prompt processing"
            } else {
                "prompt processing runs on the CPU here (no GPU), where repacking was not shown to help"
            }
        ));
    }
    match expert_reduction(ctx) {
        Ok(k) => out.configs.push(with(&|o| o.expert_reduction = Some(k))),
        Err(why) => out.skipped.push(format!(
            "ik_llama.cpp's -ser (smart expert reduction): not tried, {why}"
        )),
    }
    out.configs.retain(|v| v != c);
    out
}

/// `-ser K,T`'s threshold qtune passes: past the top K experts every expert is below the
/// top one's weight, so `K,1` computes exactly K experts a token.
pub const SER_THRESHOLD: u32 = 1;

/// The experts a token `-ser` keeps on this model: two fewer than the model's own, at least
/// one; or why it is not tried. It changes the model's answers, so it is tried only where
/// they are checked against the same config's without it ([`crate::trial::lossless`]):
/// the launch is `lossy` where they differ (measured, never recommended).
fn expert_reduction(ctx: &super::LeverContext) -> Result<u32, String> {
    if !ctx.moe {
        return Err("the model has no experts".into());
    }
    if ctx.pinned_build {
        // src/llama-build-context.cpp: the ggml_top_k_thresh call that applies it is commented
        // out of the MoE graph; every expert a token is computed whatever -ser says.
        return Err(format!(
            "qtune's build of {} parses it but does not apply it (its MoE graph leaves the \
             call out), so it would change nothing",
            server::SDIST.replace("==", " ")
        ));
    }
    if let Some(why) = ctx.answers_unchecked {
        return Err(format!("it changes the model's answers (lossy) and {why}"));
    }
    let k = ctx.experts_used.saturating_sub(2).max(1);
    if k >= ctx.experts_used {
        return Err(format!(
            "the model computes {} a token, none to spare",
            crate::util::count(u64::from(ctx.experts_used), "expert", "experts")
        ));
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FlashAttn, KvType};
    use crate::engine::LaunchArgs;

    /// ik's dialect: `--fit` a switch with `--fit-margin`, no `--load-mode` (`--no-mmap`,
    /// `--mlock`), no `-lv`; what it shares with llama.cpp reads the same.
    #[test]
    fn a_config_renders_in_iks_dialect() {
        let mut space = crate::space::load("default").unwrap();
        space.fixed.ctx = 4096;
        let e = IkLlama;
        let base = e.default_baseline(&space.fixed.baseline_inputs());
        assert_eq!(base.engine, EngineKind::IkLlama);
        assert_eq!(base.server_args().join(" "), "-c 4096 -np 1");
        assert_eq!(
            e.server_args(&e.fit_baseline(&space.fixed.baseline_inputs(), 1024, 2))
                .join(" "),
            "-c 4096 -np 1 --fit --fit-margin 1024"
        );
        let c = LaunchConfig {
            n_cpu_moe: Some(3),
            threads: Some(2),
            ubatch: Some(256),
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            flash_attn: FlashAttn::On,
            load_mode: LoadMode::Mlock,
            fit: Some(false),
            spec_type: Some(crate::config::SpecType::NgramMod),
            ..base.clone()
        };
        assert_eq!(
            c.server_args().join(" "),
            "-c 4096 -np 1 --n-cpu-moe 3 -t 2 -ub 256 -ctk q8_0 -ctv q8_0 -fa on --no-mmap --mlock --spec-type ngram-mod"
        );
        assert!(e.caps().expresses(&c));
        // The same config as llama.cpp renders it: the seam picks the dialect.
        let l = LaunchConfig {
            engine: EngineKind::LlamaCpp,
            ..c.clone()
        };
        assert_eq!(
            l.server_args().join(" "),
            "-c 4096 -np 1 --n-cpu-moe 3 -t 2 -ub 256 -ctk q8_0 -ctv q8_0 -fa on --fit off --load-mode mlock --spec-type ngram-mod"
        );
        let argv = c.command(Path::new("/ik"), Path::new("/m.gguf"), "127.0.0.1", 8080);
        assert_eq!(argv[..3].join(" "), "/ik -m /m.gguf");
        assert_eq!(
            argv[argv.len() - 4..].join(" "),
            "--host 127.0.0.1 --port 8080"
        );
        assert_eq!(e.log_args().join(" "), "--log-disable", "ik has no -lv");
        assert_eq!(crate::engine::LlamaCpp.log_args().join(" "), "-lv 4");
    }

    /// What ik has no flag for is named, and left out of its argv; llama.cpp lacks nothing.
    #[test]
    fn what_ik_cannot_express_is_named() {
        let c = LaunchConfig {
            engine: EngineKind::IkLlama,
            checkpoint_min_step: Some(1024),
            kv_unified: Some(true),
            op_offload: false,
            load_mode: LoadMode::Dio,
            ..LaunchConfig::baseline(2048)
        };
        assert_eq!(
            IkLlama.caps().unsupported(&c),
            vec![
                "--load-mode dio",
                "--no-op-offload",
                "--checkpoint-min-step",
                "-kvu/-no-kvu"
            ]
        );
        assert_eq!(c.server_args().join(" "), "-c 2048 -np 1");
        assert!(crate::engine::LlamaCpp.caps().expresses(&c));
    }

    /// The engine is part of a saved config only when it is not llama.cpp: every file written
    /// before reads as llama.cpp, and llama.cpp's configs serialize as they did.
    #[test]
    fn the_engine_is_saved_and_absent_reads_as_llama_cpp() {
        let l = LaunchConfig::baseline(2048);
        let text = serde_json::to_string(&l).unwrap();
        assert!(!text.contains("engine"), "{text}");
        let back: LaunchConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(back.engine, EngineKind::LlamaCpp);
        let ik = LaunchConfig {
            engine: EngineKind::IkLlama,
            ..l
        };
        let text = serde_json::to_string(&ik).unwrap();
        assert!(text.contains(r#""engine":"ik_llama.cpp""#), "{text}");
        assert_eq!(serde_json::from_str::<LaunchConfig>(&text).unwrap(), ik);
    }

    /// A server is ik_llama.cpp's when its help names `--run-time-repack` or `--fit-margin`.
    #[test]
    fn the_engine_is_told_from_the_help() {
        let ik = "-rtr, --run-time-repack     repack tensors\n--fit-margin N   MiB\n";
        assert_eq!(crate::engine::server::identify(ik), EngineKind::IkLlama);
        let llama = "--fit [on|off]\n--fit-target MiB0,MiB1\n-ncmoe, --n-cpu-moe N\n";
        assert_eq!(crate::engine::server::identify(llama), EngineKind::LlamaCpp);
        assert_eq!("ik".parse::<EngineKind>(), Ok(EngineKind::IkLlama));
        assert_eq!("llama.cpp".parse::<EngineKind>(), Ok(EngineKind::LlamaCpp));
        assert!("vllm"
            .parse::<EngineKind>()
            .unwrap_err()
            .contains("llama.cpp or ik"));
    }

    /// ik's own levers by the box (issue 56): fused MoE off on a MoE model, `-amb` only with a
    /// GPU, `-rtr` only where prompt processing stays on the GPU, `-ser` where the answers are
    /// checked. llama.cpp has none of them (its caps lack them: the search never proposes one).
    #[test]
    fn iks_own_levers_follow_the_box() {
        use crate::engine::LeverContext;
        let c = LaunchConfig {
            engine: EngineKind::IkLlama,
            ..LaunchConfig::baseline(2048)
        };
        let args = |ctx: &LeverContext| -> Vec<String> {
            own_levers(&c, ctx)
                .configs
                .iter()
                .map(|v| v.server_args()[4..].join(" "))
                .collect()
        };
        let cpu = LeverContext {
            has_gpu: false,
            experts_on_cpu: false,
            moe: true,
            experts_used: 8,
            answers_unchecked: None,
            pinned_build: false,
        };
        assert_eq!(args(&cpu), vec!["-no-fmoe", "-ser 6,1"]);
        let skipped = own_levers(&c, &cpu).skipped.join("\n");
        assert!(
            skipped.contains("-amb: not tried") && skipped.contains("-rtr: not tried"),
            "{skipped}"
        );
        // -ser changes the answers: not tried where they cannot be checked, saying why.
        let unchecked = LeverContext {
            answers_unchecked: Some("the model has random weights"),
            ..cpu
        };
        assert_eq!(args(&unchecked), vec!["-no-fmoe"]);
        assert!(own_levers(&c, &unchecked).skipped.contains(
            &"ik_llama.cpp's -ser (smart expert reduction): not tried, it changes the model's \
              answers (lossy) and the model has random weights"
                .to_string()
        ));
        // qtune's build of 0.1.5 parses -ser and leaves it out of its MoE graph: not tried.
        let pinned = LeverContext {
            pinned_build: true,
            ..cpu
        };
        assert_eq!(args(&pinned), vec!["-no-fmoe"]);
        assert!(own_levers(&c, &pinned).skipped.contains(
            &"ik_llama.cpp's -ser (smart expert reduction): not tried, qtune's build of \
              ik-llama-cpp-python 0.1.5 parses it but does not apply it (its MoE graph leaves \
              the call out), so it would change nothing"
                .to_string()
        ));
        assert!(IkLlama.is_pinned_build("version: 0 (ik-llama-cpp-python-0.1.5)"));
        assert!(!IkLlama.is_pinned_build("version: 4012 (abc123)"));
        // Two fewer experts than the model's own, at least one; none where it uses one.
        for (used, want) in [(2, Some("-ser 1,1")), (3, Some("-ser 1,1")), (1, None)] {
            let a = args(&LeverContext {
                experts_used: used,
                ..cpu
            });
            assert_eq!(
                a.last()
                    .map(String::as_str)
                    .filter(|a| a.starts_with("-ser")),
                want
            );
        }
        let gpu = LeverContext {
            has_gpu: true,
            experts_on_cpu: false,
            moe: true,
            experts_used: 8,
            answers_unchecked: None,
            pinned_build: false,
        };
        assert_eq!(args(&gpu), vec!["-no-fmoe", "-amb 512", "-rtr", "-ser 6,1"]);
        let hybrid = LeverContext {
            experts_on_cpu: true,
            ..gpu
        };
        assert_eq!(args(&hybrid), vec!["-no-fmoe", "-amb 512", "-ser 6,1"]);
        assert!(own_levers(&c, &hybrid)
            .skipped
            .join(" ")
            .contains("no CUDA kernels"));
        let dense = LeverContext {
            moe: false,
            experts_used: 0,
            ..gpu
        };
        assert_eq!(args(&dense), vec!["-amb 512", "-rtr"]);
        assert!(own_levers(&c, &dense).skipped.contains(
            &"ik_llama.cpp's -ser (smart expert reduction): not tried, the model has no experts"
                .to_string()
        ));
        // llama.cpp has none of ik's levers: such a config is not proposed on it.
        let on_llama = LaunchConfig {
            engine: EngineKind::LlamaCpp,
            ..own_levers(&c, &gpu).configs[0].clone()
        };
        assert!(!crate::engine::LlamaCpp.caps().expresses(&on_llama));
        assert!(crate::engine::LlamaCpp
            .own_levers(&on_llama, &gpu)
            .configs
            .is_empty());
    }
}
