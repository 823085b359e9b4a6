//! Tests of `config`: rendering, placement rules, parsing back.
use super::*;
use crate::engine::{parse_command, LaunchArgs};
use std::path::Path;

#[test]
fn baseline_passes_no_placement_flags() {
    let args = LaunchConfig::baseline(8192).server_args();
    assert_eq!(args, ["-c", "8192", "-np", "1"]);
}

#[test]
fn manual_config_renders_every_flag_once() {
    let cfg = LaunchConfig {
        n_gpu_layers: Some(999),
        n_cpu_moe: Some(24),
        threads: Some(8),
        batch: Some(2048),
        ubatch: Some(512),
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        flash_attn: FlashAttn::On,
        load_mode: LoadMode::None,
        fit: Some(false),
        ..LaunchConfig::baseline(32768)
    };
    let line = cfg.server_args().join(" ");
    assert_eq!(
        line,
        "-c 32768 -np 1 -ngl 999 --n-cpu-moe 24 -t 8 -b 2048 -ub 512 -ctk q8_0 -ctv q8_0 -fa on --fit off --load-mode none"
    );
    assert_eq!(
        cfg.label(),
        "-ngl 999 --n-cpu-moe 24 -t 8 -b 2048 -ub 512 -ctk q8_0 -ctv q8_0 -fa on --fit off --load-mode none"
    );
    assert_eq!(cfg.flags(), line);
    assert_eq!(LaunchConfig::baseline(4096).label(), "server defaults");
    assert_eq!(LaunchConfig::baseline(4096).flags(), "-c 4096 -np 1");
}

#[test]
fn number_ranges_render_as_short_exact_regexes() {
    let alt = |lo: u32, hi: u32| BlockSet::new(lo..=hi).regex_alternation();
    assert_eq!(alt(36, 47), "3[6-9]|4[0-7]");
    assert_eq!(alt(0, 2), "[0-2]");
    assert_eq!(alt(5, 5), "5");
    assert_eq!(alt(8, 12), "[8-9]|1[0-2]");
    assert_eq!(alt(40, 47), "4[0-7]");
    assert_eq!(alt(0, 47), "[0-9]|[1-3][0-9]|4[0-7]");
    assert_eq!(alt(95, 105), "9[5-9]|10[0-5]");
    assert_eq!(BlockSet::new([1, 3, 4, 9]).regex_alternation(), "1|[3-4]|9");
}

/// Every number 0..300 is matched by the alternation of a set exactly when it is in the
/// set (checked with a real regex engine, anchored the way the `blk\.N\.` rule anchors it).
#[test]
fn number_range_regex_is_exact_for_every_range_below_300() {
    use regex_automata::meta::Regex;
    for lo in (0..130).step_by(7) {
        for hi in (lo..300).step_by(11) {
            let set = BlockSet::new((lo..=hi).chain([hi + 3]));
            let re = Regex::new(&format!(r"^({})$", set.regex_alternation())).unwrap();
            for n in 0..310u32 {
                assert_eq!(
                    re.is_match(&n.to_string()),
                    set.contains(n),
                    "{n} against {} ({set})",
                    set.regex_alternation()
                );
            }
        }
    }
}

#[test]
fn expert_placement_renders_one_ot_rule_per_regex() {
    let cfg = LaunchConfig {
        n_gpu_layers: Some(999),
        fit: Some(false),
        cpu_experts: Some(CpuExperts {
            blocks: BlockSet::last(12, 48),
            partial: Some(PartialBlock::new(35, [ExpertProj::Down, ExpertProj::Gate])),
        }),
        load_mode: LoadMode::None,
        ..LaunchConfig::baseline(32768)
    };
    assert_eq!(
        cfg.server_args(),
        [
            "-c",
            "32768",
            "-np",
            "1",
            "-ngl",
            "999",
            "-ot",
            r"blk\.(3[6-9]|4[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
            "-ot",
            r"blk\.35\.ffn_(gate|down)_(ch|)exps=CPU",
            "--fit",
            "off",
            "--load-mode",
            "none"
        ]
    );
    assert_eq!(
        cfg.label(),
        r"-ngl 999 -ot 'blk\.(3[6-9]|4[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU' -ot 'blk\.35\.ffn_(gate|down)_(ch|)exps=CPU' --fit off --load-mode none"
    );
    // No rule holds a comma: llama.cpp splits an -ot value on commas.
    assert!(cfg.server_args().iter().all(|a| !a.contains(',')));
    assert!(cfg.check().is_ok());
    // The launch script's quoting hands the shell's words back unchanged.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s\\n' {}", shell_line(&cfg.server_args())))
        .output()
        .unwrap();
    let words: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(words, cfg.server_args());
}

