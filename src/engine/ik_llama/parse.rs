//! An ik_llama.cpp command as qtune renders it ([`super::IkLlama`]'s `server_args`) read back
//! into a [`LaunchConfig`]: its own spellings turned into llama.cpp's (`--fit` /
//! `--fit-margin`, `--no-mmap` / `--mlock`), read by llama.cpp's parser, then its own levers
//! (`-no-fmoe`, `-no-fug`, `-no-mmad`, `-no-ooae`, `-amb`, `-rtr`, `-ser`, `-cuda`) set on the
//! config.

use super::OWN_FLAGS;
use crate::config::{EngineKind, LaunchConfig};
use crate::engine::{Engine, ServerCommand};

/// Whether `argv` spells a flag only ik_llama.cpp has (its own levers, `--fit-margin`): a
/// command that llama.cpp's parser refuses is read as ik's only then. Flags both servers
/// know (`--mlock`, `--no-mmap`) say nothing of the engine: a llama.cpp command that uses
/// one qtune does not vary stays llama.cpp's, with llama.cpp's error.
pub fn speaks_only_ik(argv: &[String]) -> bool {
    argv.iter()
        .any(|a| a == "--fit-margin" || OWN_FLAGS.iter().any(|f| f.contains(&a.as_str())))
}

/// Read back an ik_llama.cpp argv ([`crate::engine::Engine::parse_command`]).
pub fn parse_command(argv: &[String]) -> Result<ServerCommand, String> {
    let is = |a: &str, k: usize| OWN_FLAGS[k].contains(&a);
    let mut rest: Vec<String> = Vec::new();
    let (mut no_mmap, mut mlock, mut fit, mut margin) = (false, false, false, None);
    let mut opts = crate::config::EngineOpts::default();
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].as_str();
        let value = || {
            argv.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a {
            "--no-mmap" => no_mmap = true,
            "--mlock" => mlock = true,
            "--fit" => fit = true,
            "--fit-margin" => {
                margin = Some(value()?);
                i += 1;
            }
            _ if is(a, 1) => opts.no_fused_moe = true,
            _ if is(a, 5) => opts.no_fused_up_gate = true,
            _ if is(a, 6) => opts.no_fused_mmad = true,
            _ if is(a, 7) => opts.no_only_active_experts = true,
            _ if is(a, 0) => opts.run_time_repack = true,
            _ if is(a, 8) => {
                opts.cuda_params = Some(cuda_params(a, &value()?)?);
                i += 1;
            }
            _ if is(a, 3) => {
                opts.expert_reduction = parse_ser(a, &value()?)?;
                i += 1;
            }
            _ if is(a, 2) => {
                let v = value()?;
                opts.attn_max_batch = Some(
                    v.parse()
                        .map_err(|_| format!("{a} takes a number of tokens, not '{v}'"))?,
                );
                i += 1;
            }
            _ => rest.push(argv[i].clone()),
        }
        i += 1;
    }
    if fit {
        rest.extend(["--fit".to_string(), "on".to_string()]);
    }
    if let Some(m) = margin {
        if !fit {
            return Err("--fit-margin without --fit: ik's auto-fit is off".to_string());
        }
        rest.extend(["--fit-target".to_string(), m]);
    }
    let mode = match (no_mmap, mlock) {
        (true, true) => Some("mlock"),
        (true, false) => Some("none"),
        (false, true) => Some("mmap+mlock"),
        (false, false) => None,
    };
    if let Some(m) = mode {
        rest.extend(["--load-mode".to_string(), m.to_string()]);
    }
    let mut cmd = crate::engine::LlamaCpp.parse_command(&rest)?;
    cmd.config = LaunchConfig {
        engine: EngineKind::IkLlama,
        engine_opts: opts,
        ..cmd.config
    };
    Ok(cmd)
}

/// `-cuda KEY=VALUE[,KEY=VALUE...]` (ik's `ggml_backend_cuda_init` reads the keys; one it does
/// not know stops nothing there, so only the shape is checked here).
fn cuda_params(flag: &str, v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.split(',').all(|kv| {
            kv.split_once('=').is_some_and(|(k, x)| {
                !k.is_empty()
                    && !x.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    && x.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
            })
        });
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!(
            "{flag} takes KEY=VALUE pairs split by commas (mmq-id-size=0,fusion=0), not '{v}'"
        ))
    }
}

