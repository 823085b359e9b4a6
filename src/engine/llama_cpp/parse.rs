//! A rendered `llama-server` command read back into a [`LaunchConfig`] (`qtune compare`, a
//! profile's seeds): every spelling llama.cpp's server takes for the flags qtune renders.

use crate::config::{CpuExperts, FlashAttn, GpuExperts, LaunchConfig};
use crate::engine::ServerCommand;

/// Every spelling llama-server takes for each flag qtune renders or reads back, the short one
/// (as [`LaunchConfig::server_args`] renders it) first.
pub const FLAG_SPELLINGS: &[&[&str]] = &[
    &["-m", "--model"],
    &["-c", "--ctx-size"],
    &["-np", "--parallel"],
    &["--rpc"],
    &["-ngl", "--n-gpu-layers", "--gpu-layers"],
    &["-sm", "--split-mode"],
    &["-ts", "--tensor-split"],
    &["--n-cpu-moe", "-ncmoe"],
    &["-t", "--threads"],
    &["-b", "--batch-size"],
    &["-ub", "--ubatch-size"],
    &["-ctk", "--cache-type-k"],
    &["-ctv", "--cache-type-v"],
    &["-fa", "--flash-attn"],
    &["--fit"],
    &["--fit-target"],
    &["--load-mode"],
    &["-ot", "--override-tensor"],
    &["--no-op-offload"],
    &["-kvu", "--kv-unified"],
    &["-no-kvu", "--no-kv-unified"],
    &["--spec-type"],
    &["--checkpoint-min-step", "-cms"],
    &["--host"],
    &["--port"],
];

/// The spelling qtune renders for `flag` (any spelling in [`FLAG_SPELLINGS`]), if it is one.
pub fn canonical_flag(flag: &str) -> Option<&'static str> {
    FLAG_SPELLINGS
        .iter()
        .find(|s| s.contains(&flag))
        .map(|s| s[0])
}