#[test]
fn first_n_with_a_partial_block_adds_to_n_cpu_moe() {
    let cfg = LaunchConfig {
        n_gpu_layers: Some(999),
        n_cpu_moe: Some(12),
        cpu_experts: Some(CpuExperts {
            blocks: BlockSet::default(),
            partial: Some(PartialBlock::new(12, [ExpertProj::Down])),
        }),
        ..LaunchConfig::baseline(8192)
    };
    assert_eq!(
        cfg.server_args().join(" "),
        r"-c 8192 -np 1 -ngl 999 --n-cpu-moe 12 -ot blk\.12\.ffn_(down)_(ch|)exps=CPU"
    );
    assert_eq!(
        cfg.label(),
        r"-ngl 999 --n-cpu-moe 12 -ot 'blk\.12\.ffn_(down)_(ch|)exps=CPU'"
    );
}

#[test]
fn fit_candidate_has_no_placement_flags_and_keeps_the_rest() {
    let tuned = LaunchConfig {
        n_gpu_layers: Some(999),
        n_cpu_moe: Some(13),
        fit: Some(false),
        threads: Some(8),
        ubatch: Some(2048),
        batch: Some(2048),
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        load_mode: LoadMode::None,
        op_offload: false,
        ..LaunchConfig::baseline(32768)
    };
    let fit = tuned.with_fit_placement(512);
    assert!(fit.is_fit_placement() && fit.check().is_ok());
    assert_eq!(
        fit.server_args().join(" "),
        "-c 32768 -np 1 -t 8 -b 2048 -ub 2048 -ctk q8_0 -ctv q8_0 --fit on --fit-target 512 --load-mode none --no-op-offload"
    );
    assert_eq!(
        fit.label(),
        "-t 8 -b 2048 -ub 2048 -ctk q8_0 -ctv q8_0 --fit on --fit-target 512 --load-mode none --no-op-offload"
    );
    // fit gives up when placement is set: such a config is refused before launch.
    let both = LaunchConfig {
        n_cpu_moe: Some(3),
        ..fit.clone()
    };
    assert!(both.check().unwrap_err().contains("--fit on"));
}