/// `-ser K,T` as qtune renders it (`K,1`: K experts a token) or ik's default (`-1,0`: off);
/// another threshold is ik's but not a setting qtune reads.
fn parse_ser(flag: &str, v: &str) -> Result<Option<u32>, String> {
    let bad = || format!("{flag} takes K,1 (K experts a token) or -1,0 (off), not '{v}'");
    let (k, t) = v.split_once(',').ok_or_else(bad)?;
    let t: f64 = t.trim().parse().map_err(|_| bad())?;
    match k.trim().parse::<i64>().map_err(|_| bad())? {
        k if k <= 0 && t <= 0.0 => Ok(None),
        k if k >= 1 && t == f64::from(super::SER_THRESHOLD) => {
            Ok(Some(u32::try_from(k).map_err(|_| bad())?))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FlashAttn, KvType, LoadMode};
    use crate::engine::{IkLlama, LaunchArgs};
    use std::path::Path;

    /// Render then parse gives the same config, ik's own levers and dialect included.
    #[test]
    fn an_ik_command_reads_back_as_rendered() {
        let base = LaunchConfig {
            engine: EngineKind::IkLlama,
            ..LaunchConfig::baseline(4096)
        };
        let cases = [
            base.clone(),
            LaunchConfig {
                n_cpu_moe: Some(3),
                threads: Some(2),
                ubatch: Some(256),
                cache_type_k: KvType::Q8_0,
                cache_type_v: KvType::Q8_0,
                flash_attn: FlashAttn::On,
                load_mode: LoadMode::Mlock,
                engine_opts: crate::config::EngineOpts {
                    no_fused_moe: true,
                    attn_max_batch: Some(512),
                    run_time_repack: true,
                    expert_reduction: Some(6),
                    ..Default::default()
                },
                ..base.clone()
            },
            // Every fused op off and every expert offloaded (what a GPU that aborts on ik's
            // defaults is probed with), each spelled as ik spells it.
            LaunchConfig {
                engine_opts: crate::config::EngineOpts {
                    no_fused_moe: true,
                    no_fused_up_gate: true,
                    no_fused_mmad: true,
                    no_only_active_experts: true,
                    ..Default::default()
                },
                ..base.clone()
            },
            // ik's grouped expert matmul and its fusion turned off through `-cuda`.
            LaunchConfig {
                engine_opts: crate::config::EngineOpts {
                    cuda_params: Some("mmq-id-size=0,fusion=0".to_string()),
                    ..Default::default()
                },
                ..base.clone()
            },
            LaunchConfig {
                load_mode: LoadMode::MmapMlock,
                ..base.clone().with_fit_targets(vec![1024])
            },
            LaunchConfig {
                load_mode: LoadMode::None,
                ..base.clone()
            },
        ];
        for c in cases {
            let argv = c.command(Path::new("/ik"), Path::new("/m.gguf"), "0.0.0.0", 9000);
            let back = IkLlama.parse_command(&argv).unwrap();
            assert_eq!(back.config, c, "{}", argv.join(" "));
            assert_eq!(back.port, Some(9000));
            assert_eq!(crate::engine::of(c.engine).name(), "ik_llama.cpp");
        }
        let bad: Vec<String> = ["ik", "-m", "m", "-c", "1", "-np", "1", "-amb", "x"]
            .map(String::from)
            .to_vec();
        let e = IkLlama.parse_command(&bad).unwrap_err();
        assert!(e.contains("-amb takes a number"), "{e}");
        // -ser: qtune's K,1, ik's default -1,0 (off); any other threshold is one line.
        let ser = |v: &str| {
            let argv: Vec<String> = format!("ik -m m -c 1 -np 1 --smart-expert-reduction {v}")
                .split(' ')
                .map(String::from)
                .collect();
            IkLlama.parse_command(&argv)
        };
        assert_eq!(
            ser("4,1").unwrap().config.engine_opts.expert_reduction,
            Some(4)
        );
        assert_eq!(
            ser("-1,0").unwrap().config.engine_opts.expert_reduction,
            None
        );
        for v in ["4,0.5", "4", "x,1", "0,1"] {
            let e = ser(v).unwrap_err();
            assert!(e.contains("takes K,1 (K experts a token)"), "{v}: {e}");
        }
        // -cuda: KEY=VALUE pairs, as ik's CUDA back end splits them; anything else, one line.
        let cuda = |v: &str| {
            let argv: Vec<String> = ["ik", "-m", "m", "-c", "1", "-np", "1", "--cuda-params", v]
                .map(String::from)
                .to_vec();
            IkLlama.parse_command(&argv)
        };
        assert_eq!(
            cuda("mmq-id-size=0,graphs=0")
                .unwrap()
                .config
                .engine_opts
                .cuda_params
                .as_deref(),
            Some("mmq-id-size=0,graphs=0")
        );
        for v in ["", "mmq-id-size", "=0", "a=1,", "a=1;rm -rf", "a=b=c"] {
            let e = cuda(v).unwrap_err();
            assert!(e.contains("takes KEY=VALUE pairs"), "{v:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        // What `qtune compare` and profiles read: ik's dialect is told from the words.
        let argv: Vec<String> =
            "llama-server -m m.gguf -c 2048 -np 1 --fit --fit-margin 512 -no-fmoe"
                .split(' ')
                .map(String::from)
                .collect();
        let c = crate::engine::parse_command(&argv).unwrap().config;
        assert_eq!(
            (c.engine, c.fit, c.engine_opts.no_fused_moe),
            (EngineKind::IkLlama, Some(true), true)
        );
        let plain: Vec<String> = "llama-server -m m.gguf -c 2048 -np 1 --fit on"
            .split(' ')
            .map(String::from)
            .collect();
        assert_eq!(
            crate::engine::parse_command(&plain).unwrap().config.engine,
            EngineKind::LlamaCpp
        );
        // A flag both servers know says nothing of the engine: a llama.cpp command with one
        // qtune does not vary keeps llama.cpp's error (it was once read as ik's).
        for flag in ["--mlock", "--no-mmap"] {
            let argv: Vec<String> = format!("llama-server -m m.gguf -c 2048 -np 1 {flag}")
                .split(' ')
                .map(String::from)
                .collect();
            let e = crate::engine::parse_command(&argv).unwrap_err();
            assert!(e.contains(&format!("unknown flag '{flag}'")), "{e}");
        }
    }
}
