//! `LaunchConfig`: one way to launch `llama-server`, the unit every stage talks about.
//!
//! The model path, host and port are not part of a config: they belong to where it runs
//! (a trial, a launch script). [`LaunchConfig::server_args`] is the one place flags are rendered.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// KV cache element type (`-ctk` / `-ctv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum KvType {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
    #[serde(rename = "bf16")]
    Bf16,
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q5_1")]
    Q5_1,
    #[serde(rename = "q5_0")]
    Q5_0,
    #[serde(rename = "q4_1")]
    Q4_1,
    #[serde(rename = "q4_0")]
    Q4_0,
    #[serde(rename = "iq4_nl")]
    Iq4Nl,
}

impl KvType {
    pub const ALL: [KvType; 9] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q5_1,
        KvType::Q5_0,
        KvType::Q4_1,
        KvType::Q4_0,
        KvType::Iq4Nl,
    ];

    /// The name llama-server takes on its command line.
    pub fn as_str(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q5_1 => "q5_1",
            KvType::Q5_0 => "q5_0",
            KvType::Q4_1 => "q4_1",
            KvType::Q4_0 => "q4_0",
            KvType::Iq4Nl => "iq4_nl",
        }
    }

    /// Bytes per element, averaged over the quantization block.
    pub fn bytes_per_element(self) -> f64 {
        match self {
            KvType::F32 => 4.0,
            KvType::F16 | KvType::Bf16 => 2.0,
            KvType::Q8_0 => 34.0 / 32.0,
            KvType::Q5_1 => 24.0 / 32.0,
            KvType::Q5_0 => 22.0 / 32.0,
            KvType::Q4_1 => 20.0 / 32.0,
            KvType::Q4_0 | KvType::Iq4Nl => 18.0 / 32.0,
        }
    }

    /// Quantized V cache needs flash attention in llama.cpp.
    pub fn is_quantized(self) -> bool {
        !matches!(self, KvType::F32 | KvType::F16 | KvType::Bf16)
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvType::ALL
            .into_iter()
            .find(|k| k.as_str() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown KV cache type '{s}' (expected one of: {})",
                    KvType::ALL.map(|k| k.as_str()).join(", ")
                )
            })
    }
}

/// Flash attention (`-fa on|off|auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashAttn {
    On,
    Off,
    Auto,
}

impl FlashAttn {
    pub fn as_str(self) -> &'static str {
        match self {
            FlashAttn::On => "on",
            FlashAttn::Off => "off",
            FlashAttn::Auto => "auto",
        }
    }
}

impl fmt::Display for FlashAttn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything of a [`LaunchConfig`] except placement and the fixed parts: one point of the
/// search's coordinate steps, and what a profile's winner hands to the next tune.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Base {
    pub threads: Option<u32>,
    pub batch: Option<[u32; 2]>,
    pub kv: [KvType; 2],
    pub flash_attn: FlashAttn,
}

/// One way to launch `llama-server` (without model path, host and port).
///
/// `None` means "do not pass the flag": the server's own default applies. The baseline
/// (what a user gets without qtune) is a config with no placement flags at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchConfig {
    /// Context size in tokens (`-c`).
    pub ctx: u32,
    /// Parallel slots (`-np`); 1 for single-user tuning.
    pub parallel: u32,
    /// Layers on the GPU (`-ngl`); `None` leaves placement to the server.
    #[serde(default)]
    pub n_gpu_layers: Option<u32>,
    /// Blocks whose routed experts stay on the CPU (`--n-cpu-moe`).
    #[serde(default)]
    pub n_cpu_moe: Option<u32>,
    /// Generation threads (`-t`).
    #[serde(default)]
    pub threads: Option<u32>,
    /// Logical batch size (`-b`).
    #[serde(default)]
    pub batch: Option<u32>,
    /// Physical micro-batch size (`-ub`).
    #[serde(default)]
    pub ubatch: Option<u32>,
    /// KV cache type for K (`-ctk`).
    pub cache_type_k: KvType,
    /// KV cache type for V (`-ctv`).
    pub cache_type_v: KvType,
    /// Flash attention (`-fa`).
    pub flash_attn: FlashAttn,
    /// Memory-map the model (`--no-mmap` when false).
    pub mmap: bool,
    /// `--fit on|off`; `None` leaves the server's default (on in the pinned build).
    #[serde(default)]
    pub fit: Option<bool>,
    /// `--fit-target MiB[,MiB...]`: memory fit leaves free per device; empty: not passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fit_target: Vec<u32>,
}