#[test]
fn old_results_with_mmap_still_read_and_new_fields_stay_out_of_old_shaped_json() {
    let old = r#"{"ctx":8192,"parallel":1,"n_gpu_layers":999,"n_cpu_moe":13,"threads":null,
        "batch":null,"ubatch":512,"cache_type_k":"q8_0","cache_type_v":"q8_0",
        "flash_attn":"on","mmap":true,"fit":false}"#;
    let c: LaunchConfig = serde_json::from_str(old).unwrap();
    assert_eq!(c.load_mode, LoadMode::Auto);
    assert!(!c
        .server_args()
        .iter()
        .any(|a| a.contains("mmap") || a == "--load-mode"));
    let off: LaunchConfig =
        serde_json::from_str(&old.replace(r#""mmap":true"#, r#""mmap":false"#)).unwrap();
    assert_eq!(off.load_mode, LoadMode::None);
    // Written again: load_mode by name, and none of the empty new fields.
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.contains(r#""load_mode":"auto""#), "{json}");
    for absent in ["cpu_experts", "fit_target_mib", "op_offload", "mmap"] {
        assert!(!json.contains(absent), "{json}");
    }
    // A full new config round-trips through JSON and YAML.
    let new = LaunchConfig {
        cpu_experts: Some(CpuExperts {
            blocks: BlockSet::new([0, 1, 2, 40, 41]),
            partial: Some(PartialBlock::new(39, [ExpertProj::Down])),
        }),
        load_mode: LoadMode::MmapMlock,
        op_offload: false,
        fit_target_mib: vec![512, 1024],
        ..c.clone()
    };
    let json = serde_json::to_string(&new).unwrap();
    assert!(json.contains(r#""blocks":"0-2,40-41""#), "{json}");
    assert_eq!(serde_json::from_str::<LaunchConfig>(&json).unwrap(), new);
    let yaml = serde_yaml::to_string(&new).unwrap();
    assert_eq!(serde_yaml::from_str::<LaunchConfig>(&yaml).unwrap(), new);
    // Both spellings at once, or a bad mode, are errors that name the field.
    assert!(serde_json::from_str::<LaunchConfig>(
        &old.replace(r#""fit":false"#, r#""fit":false,"load_mode":"none""#)
    )
    .is_err());
    let bad = serde_json::from_str::<LaunchConfig>(
        &old.replace(r#""mmap":true"#, r#""load_mode":"fast""#),
    )
    .unwrap_err()
    .to_string();
    assert!(bad.contains("unknown load mode 'fast'"), "{bad}");
}

#[test]
fn block_sets_parse_and_placements_are_checked_against_the_model() {
    assert_eq!(
        "0-3, 40-41,7".parse::<BlockSet>().unwrap().to_string(),
        "0-3,7,40-41"
    );
    assert!("3-1".parse::<BlockSet>().is_err());
    assert!("x".parse::<BlockSet>().is_err());
    let p = CpuExperts::last(4, 48);
    assert!(p.check(48).is_ok());
    assert!(p
        .check(40)
        .unwrap_err()
        .contains("block 44 is out of range"));
    let both = CpuExperts {
        blocks: BlockSet::first(3),
        partial: Some(PartialBlock::new(2, [ExpertProj::Up])),
    };
    assert!(both
        .check(48)
        .unwrap_err()
        .contains("both whole and partial"));
    assert_eq!(
        ExpertProj::of_tensor("blk.3.ffn_gate_up_exps.weight"),
        Some(ExpertProj::GateUp)
    );
    assert_eq!(
        ExpertProj::of_tensor("blk.3.ffn_down_chexps.bias"),
        Some(ExpertProj::Down)
    );
    assert_eq!(ExpertProj::of_tensor("blk.3.ffn_down_shexp.weight"), None);
}

#[test]
fn shell_quoting_survives_metacharacters() {
    assert_eq!(shell_quote("plain/path.gguf"), "plain/path.gguf");
    assert_eq!(shell_quote("my model.gguf"), "'my model.gguf'");
    assert_eq!(shell_quote("it's $HOME`x`"), r"'it'\''s $HOME`x`'");
    assert_eq!(shell_quote(""), "''");
}

fn words(line: &str) -> Vec<String> {
    split_shell_line(line).unwrap()
}

#[test]
fn a_rendered_command_parses_back_to_the_same_config() {
    let configs = [
        LaunchConfig::baseline(32768),
        LaunchConfig {
            n_gpu_layers: Some(999),
            n_cpu_moe: Some(13),
            threads: Some(8),
            batch: Some(2048),
            ubatch: Some(2048),
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q4_0,
            flash_attn: FlashAttn::On,
            load_mode: LoadMode::None,
            fit: Some(false),
            op_offload: false,
            ..LaunchConfig::baseline(32768)
        },
        LaunchConfig {
            n_gpu_layers: Some(999),
            fit: Some(false),
            cpu_experts: Some(CpuExperts {
                blocks: BlockSet::new((0..3).chain(36..48).chain([101, 250])),
                partial: Some(PartialBlock::new(35, [ExpertProj::Down, ExpertProj::Gate])),
            }),
            load_mode: LoadMode::MmapMlock,
            ubatch: Some(256),
            ..LaunchConfig::baseline(32768)
        },
        LaunchConfig {
            n_gpu_layers: Some(999),
            fit: Some(false),
            cpu_experts: Some(CpuExperts {
                blocks: BlockSet::default(),
                partial: Some(PartialBlock::new(7, [ExpertProj::GateUp])),
            }),
            ..LaunchConfig::baseline(4096)
        },
        LaunchConfig {
            fit: Some(true),
            fit_target_mib: vec![512, 1024],
            load_mode: LoadMode::None,
            flash_attn: FlashAttn::Off,
            ..LaunchConfig::baseline(8192)
        },
        LaunchConfig {
            parallel: 4,
            spec_type: Some(SpecType::NgramMod),
            checkpoint_min_step: Some(1024),
            kv_unified: Some(true),
            ..LaunchConfig::baseline(65536)
        },
    ];
    for cfg in configs {
        let argv = cfg.command(
            Path::new("/opt/llama server/llama-server"),
            Path::new("/m/it's a model.gguf"),
            "0.0.0.0",
            8080,
        );
        let line = shell_line(&argv);
        let back = parse_command(&words(&line)).unwrap();
        assert_eq!(back.config, cfg, "{line}");
        assert_eq!(back.server, "/opt/llama server/llama-server");
        assert_eq!(
            back.model.as_deref(),
            Some(Path::new("/m/it's a model.gguf"))
        );
        assert_eq!(
            (back.host.as_deref(), back.port),
            (Some("0.0.0.0"), Some(8080))
        );
        assert_eq!(
            shell_line(&back.config.server_args()),
            shell_line(&cfg.server_args())
        );
    }
}

#[test]
fn long_flag_spellings_and_fit_target_parse() {
    let c = parse_command(&words(
        "llama-server --model M.gguf --ctx-size=32768 --parallel 1 --fit-target 512",
    ))
    .unwrap();
    assert_eq!(c.server, "llama-server");
    assert_eq!(c.config.fit_target_mib, [512]);
    assert_eq!(
        c.config.server_args().join(" "),
        "-c 32768 -np 1 --fit-target 512"
    );
    assert_eq!(c.config.label(), "--fit-target 512");
}

#[test]
fn bad_commands_are_one_clear_error() {
    let err = |line: &str| parse_command(&words(line)).unwrap_err();
    assert!(err("llama-server -m M.gguf -c 4096 -np 1 --mlock").contains("unknown flag '--mlock'"));
    assert!(err("llama-server -m M.gguf -np 1").contains("no -c"));
    assert!(err("llama-server -m M.gguf -c 4096").contains("no -np"));
    assert!(err("llama-server -m M.gguf -c big -np 1").contains("whole number"));
    assert!(err("llama-server -c 1 -c 2 -np 1").contains("twice"));
    assert!(err("llama-server -c 4096 -np 1 -ctk q3").contains("unknown KV cache type"));
    assert!(err("llama-server -c 4096 -np 1 -t").contains("-t needs a value"));
    // Issue 53: a value is quoted by its first characters, and -ts by what llama.cpp takes.
    let long = format!("llama-server -c 4096 -np 1 -ot {}=CPU", "a".repeat(100_000));
    let e = err(&long);
    assert!(
        e.len() < 400 && e.contains("(100004 characters)"),
        "{}",
        e.len()
    );
    let ts = |n: usize| format!("llama-server -c 4096 -np 1 -ts {}", vec!["1"; n].join(","));
    assert!(err(&ts(16)).contains("-ts gives 16 proportions"));
    assert!(parse_command(&words(&ts(15))).is_ok());
    assert!(err("-c 4096").contains("server binary"));
    assert!(err("llama-server stray -c 1 -np 1").contains("unexpected word 'stray'"));
    assert!(parse_command(&[]).is_err());
    assert!(err(r"llama-server -c 4096 -np 1 -ot exps=CPU").contains("-ot 'exps=CPU'"));
    assert!(err(
        r"llama-server -c 4096 -np 1 -ot blk\.(1[a-z])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"
    )
    .contains("not an expert placement"));
    assert!(err("llama-server -c 4096 -np 1 --load-mode fast").contains("unknown load mode"));
    assert!(err("llama-server -c 4096 -np 1 --no-op-offload=1").contains("takes no value"));
    assert!(err("llama-server -c 4096 -np 1 --fit maybe").contains("--fit takes on or off"));
}

#[test]
fn load_mode_ot_rules_and_no_op_offload_parse_back() {
    let c = parse_command(&words(
        r"llama-server -c 8192 -np 1 -ngl 999 -ot 'blk\.(0|1|2)\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU' -ot 'blk\.3\.ffn_(down)_(ch|)exps=CPU' --fit off --load-mode none --no-op-offload",
    ))
    .unwrap();
    let e = c.config.cpu_experts.clone().unwrap();
    assert_eq!(e.blocks, BlockSet::first(3));
    assert_eq!(e.partial, Some(PartialBlock::new(3, [ExpertProj::Down])));
    assert_eq!(c.config.load_mode, LoadMode::None);
    assert!(!c.config.op_offload);
    assert_eq!(c.config.fit, Some(false));
}

#[test]
fn shell_lines_split_like_a_shell() {
    assert_eq!(
        words(r#"a 'b c' "d \"e\"" f\ g  'it'\''s'"#),
        ["a", "b c", "d \"e\"", "f g", "it's"]
    );
    assert!(split_shell_line("a 'b").is_err());
    assert!(split_shell_line("a \"b").is_err());
    assert_eq!(words("  "), Vec::<String>::new());
    // bash's $'...' quoting, as shell_quote writes a word with a line break or an escape.
    assert_eq!(
        words(r"$'a\nb' $'it\'s \\ \x1b[2J\xe2\x80\xae' x$'\t'y"),
        ["a\nb", "it's \\ \u{1b}[2J\u{202e}", "x\ty"]
    );
    assert!(split_shell_line("$'a").is_err());
    for w in [
        "a\nb",
        "\u{1b}]0;T\u{7}",
        "tab\there",
        "it's\r",
        "\u{202e}x",
        "\u{85}",
    ] {
        assert_eq!(words(&shell_quote(w)), [w], "{w:?}");
    }
}

#[test]
fn kv_type_parses_case_insensitively_and_rejects_unknown() {
    assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
    assert!("q3_k".parse::<KvType>().is_err());
}

#[test]
fn two_gpu_flags_render_check_and_parse_back() {
    let mut cfg = LaunchConfig {
        ubatch: Some(512),
        ..LaunchConfig::baseline(32768)
    };
    cfg.place_on_gpus(vec![60, 40], BlockSet::new([20, 21, 38, 39]));
    cfg.gpu_experts = vec![GpuExperts {
        device: 1,
        blocks: BlockSet::new([5, 6]),
    }];
    cfg.split_mode = Some(SplitMode::Layer);
    assert_eq!(cfg.check(), Ok(()));
    let args = cfg.server_args();
    assert_eq!(
        args.join(" "),
        r"-c 32768 -np 1 -ngl 999 -sm layer -ts 60,40 -ot blk\.(2[0-1]|3[8-9])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU -ot blk\.([5-6])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CUDA1 -ub 512 --fit off"
    );
    assert_eq!(
        cfg.label(),
        r"-ngl 999 -sm layer -ts 60,40 -ot 'blk\.(2[0-1]|3[8-9])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU' -ot 'blk\.([5-6])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CUDA1' -ub 512 --fit off"
    );
    assert!(!cfg.is_auto_placement());
    // Read back exactly, long spellings too.
    let mut argv = vec!["llama-server".to_string(), "-m".into(), "m.gguf".into()];
    argv.extend(args);
    assert_eq!(parse_command(&argv).unwrap().config, cfg);
    let long = words("llama-server -c 4096 -np 1 --split-mode row --tensor-split 3,1");
    let p = parse_command(&long).unwrap().config;
    assert_eq!(p.split_mode, Some(SplitMode::Row));
    assert_eq!(p.tensor_split, vec![3, 1]);
    // Tensor parallelism reads back, and is refused with a quantized KV cache or with fit.
    let tp = parse_command(&words(
        "llama-server -m m.gguf -c 32768 -np 1 -ngl 999 -sm tensor -fa on --fit off",
    ))
    .unwrap()
    .config;
    assert_eq!(tp.split_mode, Some(SplitMode::Tensor));
    assert_eq!(tp.check(), Ok(()));
    assert!(tp.server_args().join(" ").contains("-sm tensor"));
    let quantized = LaunchConfig {
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..tp.clone()
    };
    assert!(quantized.check().unwrap_err().contains("unquantized KV"));
    let fit = LaunchConfig {
        split_mode: Some(SplitMode::Tensor),
        fit: Some(true),
        ..LaunchConfig::baseline(4096)
    };
    assert!(fit.check().unwrap_err().contains("-sm row|tensor"));
    // fit refuses a split or a GPU override; overlapping placements are refused.
    let fit = cfg.with_fit_targets(vec![512, 512]);
    assert!(fit.is_fit_placement());
    assert_eq!(
        fit.server_args().join(" "),
        "-c 32768 -np 1 -ub 512 --fit on --fit-target 512,512"
    );
    let bad = LaunchConfig {
        fit: Some(true),
        n_gpu_layers: None,
        cpu_experts: None,
        ..cfg.clone()
    };
    assert!(
        bad.check().unwrap_err().contains("-ts"),
        "{:?}",
        bad.check()
    );
    let mut twice = cfg.clone();
    twice.gpu_experts[0].blocks = BlockSet::new([21]);
    assert!(twice.check().unwrap_err().contains("block 21"));
    for (line, want) in [
        (
            "llama-server -c 1 -np 1 -ot 'blk\\.(1)\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CUDAx'",
            "not a device name",
        ),
        (
            "llama-server -c 1 -np 1 -ot 'blk\\.1\\.attn=CUDA1'",
            "not an expert placement",
        ),
        ("llama-server -c 1 -np 1 -sm fast", "unknown split mode"),
    ] {
        let e = parse_command(&words(line)).unwrap_err();
        assert!(e.contains(want), "{line}: {e}");
    }
    // Old JSON without the fields reads as no split; a split round-trips.
    let json = serde_json::to_string(&cfg).unwrap();
    assert_eq!(serde_json::from_str::<LaunchConfig>(&json).unwrap(), cfg);
    let single = serde_json::to_string(&LaunchConfig::baseline(8192)).unwrap();
    for absent in ["split_mode", "tensor_split", "gpu_experts"] {
        assert!(!single.contains(absent), "{single}");
    }
}

#[test]
fn the_levers_render_and_read_back_as_the_server_spells_them() {
    let c = LaunchConfig {
        spec_type: Some(SpecType::NgramSimple),
        checkpoint_min_step: Some(2048),
        ..LaunchConfig::baseline(8192)
    };
    let args = c.server_args();
    let line = args.join(" ");
    assert!(line.contains("--spec-type ngram-simple"), "{line}");
    assert!(line.contains("--checkpoint-min-step 2048"), "{line}");
    // The short spelling and an explicit `none` read back too.
    let p = parse_command(&words(
        "llama-server -m m.gguf -c 8192 -np 1 -cms 512 --spec-type none",
    ))
    .unwrap();
    assert_eq!(p.config.checkpoint_min_step, Some(512));
    assert_eq!(p.config.spec_type, None);
    let u = parse_command(&words("llama-server -m m.gguf -c 8192 -np 2 --kv-unified")).unwrap();
    assert_eq!(u.config.kv_unified, Some(true));
    let both = parse_command(&words("llama-server -m m.gguf -c 8192 -np 2 -kvu -no-kvu"));
    assert!(both.unwrap_err().contains("not both"));
    // The model's own MTP layer drafts without a separate model: read back (issue 54).
    let m = parse_command(&words(
        "llama-server -m m.gguf -c 8192 -np 1 --spec-type draft-mtp",
    ))
    .unwrap();
    assert_eq!(m.config.spec_type, Some(SpecType::DraftMtp));
    assert!(m.config.label().ends_with("--spec-type draft-mtp"));
    // A type that needs a draft model is refused in one line that names what qtune tunes.
    let e = parse_command(&words(
        "llama-server -m m.gguf -c 8192 -np 1 --spec-type draft-simple",
    ))
    .unwrap_err();
    assert!(
        e.contains("ngram-mod, ngram-simple, ngram-map-k or draft-mtp") && !e.contains('\n'),
        "{e}"
    );
    // A config without levers is still the plain baseline.
    assert_eq!(LaunchConfig::baseline(8192).label(), "server defaults");
    assert!(
        c.label().contains("--spec-type ngram-simple"),
        "{}",
        c.label()
    );
}

/// The refusals name their flags as llama.cpp spells them, word for word as before the flags
/// came from the engine (issue 56).
#[test]
fn the_checks_refusals_read_as_before_the_engine_spelled_them() {
    let fit = LaunchConfig::baseline(4096).with_fit_placement(512);
    let placed = LaunchConfig {
        n_cpu_moe: Some(3),
        ..fit.clone()
    };
    assert_eq!(
        placed.check().unwrap_err(),
        "--fit on cannot be combined with -ngl, --n-cpu-moe or -ot rules: fit refuses to run \
         with placement set"
    );
    let split = LaunchConfig {
        tensor_split: vec![1, 1],
        ..fit.clone()
    };
    assert_eq!(
        split.check().unwrap_err(),
        "--fit on cannot be combined with -ts, -sm row|tensor or -ot rules naming a GPU: fit \
         refuses to run with a split set"
    );
    let zero = LaunchConfig {
        tensor_split: vec![0, 0],
        ..LaunchConfig::baseline(4096)
    };
    assert_eq!(
        zero.check().unwrap_err(),
        "-ts gives every GPU a share of 0"
    );
    let target = LaunchConfig {
        fit: Some(false),
        fit_target_mib: vec![512],
        ..LaunchConfig::baseline(4096)
    };
    assert_eq!(target.check().unwrap_err(), "--fit-target needs --fit on");
}
