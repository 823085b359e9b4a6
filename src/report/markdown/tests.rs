use super::*;

/// qtune's sentences keep their code spans; text from outside in them is escaped, and an
/// unmatched backtick is text.
#[test]
fn prose_keeps_qtune_code_spans_and_escapes_the_rest() {
    assert_eq!(
        prose("reference: the better of it and `-c 4096 --fit on`"),
        "reference: the better of it and `-c 4096 --fit on`"
    );
    assert_eq!(
        prose("workload: <b>x</b> [a](javascript:b) `c|d` e`f"),
        r"workload: &lt;b&gt;x&lt;/b&gt; \[a\](javascript:b) `c\|d` e\`f"
    );
    assert_eq!(prose("a\nb"), r"a\\nb");
}
use crate::run::sample;
use std::path::Path;

#[test]
fn gpu_report_has_the_commands_every_trial_and_the_emulated_card_note() {
    let (srv, model) = (
        Path::new("/opt/llama cpp/llama-server"),
        Path::new("/m/it's.gguf"),
    );
    let r = sample::gpu_result(srv, model);
    let md = render(&r, &*super::super::plots::PLOTS);
    let w = r.winner.as_ref().unwrap();
    assert!(md.contains(&format!("```sh\n{}\n```", shell_line(&w.command))));
    let base = LaunchConfig::baseline(8192).command(srv, model, DEFAULT_HOST, DEFAULT_PORT);
    assert!(md.contains(&shell_line(&base)));
    assert!(md.contains("'/m/it'\\''s.gguf'"), "paths are shell-quoted");
    for t in &r.trials {
        assert!(
            md.contains(&format!("\n| {} | ", t.id)),
            "trial {} missing from the table",
            t.id
        );
    }
    for needle in [
        "# qtune report: Sample qwen3moe — 2025-11-22",
        "**+120.9 %**",
        "Emulated card",
        "another process (e.g. a ballast emulating a smaller card) held the rest",
        "VRAM budget:** 15,360 MiB",
        "**oom-load**",
        "cudaMalloc failed to allocate 1,230 MiB",
        "compute buffer \\| 1,024 MiB",
        "trial 5: spread 14 %",
        "![Generation speed vs peak VRAM](plot-vram.png)",
        "[SVG](plot-ncmoe.svg)",
        "| qwen3moe | 48 | 128 (8) | Q4_K_M |",
        "## Where the time goes (speed model)",
        "| generation (tok/s) | ",
        "% reached) |",
        "One generated token, as modelled: GPU weights and KV ",
        "| tg % of bound |",
        "## The speed model's pick",
        "the config the speed model rated best for this card",
        "It is the winner.",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    // A CPU tune has no pick, and says nothing of one.
    let cpu = sample::cpu_result(srv, model);
    assert!(!render(&cpu, &[]).contains("speed model's pick"));
}

#[test]
fn a_winner_that_places_itself_is_modelled_as_its_fit_would_place_it() {
    let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
    let base = LaunchConfig::baseline(r.inputs.space.fixed.ctx);
    r.winner.as_mut().unwrap().config = base.clone();
    let md = render(&r, &[]);
    assert!(
        md.contains("The winner places itself: modelled as its fit is expected to place it"),
        "{md}"
    );
    assert!(!md.contains("No model prediction for the winner"), "{md}");
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.inputs.hardware);
    let stand_in = server_placement(&r, &base).expect("one GPU, a MoE model");
    assert!(!stand_in.is_auto_placement(), "{}", stand_in.label());
    assert!(speed_of(&r, &sb, &base).is_some());
    // Two GPUs: the split is the server's too; not modelled.
    let mut two = r.clone();
    let g = two.inputs.hardware.gpus[0].clone();
    two.inputs.hardware.gpus.push(g);
    assert!(server_placement(&two, &base).is_none());
}

#[test]
fn cpu_report_says_no_gpu_and_no_winner_is_explained() {
    let mut r = sample::cpu_result(Path::new("/s"), Path::new("/m.gguf"));
    let md = render(&r, &[]);
    assert!(md.contains("**GPU:** none (NVML not found"));
    assert!(!md.contains("Emulated card"));
    assert!(!md.contains("VRAM budget"));
    assert!(md.contains("| dense |"));
    r.winner = None;
    let md = render(&r, &[]);
    assert!(md.contains("**No winner:**"));
    assert!(!md.contains("launch.sh"));
    assert!(md.contains("exited with status 134"));
}

#[test]
fn a_card_with_most_vram_free_is_not_called_emulated() {
    let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
    r.inputs.hardware.gpus[0].vram_total_mib = 24_576;
    r.inputs.hardware.gpus[0].vram_free_mib = 23_000;
    assert!(!render(&r, &[]).contains("Emulated card"));
}