impl LaunchConfig {
    /// What a user gets without qtune: same context, single slot, no placement flags.
    pub fn baseline(ctx: u32) -> Self {
        LaunchConfig {
            ctx,
            parallel: 1,
            n_gpu_layers: None,
            n_cpu_moe: None,
            threads: None,
            batch: None,
            ubatch: None,
            cache_type_k: KvType::F16,
            cache_type_v: KvType::F16,
            flash_attn: FlashAttn::Auto,
            mmap: true,
            fit: None,
            fit_target: Vec::new(),
        }
    }

    /// Place the model explicitly: every layer on the GPU (`-ngl 999`), the routed experts of
    /// `n_cpu_moe` blocks on the CPU, and the build's auto-fit off (it would move them again).
    /// The one place the placement flags are chosen.
    pub fn place_experts(&mut self, n_cpu_moe: u32) {
        self.n_gpu_layers = Some(999);
        self.n_cpu_moe = Some(n_cpu_moe);
        self.fit = Some(false);
    }

    /// This config with the experts of `n_cpu_moe` blocks on the CPU ([`Self::place_experts`]).
    pub fn with_experts_on_cpu(mut self, n_cpu_moe: u32) -> Self {
        self.place_experts(n_cpu_moe);
        self
    }

    /// Everything except placement ([`Base`]).
    pub fn base(&self) -> Base {
        Base {
            threads: self.threads,
            batch: match (self.batch, self.ubatch) {
                (Some(b), Some(u)) => Some([b, u]),
                _ => None,
            },
            kv: [self.cache_type_k, self.cache_type_v],
            flash_attn: self.flash_attn,
        }
    }

    /// True when this config leaves placement to the server (the baseline).
    pub fn is_auto_placement(&self) -> bool {
        self.n_gpu_layers.is_none() && self.n_cpu_moe.is_none() && self.fit != Some(false)
    }