/// Read back a `llama-server` argv as qtune renders it ([`LaunchConfig::command`]): the binary,
/// `-m`, the config's flags (short or long spelling, `--flag=value` too), `--host`, `--port`.
/// `-c` and `-np` are required (the server's own defaults differ from a config's). Any other
/// flag is one clear error naming it: a comparison measures exactly what it was given.
pub(crate) fn parse_command(argv: &[String]) -> Result<ServerCommand, String> {
    let (server, rest) = argv.split_first().ok_or_else(|| {
        "empty command: expected 'llama-server -m MODEL.gguf -c N -np N ...'".to_string()
    })?;
    if server.starts_with('-') {
        return Err(format!(
            "the command starts with the flag '{server}': it must start with the server binary (e.g. llama-server)"
        ));
    }
    let mut cfg = LaunchConfig::baseline(0);
    let (mut ctx, mut parallel) = (None, None);
    let (mut model, mut host, mut port) = (None, None, None);
    let mut seen: Vec<&'static str> = Vec::new();
    let mut ot_rules: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let word = rest[i].as_str();
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (word, None),
        };
        let canon: &'static str = match canonical_flag(flag) {
            Some(c) => c,
            None if flag.starts_with('-') => {
                return Err(format!(
                    "unknown flag '{flag}': qtune reads back only the flags it renders (-m, -c, -np, -ngl, -sm, -ts, --n-cpu-moe, -t, -b, -ub, -ctk, -ctv, -fa, --fit, --fit-target, --load-mode, -ot, --no-op-offload, -kvu, -no-kvu, --spec-type, --checkpoint-min-step, --host, --port)"
                ))
            }
            None => {
                return Err(format!(
                    "unexpected word '{word}': expected a flag (is a value missing its flag, or a path unquoted?)"
                ))
            }
        };
        if seen.contains(&canon) && canon != "-ot" {
            return Err(format!("{canon} is given twice"));
        }
        seen.push(canon);
        i += 1;
        if matches!(canon, "--no-op-offload" | "-kvu" | "-no-kvu") {
            if inline.is_some() {
                return Err(format!("{canon} takes no value"));
            }
            match canon {
                "-kvu" if seen.contains(&"-no-kvu") => {
                    return Err("give -kvu or -no-kvu, not both".into())
                }
                "-no-kvu" if seen.contains(&"-kvu") => {
                    return Err("give -kvu or -no-kvu, not both".into())
                }
                "-kvu" => cfg.kv_unified = Some(true),
                "-no-kvu" => cfg.kv_unified = Some(false),
                _ => cfg.op_offload = false,
            }
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let v = rest
                    .get(i)
                    .filter(|v| !v.starts_with('-') || v.parse::<f64>().is_ok())
                    .ok_or_else(|| format!("{canon} needs a value"))?;
                i += 1;
                v.clone()
            }
        };
        let num = |v: &str| -> Result<u32, String> {
            v.parse::<u32>().map_err(|_| {
                let v = crate::escape::excerpt(v, 60);
                format!("{canon} takes a whole number, not '{v}'")
            })
        };
        match canon {
            "-m" => model = Some(std::path::PathBuf::from(value)),
            "-c" => ctx = Some(num(&value)?),
            "-np" => parallel = Some(num(&value)?),
            "-ngl" => cfg.n_gpu_layers = Some(num(&value)?),
            "-sm" => cfg.split_mode = Some(value.parse()?),
            "-ts" => {
                // llama.cpp takes at most 15 proportions (common/arg.cpp: 16 or more is
                // "got N input configs, but system only has 16 devices").
                let n = value.split(',').count();
                if n >= 16 {
                    return Err(format!(
                        "-ts gives {n} proportions: llama.cpp takes at most 15, one per device"
                    ));
                }
                cfg.tensor_split = value
                    .split(',')
                    .map(|v| num(v.trim()))
                    .collect::<Result<_, _>>()?
            }
            "--n-cpu-moe" => cfg.n_cpu_moe = Some(num(&value)?),
            "-t" => cfg.threads = Some(num(&value)?),
            "-b" => cfg.batch = Some(num(&value)?),
            "-ub" => cfg.ubatch = Some(num(&value)?),
            "-ctk" => cfg.cache_type_k = value.parse()?,
            "-ctv" => cfg.cache_type_v = value.parse()?,
            "-fa" => {
                cfg.flash_attn = match value.as_str() {
                    "on" => FlashAttn::On,
                    "off" => FlashAttn::Off,
                    "auto" => FlashAttn::Auto,
                    v => return Err(format!("-fa takes on, off or auto, not '{v}'")),
                }
            }
            "--fit" => {
                cfg.fit = Some(match value.as_str() {
                    "on" => true,
                    "off" => false,
                    v => return Err(format!("--fit takes on or off, not '{v}'")),
                })
            }
            "--load-mode" => cfg.load_mode = value.parse()?,
            "--spec-type" => {
                cfg.spec_type = match value.as_str() {
                    "none" => None,
                    v => Some(v.parse()?),
                }
            }
            "--checkpoint-min-step" => cfg.checkpoint_min_step = Some(num(&value)?),
            "-ot" => ot_rules.push(value),
            "--rpc" => {
                cfg.rpc = crate::config::rpc::parse_workers(&value)?
                    .iter()
                    .map(|w| w.to_string())
                    .collect()
            }
            "--fit-target" => {
                cfg.fit_target_mib = value
                    .split(',')
                    .map(|v| num(v.trim()))
                    .collect::<Result<_, _>>()?
            }
            "--host" => host = Some(value),
            "--port" => {
                port = Some(
                    value
                        .parse::<u16>()
                        .map_err(|_| format!("--port takes a port number, not '{value}'"))?,
                )
            }
            _ => unreachable!("every canonical flag is handled"),
        }
    }
    let mut cpu_rules: Vec<String> = Vec::new();
    for rule in ot_rules {
        if let Some(r) = crate::config::rpc::RpcExperts::from_rule(&rule) {
            let r = r?;
            if cfg.rpc_experts.iter().any(|x| x.device == r.device) {
                return Err(format!(
                    "two -ot rules for {}: qtune renders one per device",
                    r.device
                ));
            }
            cfg.rpc_experts.push(r);
            continue;
        }
        match GpuExperts::from_rule(&rule) {
            Some(g) => {
                let g = g?;
                if cfg.gpu_experts.iter().any(|x| x.device == g.device) {
                    return Err(format!(
                        "two -ot rules for CUDA{}: qtune renders one per device",
                        g.device
                    ));
                }
                cfg.gpu_experts.push(g);
            }
            None => cpu_rules.push(rule),
        }
    }
    if !cpu_rules.is_empty() {
        cfg.cpu_experts = Some(CpuExperts::from_rules(&cpu_rules)?);
    }
    cfg.ctx = ctx.ok_or("the command has no -c: give the context size (e.g. -c 32768)")?;
    cfg.parallel = parallel.ok_or(
        "the command has no -np: give the slot count (e.g. -np 1; the server's default is 4)",
    )?;
    Ok(ServerCommand {
        server: server.clone(),
        model,
        host,
        port,
        config: cfg,
    })
}