    /// The flags for `llama-server`, in a stable order. The one place argv is rendered.
    pub fn server_args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |k: &str, v: String| {
            a.push(k.to_string());
            a.push(v);
        };
        push("-c", self.ctx.to_string());
        push("-np", self.parallel.to_string());
        if let Some(n) = self.n_gpu_layers {
            push("-ngl", n.to_string());
        }
        if let Some(n) = self.n_cpu_moe {
            push("--n-cpu-moe", n.to_string());
        }
        if let Some(t) = self.threads {
            push("-t", t.to_string());
        }
        if let Some(b) = self.batch {
            push("-b", b.to_string());
        }
        if let Some(ub) = self.ubatch {
            push("-ub", ub.to_string());
        }
        if self.cache_type_k != KvType::F16 {
            push("-ctk", self.cache_type_k.to_string());
        }
        if self.cache_type_v != KvType::F16 {
            push("-ctv", self.cache_type_v.to_string());
        }
        if self.flash_attn != FlashAttn::Auto {
            push("-fa", self.flash_attn.to_string());
        }
        if let Some(fit) = self.fit {
            push("--fit", if fit { "on" } else { "off" }.to_string());
        }
        if !self.fit_target.is_empty() {
            push("--fit-target", join_u32(&self.fit_target));
        }
        if !self.mmap {
            a.push("--no-mmap".to_string());
        }
        a
    }

    /// The full argv of a server for this config: binary, model, flags, host and port.
    pub fn command(&self, server: &Path, model: &Path, host: &str, port: u16) -> Vec<String> {
        let mut argv = vec![
            server.display().to_string(),
            "-m".to_string(),
            model.display().to_string(),
        ];
        argv.extend(self.server_args());
        argv.extend([
            "--host".to_string(),
            host.to_string(),
            "--port".to_string(),
            port.to_string(),
        ]);
        argv
    }

    /// A short human label, e.g. `ncmoe=24 t=8 b=2048/512 kv=q8_0/q8_0 fa=on`.
    pub fn label(&self) -> String {
        if self.is_auto_placement()
            && self.threads.is_none()
            && self.batch.is_none()
            && self.ubatch.is_none()
            && self.cache_type_k == KvType::F16
            && self.cache_type_v == KvType::F16
            && self.flash_attn == FlashAttn::Auto
            && self.fit_target.is_empty()
        {
            return "baseline (server defaults, auto-fit)".to_string();
        }
        let mut parts = Vec::new();
        match (self.n_gpu_layers, self.n_cpu_moe) {
            (_, Some(n)) => parts.push(format!("ncmoe={n}")),
            (Some(0), None) => parts.push("cpu".to_string()),
            (Some(n), None) => parts.push(format!("ngl={n}")),
            (None, None) if self.fit == Some(true) => parts.push("fit=on".to_string()),
            (None, None) => {}
        }
        if !self.fit_target.is_empty() {
            parts.push(format!("fit-target={}", join_u32(&self.fit_target)));
        }
        if let Some(t) = self.threads {
            parts.push(format!("t={t}"));
        }
        match (self.batch, self.ubatch) {
            (None, None) => {}
            (b, ub) => parts.push(format!(
                "b={}/{}",
                b.map_or("-".into(), |v| v.to_string()),
                ub.map_or("-".into(), |v| v.to_string())
            )),
        }
        parts.push(format!("kv={}/{}", self.cache_type_k, self.cache_type_v));
        if self.flash_attn != FlashAttn::Auto {
            parts.push(format!("fa={}", self.flash_attn));
        }
        parts.join(" ")
    }
}

fn join_u32(v: &[u32]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A `llama-server` command line read back into its parts (see [`parse_command`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerCommand {
    /// The first word: the server binary as written (`llama-server`, or a path).
    pub server: String,
    /// `-m`.
    pub model: Option<std::path::PathBuf>,
    /// `--host` / `--port`, when given (trials ignore them: they listen on 127.0.0.1).
    pub host: Option<String>,
    pub port: Option<u16>,
    pub config: LaunchConfig,
}

/// Read back a `llama-server` argv as qtune renders it ([`LaunchConfig::command`]): the binary,
/// `-m`, the config's flags (short or long spelling, `--flag=value` too), `--host`, `--port`.
/// `-c` and `-np` are required (the server's own defaults differ from a config's). Any other
/// flag is one clear error naming it: a comparison measures exactly what it was given.
pub fn parse_command(argv: &[String]) -> Result<ServerCommand, String> {
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
    let mut i = 0;
    while i < rest.len() {
        let word = rest[i].as_str();
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (word, None),
        };
        let canon: &'static str = match flag {
            "-m" | "--model" => "-m",
            "-c" | "--ctx-size" => "-c",
            "-np" | "--parallel" => "-np",
            "-ngl" | "--n-gpu-layers" | "--gpu-layers" => "-ngl",
            "-ncmoe" | "--n-cpu-moe" => "--n-cpu-moe",
            "-t" | "--threads" => "-t",
            "-b" | "--batch-size" => "-b",
            "-ub" | "--ubatch-size" => "-ub",
            "-ctk" | "--cache-type-k" => "-ctk",
            "-ctv" | "--cache-type-v" => "-ctv",
            "-fa" | "--flash-attn" => "-fa",
            "--fit" => "--fit",
            "--fit-target" => "--fit-target",
            "--no-mmap" => "--no-mmap",
            "--host" => "--host",
            "--port" => "--port",
            _ if flag.starts_with('-') => {
                return Err(format!(
                    "unknown flag '{flag}': qtune reads back only the flags it renders (-m, -c, -np, -ngl, --n-cpu-moe, -t, -b, -ub, -ctk, -ctv, -fa, --fit, --fit-target, --no-mmap, --host, --port)"
                ))
            }
            _ => {
                return Err(format!(
                    "unexpected word '{word}': expected a flag (is a value missing its flag, or a path unquoted?)"
                ))
            }
        };
        if seen.contains(&canon) {
            return Err(format!("{canon} is given twice"));
        }
        seen.push(canon);
        i += 1;
        if canon == "--no-mmap" {
            if inline.is_some() {
                return Err("--no-mmap takes no value".into());
            }
            cfg.mmap = false;
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
            v.parse::<u32>()
                .map_err(|_| format!("{canon} takes a whole number, not '{v}'"))
        };
        match canon {
            "-m" => model = Some(std::path::PathBuf::from(value)),
            "-c" => ctx = Some(num(&value)?),
            "-np" => parallel = Some(num(&value)?),
            "-ngl" => cfg.n_gpu_layers = Some(num(&value)?),
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
            "--fit-target" => {
                cfg.fit_target = value
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

/// Split one shell line into words: single quotes, double quotes (with `\"`, `\\`, `\$`,
/// `` \` `` escapes) and backslash escapes, as [`shell_line`] writes them. No expansion.
pub fn split_shell_line(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    cur.push(c);
                }
                None => return Err("a trailing backslash".into()),
            },
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Quote one word for a POSIX shell (single quotes; `'` becomes `'\''`).
pub fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Render an argv as one shell line, every word quoted as needed.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
            mmap: false,
            fit: Some(false),
            ..LaunchConfig::baseline(32768)
        };
        let line = cfg.server_args().join(" ");
        assert_eq!(
            line,
            "-c 32768 -np 1 -ngl 999 --n-cpu-moe 24 -t 8 -b 2048 -ub 512 -ctk q8_0 -ctv q8_0 -fa on --fit off --no-mmap"
        );
        assert_eq!(cfg.label(), "ncmoe=24 t=8 b=2048/512 kv=q8_0/q8_0 fa=on");
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
                mmap: false,
                fit: Some(false),
                ..LaunchConfig::baseline(32768)
            },
            LaunchConfig {
                fit: Some(true),
                fit_target: vec![512, 1024],
                flash_attn: FlashAttn::Off,
                ..LaunchConfig::baseline(8192)
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
        assert_eq!(c.config.fit_target, [512]);
        assert_eq!(
            c.config.server_args().join(" "),
            "-c 32768 -np 1 --fit-target 512"
        );
        assert_eq!(c.config.label(), "fit-target=512 kv=f16/f16");
    }

    #[test]
    fn bad_commands_are_one_clear_error() {
        let err = |line: &str| parse_command(&words(line)).unwrap_err();
        assert!(
            err("llama-server -m M.gguf -c 4096 -np 1 --mlock").contains("unknown flag '--mlock'")
        );
        assert!(err("llama-server -m M.gguf -np 1").contains("no -c"));
        assert!(err("llama-server -m M.gguf -c 4096").contains("no -np"));
        assert!(err("llama-server -m M.gguf -c big -np 1").contains("whole number"));
        assert!(err("llama-server -c 1 -c 2 -np 1").contains("twice"));
        assert!(err("llama-server -c 4096 -np 1 -ctk q3").contains("unknown KV cache type"));
        assert!(err("llama-server -c 4096 -np 1 -t").contains("-t needs a value"));
        assert!(err("-c 4096").contains("server binary"));
        assert!(err("llama-server stray -c 1 -np 1").contains("unexpected word 'stray'"));
        assert!(parse_command(&[]).is_err());
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
    }

    #[test]
    fn kv_type_parses_case_insensitively_and_rejects_unknown() {
        assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
        assert!("q3_k".parse::<KvType>().is_err());
    }
}
