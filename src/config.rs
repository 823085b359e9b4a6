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

/// How llama-server loads the model file (`--load-mode`, llama.cpp's `llama_load_mode`).
///
/// With routed experts on the CPU and a GPU, `none` loads them into pinned host buffers
/// (`CUDA_Host`): the per-ubatch copies of op offload run several times faster than from the
/// pageable, memory-mapped file (3.2x prompt speed measured on Qwen3-30B-A3B at 16 GiB). Those
/// experts then live in RAM, not in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LoadMode {
    /// The server's default: mmap, unless a device cannot. No flag is passed.
    #[serde(rename = "auto")]
    Auto,
    /// Read the file into (pinned, with a GPU) host buffers.
    #[serde(rename = "none")]
    None,
    #[serde(rename = "mmap")]
    Mmap,
    /// Read into buffers and lock them in RAM.
    #[serde(rename = "mlock")]
    Mlock,
    /// Map the file and lock the mapped pages in RAM.
    #[serde(rename = "mmap+mlock")]
    MmapMlock,
    /// Direct I/O where available (read, not mapped).
    #[serde(rename = "dio")]
    Dio,
}

impl LoadMode {
    pub const ALL: [LoadMode; 6] = [
        LoadMode::Auto,
        LoadMode::None,
        LoadMode::Mmap,
        LoadMode::Mlock,
        LoadMode::MmapMlock,
        LoadMode::Dio,
    ];

    /// The value `--load-mode` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadMode::Auto => "auto",
            LoadMode::None => "none",
            LoadMode::Mmap => "mmap",
            LoadMode::Mlock => "mlock",
            LoadMode::MmapMlock => "mmap+mlock",
            LoadMode::Dio => "dio",
        }
    }

    /// Is the model file memory-mapped (host weights are page cache of the file)? `auto` maps
    /// on the backends qtune targets (CPU, CUDA).
    pub fn maps_file(self) -> bool {
        matches!(self, LoadMode::Auto | LoadMode::Mmap | LoadMode::MmapMlock)
    }

    /// Are the host weights locked in RAM?
    pub fn locks(self) -> bool {
        matches!(self, LoadMode::Mlock | LoadMode::MmapMlock)
    }
}

impl fmt::Display for LoadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LoadMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LoadMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown load mode '{s}' (expected one of: {})",
                    LoadMode::ALL.map(|m| m.as_str()).join(", ")
                )
            })
    }
}

impl<'de> Deserialize<'de> for LoadMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LoadModeVisitor)
    }
}

/// Reads a load mode name, or the boolean of the old `mmap` field (results written before
/// `--load-mode` existed): `true` was the server's default (`auto`); `false` rendered
/// `--no-mmap`, which the pinned build no longer has; what it asked for is `none`.
struct LoadModeVisitor;

impl serde::de::Visitor<'_> for LoadModeVisitor {
    type Value = LoadMode;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            "a load mode (auto, none, mmap, mlock, mmap+mlock, dio) or a boolean (old mmap)",
        )
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<LoadMode, E> {
        Ok(if v { LoadMode::Auto } else { LoadMode::None })
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LoadMode, E> {
        v.parse().map_err(E::custom)
    }
}

/// One projection of the routed experts, as llama.cpp names the tensors
/// (`blk.N.ffn_<proj>_exps.*`, `_chexps` alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertProj {
    Up,
    Gate,
    /// Fused gate and up (`ffn_gate_up_exps`).
    GateUp,
    Down,
}

impl ExpertProj {
    /// Every projection. (`--fit` moves a boundary block's `down` to the CPU first, then
    /// `gate`/`gate_up`, then `up`.)
    pub const ALL: [ExpertProj; 4] = [
        ExpertProj::Up,
        ExpertProj::Gate,
        ExpertProj::GateUp,
        ExpertProj::Down,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExpertProj::Up => "up",
            ExpertProj::Gate => "gate",
            ExpertProj::GateUp => "gate_up",
            ExpertProj::Down => "down",
        }
    }

    /// The projection of a routed-expert tensor name, `None` for any other tensor.
    pub fn of_tensor(name: &str) -> Option<ExpertProj> {
        // Longest first: `gate_up` before `gate` and `up`.
        [
            ExpertProj::GateUp,
            ExpertProj::Gate,
            ExpertProj::Up,
            ExpertProj::Down,
        ]
        .into_iter()
        .find(|p| {
            name.contains(&format!(".ffn_{}_exps", p.as_str()))
                || name.contains(&format!(".ffn_{}_chexps", p.as_str()))
        })
    }
}

/// A set of block indices, written compactly (`"0-3,40-47"`) in results and profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockSet(Vec<u32>);

impl BlockSet {
    /// The set of these blocks (sorted, duplicates dropped).
    pub fn new(blocks: impl IntoIterator<Item = u32>) -> Self {
        let mut v: Vec<u32> = blocks.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        BlockSet(v)
    }

    /// Blocks `0..n`.
    pub fn first(n: u32) -> Self {
        BlockSet((0..n).collect())
    }

    /// The last `n` of `n_blocks` blocks.
    pub fn last(n: u32, n_blocks: u32) -> Self {
        BlockSet((n_blocks.saturating_sub(n)..n_blocks).collect())
    }

    pub fn contains(&self, block: u32) -> bool {
        self.0.binary_search(&block).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// Runs of consecutive blocks, as inclusive `(first, last)` pairs.
    pub fn runs(&self) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = Vec::new();
        for &b in &self.0 {
            match out.last_mut() {
                Some((_, hi)) if *hi + 1 == b => *hi = b,
                _ => out.push((b, b)),
            }
        }
        out
    }

    /// A regex alternation matching exactly these numbers as whole decimal numbers (no
    /// leading zeros), e.g. `3[6-9]|4[0-7]` for 36..=47.
    pub fn regex_alternation(&self) -> String {
        let mut alts = Vec::new();
        for (lo, hi) in self.runs() {
            alts.extend(number_range_regex(lo, hi));
        }
        alts.join("|")
    }
}

impl fmt::Display for BlockSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .runs()
            .into_iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl std::str::FromStr for BlockSet {
    type Err = String;
    /// `"0-3,40-47"`, `"5"`, or `""` (empty).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let num = |t: &str| {
                t.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("'{part}' is not a block number or range like 36-47"))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(format!("block range '{part}' runs backwards"));
                    }
                    if b - a > 100_000 {
                        return Err(format!("block range '{part}' is too long"));
                    }
                    v.extend(a..=b);
                }
                None => v.push(num(part)?),
            }
        }
        Ok(BlockSet::new(v))
    }
}

impl Serialize for BlockSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for BlockSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = BlockSet;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("block numbers like \"0-3,40-47\" or a list of numbers")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BlockSet, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<BlockSet, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element::<u32>()? {
                    v.push(x);
                }
                Ok(BlockSet::new(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Alternatives of a regex that match exactly the decimal numbers `lo..=hi`.
fn number_range_regex(lo: u32, hi: u32) -> Vec<String> {
    let mut out = Vec::new();
    // Split by digit count, then solve each equal-length range.
    let mut start = lo;
    while start <= hi {
        let digits = start.to_string().len() as u32;
        let top = 10u64.pow(digits) - 1;
        let end = (hi as u64).min(top) as u32;
        same_length_range(&start.to_string(), &end.to_string(), &mut out);
        if end as u64 >= top {
            if top >= u32::MAX as u64 {
                break;
            }
            start = top as u32 + 1;
        } else {
            break;
        }
    }
    out
}

/// The numbers an alternation of [`number_range_regex`] matches (digits and `[a-b]` classes
/// only); `None` for anything else.
fn parse_alternation(alt: &str) -> Option<BlockSet> {
    let mut blocks = Vec::new();
    for part in alt.split('|') {
        let mut sets: Vec<(u8, u8)> = Vec::new();
        let b = part.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                c @ b'0'..=b'9' => {
                    sets.push((c - b'0', c - b'0'));
                    i += 1;
                }
                b'[' if i + 4 < b.len() && b[i + 2] == b'-' && b[i + 4] == b']' => {
                    let (lo, hi) = (b[i + 1], b[i + 3]);
                    if !lo.is_ascii_digit() || !hi.is_ascii_digit() || lo > hi {
                        return None;
                    }
                    sets.push((lo - b'0', hi - b'0'));
                    i += 5;
                }
                _ => return None,
            }
        }
        if sets.is_empty() || sets.len() > 6 {
            return None;
        }
        let mut nums: Vec<u32> = vec![0];
        for (lo, hi) in sets {
            nums = nums
                .iter()
                .flat_map(|n| (lo..=hi).map(move |d| n * 10 + u32::from(d)))
                .collect();
        }
        blocks.extend(nums);
    }
    Some(BlockSet::new(blocks))
}

fn digit_class(a: u8, b: u8) -> String {
    if a == b {
        (a as char).to_string()
    } else {
        format!("[{}-{}]", a as char, b as char)
    }
}

/// Regex alternatives for the equal-length decimal strings `lo..=hi`.
fn same_length_range(lo: &str, hi: &str, out: &mut Vec<String>) {
    let (l, h) = (lo.as_bytes(), hi.as_bytes());
    if l.len() == 1 {
        out.push(digit_class(l[0], h[0]));
        return;
    }
    let (rest_l, rest_h) = (&lo[1..], &hi[1..]);
    if l[0] == h[0] {
        let mut sub = Vec::new();
        same_length_range(rest_l, rest_h, &mut sub);
        out.extend(sub.into_iter().map(|s| format!("{}{s}", l[0] as char)));
        return;
    }
    let n = rest_l.len();
    let any = "[0-9]".repeat(n);
    let low_full = rest_l.bytes().all(|c| c == b'0');
    let high_full = rest_h.bytes().all(|c| c == b'9');
    let mid_lo = if low_full { l[0] } else { l[0] + 1 };
    let mid_hi = if high_full { h[0] } else { h[0] - 1 };
    if !low_full {
        let mut sub = Vec::new();
        same_length_range(rest_l, &"9".repeat(n), &mut sub);
        out.extend(sub.into_iter().map(|s| format!("{}{s}", l[0] as char)));
    }
    if mid_lo <= mid_hi {
        out.push(format!("{}{any}", digit_class(mid_lo, mid_hi)));
    }
    if !high_full {
        let mut sub = Vec::new();
        same_length_range(&"0".repeat(n), rest_h, &mut sub);
        out.extend(sub.into_iter().map(|s| format!("{}{s}", h[0] as char)));
    }
}

/// A block whose routed experts are split: these projections on the CPU, the rest on the GPU
/// (what `--fit` does to its boundary block).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialBlock {
    pub block: u32,
    /// Projections on the CPU (sorted, no duplicates).
    pub cpu: Vec<ExpertProj>,
}

impl PartialBlock {
    /// `block` with `projections` on the CPU (sorted and deduplicated).
    pub fn new(block: u32, projections: impl IntoIterator<Item = ExpertProj>) -> Self {
        let mut cpu: Vec<ExpertProj> = projections.into_iter().collect();
        cpu.sort_unstable();
        cpu.dedup();
        PartialBlock { block, cpu }
    }
}

/// Which blocks' routed experts sit on the CPU, beyond `--n-cpu-moe` (which can only take the
/// first N blocks, whole): any set of whole blocks plus one partial block, rendered as
/// `-ot REGEX=CPU` rules, one regex per rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuExperts {
    /// Blocks whose routed experts (every projection) stay on the CPU.
    pub blocks: BlockSet,
    /// One more block with only some projections on the CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialBlock>,
}

/// llama.cpp's routed-expert tensor pattern after the block number (`LLM_FFN_EXPS_REGEX`).
const EXPS_PATTERN: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

impl CpuExperts {
    /// The experts of the first `n` blocks (what `--n-cpu-moe n` places).
    pub fn first(n: u32) -> Self {
        CpuExperts {
            blocks: BlockSet::first(n),
            partial: None,
        }
    }

    /// The experts of the last `n` of `n_blocks` blocks (where `--fit` puts them).
    pub fn last(n: u32, n_blocks: u32) -> Self {
        CpuExperts {
            blocks: BlockSet::last(n, n_blocks),
            partial: None,
        }
    }

    /// The projections of `block` on the CPU (every one for a whole block).
    pub fn on_cpu(&self, block: u32, proj: ExpertProj) -> bool {
        self.blocks.contains(block)
            || self
                .partial
                .as_ref()
                .is_some_and(|p| p.block == block && p.cpu.contains(&proj))
    }

    /// The `-ot` values, one rule per regex: whole blocks in one rule, the partial block in
    /// another. Each matches exactly the routed-expert tensors it names (regex_search in
    /// llama.cpp, so every rule is anchored on `blk\.` and the number's following dot).
    pub fn override_rules(&self) -> Vec<String> {
        let mut rules = Vec::new();
        if !self.blocks.is_empty() {
            rules.push(format!(
                r"blk\.({}){EXPS_PATTERN}=CPU",
                self.blocks.regex_alternation()
            ));
        }
        if let Some(p) = self.partial.as_ref().filter(|p| !p.cpu.is_empty()) {
            if !self.blocks.contains(p.block) {
                let projs: Vec<&str> = p.cpu.iter().map(|x| x.as_str()).collect();
                rules.push(format!(
                    r"blk\.{}\.ffn_({})_(ch|)exps=CPU",
                    p.block,
                    projs.join("|")
                ));
            }
        }
        rules
    }

    /// Read back the `-ot` rules [`Self::override_rules`] renders (a whole-block rule and a
    /// partial-block rule, at most one of each). Any other `-ot` rule is one clear error:
    /// qtune reads back only the placements it can predict.
    pub fn from_rules(rules: &[String]) -> Result<Self, String> {
        let foreign = |r: &str| {
            format!(
                "-ot '{r}' is not an expert placement qtune renders (blk\\.(N|M)\\.ffn_..._exps=CPU)"
            )
        };
        let mut out = CpuExperts::default();
        let (mut whole, mut part) = (false, false);
        for rule in rules {
            let body = rule
                .strip_suffix("=CPU")
                .and_then(|r| r.strip_prefix(r"blk\."))
                .ok_or_else(|| foreign(rule))?;
            if let Some(alt) = body
                .strip_suffix(EXPS_PATTERN)
                .and_then(|b| b.strip_prefix('('))
                .and_then(|b| b.strip_suffix(')'))
            {
                if whole {
                    return Err("two whole-block -ot rules: qtune renders one".into());
                }
                whole = true;
                out.blocks = parse_alternation(alt).ok_or_else(|| foreign(rule))?;
                continue;
            }
            let (block, rest) = body.split_once(r"\.ffn_(").ok_or_else(|| foreign(rule))?;
            let projs = rest
                .strip_suffix(")_(ch|)exps")
                .ok_or_else(|| foreign(rule))?;
            let block: u32 = block.parse().map_err(|_| foreign(rule))?;
            let cpu = projs
                .split('|')
                .map(|p| {
                    ExpertProj::ALL
                        .into_iter()
                        .find(|x| x.as_str() == p)
                        .ok_or_else(|| foreign(rule))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if part {
                return Err("two partial-block -ot rules: qtune renders one".into());
            }
            part = true;
            out.partial = Some(PartialBlock::new(block, cpu));
        }
        Ok(out)
    }

    /// Short label, e.g. `36-47` or `36-47+35:down,gate`.
    pub fn label(&self) -> String {
        let mut s = self.blocks.to_string();
        if let Some(p) = &self.partial {
            let projs: Vec<&str> = p.cpu.iter().map(|x| x.as_str()).collect();
            if !s.is_empty() {
                s.push('+');
            }
            s.push_str(&format!("{}:{}", p.block, projs.join(",")));
        }
        s
    }

    /// Why this placement is not valid for a model of `n_blocks` blocks, if it is not.
    pub fn check(&self, n_blocks: u32) -> Result<(), String> {
        if let Some(b) = self.blocks.iter().find(|&b| b >= n_blocks) {
            return Err(format!(
                "block {b} is out of range: the model has {n_blocks} blocks (0..{})",
                n_blocks.saturating_sub(1)
            ));
        }
        if let Some(p) = &self.partial {
            if p.block >= n_blocks {
                return Err(format!(
                    "partial block {} is out of range: the model has {n_blocks} blocks",
                    p.block
                ));
            }
            if self.blocks.contains(p.block) {
                return Err(format!(
                    "block {} is both whole and partial on the CPU",
                    p.block
                ));
            }
            if p.cpu.is_empty() {
                return Err(format!("partial block {} names no projection", p.block));
            }
        }
        Ok(())
    }
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
    /// How the model file is loaded (`--load-mode`; `auto` passes no flag). Results written
    /// before this field existed carry `mmap: true|false` instead, read as `auto` / `none`.
    #[serde(default = "load_mode_auto", alias = "mmap")]
    pub load_mode: LoadMode,
    /// `--fit on|off`; `None` leaves the server's default (on in the pinned build).
    #[serde(default)]
    pub fit: Option<bool>,
    /// `--fit-target`: MiB `--fit` leaves free per device (one value: every device). Only
    /// with `fit: on` and no placement flags (fit refuses to run with overrides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fit_target_mib: Vec<u32>,
    /// Routed experts on the CPU beyond `--n-cpu-moe`: `-ot REGEX=CPU` rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_experts: Option<CpuExperts>,
    /// Offload host tensor ops to the GPU (`--no-op-offload` when false). Op offload copies
    /// CPU-resident experts to the GPU for every micro-batch of 32 tokens or more.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub op_offload: bool,
}

fn load_mode_auto() -> LoadMode {
    LoadMode::Auto
}
fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
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
            load_mode: LoadMode::Auto,
            fit: None,
            fit_target_mib: Vec::new(),
            cpu_experts: None,
            op_offload: true,
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

    /// `--fit`'s own placement as a candidate: `--fit on --fit-target target_mib` and no
    /// placement flags, with this config's other choices (ubatch, KV, threads, load mode).
    pub fn with_fit_placement(&self, target_mib: u32) -> Self {
        LaunchConfig {
            n_gpu_layers: None,
            n_cpu_moe: None,
            cpu_experts: None,
            fit: Some(true),
            fit_target_mib: vec![target_mib],
            ..self.clone()
        }
    }

    /// Is this `--fit`'s placement (fit on, no placement flags of qtune's)?
    pub fn is_fit_placement(&self) -> bool {
        self.fit == Some(true)
            && self.n_gpu_layers.is_none()
            && self.n_cpu_moe.is_none()
            && self.cpu_experts.is_none()
    }

    /// Why the server would refuse or ignore this combination, if it would: `--fit` gives up
    /// when any tensor override or `-ngl` is set, and `--fit-target` means nothing without fit.
    pub fn check(&self) -> Result<(), String> {
        if self.fit == Some(true)
            && (self.n_gpu_layers.is_some()
                || self.n_cpu_moe.is_some()
                || self.cpu_experts.is_some())
        {
            return Err("--fit on cannot be combined with -ngl, --n-cpu-moe or -ot rules: fit refuses to run with placement set".into());
        }
        if !self.fit_target_mib.is_empty() && self.fit == Some(false) {
            return Err("--fit-target needs --fit on".into());
        }
        Ok(())
    }

    /// True when this config leaves placement to the server (the baseline).
    pub fn is_auto_placement(&self) -> bool {
        self.n_gpu_layers.is_none()
            && self.n_cpu_moe.is_none()
            && self.cpu_experts.is_none()
            && self.fit != Some(false)
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
        if let Some(c) = &self.cpu_experts {
            for rule in c.override_rules() {
                push("-ot", rule);
            }
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
        if !self.fit_target_mib.is_empty() {
            let t: Vec<String> = self.fit_target_mib.iter().map(|v| v.to_string()).collect();
            push("--fit-target", t.join(","));
        }
        if self.load_mode != LoadMode::Auto {
            push("--load-mode", self.load_mode.to_string());
        }
        if !self.op_offload {
            a.push("--no-op-offload".to_string());
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
            && self.load_mode == LoadMode::Auto
            && self.op_offload
            && self.fit_target_mib.is_empty()
        {
            return "baseline (server defaults, auto-fit)".to_string();
        }
        let mut parts = Vec::new();
        match (self.n_gpu_layers, self.n_cpu_moe) {
            (_, Some(n)) => parts.push(format!("ncmoe={n}")),
            (Some(0), None) => parts.push("cpu".to_string()),
            (Some(n), None) if self.cpu_experts.is_none() => parts.push(format!("ngl={n}")),
            (None, None) if self.fit == Some(true) => {
                parts.push(match self.fit_target_mib.as_slice() {
                    [] => "fit=on".to_string(),
                    t => format!(
                        "fit=on/{}",
                        t.iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                })
            }
            (None, None) if !self.fit_target_mib.is_empty() => parts.push(format!(
                "fit-target={}",
                self.fit_target_mib
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            _ => {}
        }
        if let Some(c) = &self.cpu_experts {
            parts.push(format!("cpu-exps={}", c.label()));
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
        if self.load_mode != LoadMode::Auto {
            parts.push(format!("lm={}", self.load_mode));
        }
        if !self.op_offload {
            parts.push("no-op-offload".to_string());
        }
        parts.join(" ")
    }
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
    let mut ot_rules: Vec<String> = Vec::new();
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
            "--load-mode" => "--load-mode",
            "-ot" | "--override-tensor" => "-ot",
            "--no-op-offload" => "--no-op-offload",
            "--host" => "--host",
            "--port" => "--port",
            _ if flag.starts_with('-') => {
                return Err(format!(
                    "unknown flag '{flag}': qtune reads back only the flags it renders (-m, -c, -np, -ngl, --n-cpu-moe, -t, -b, -ub, -ctk, -ctv, -fa, --fit, --fit-target, --load-mode, -ot, --no-op-offload, --host, --port)"
                ))
            }
            _ => {
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
        if canon == "--no-op-offload" {
            if inline.is_some() {
                return Err("--no-op-offload takes no value".into());
            }
            cfg.op_offload = false;
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
            "--load-mode" => cfg.load_mode = value.parse()?,
            "-ot" => ot_rules.push(value),
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
    if !ot_rules.is_empty() {
        cfg.cpu_experts = Some(CpuExperts::from_rules(&ot_rules)?);
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
            "ncmoe=24 t=8 b=2048/512 kv=q8_0/q8_0 fa=on lm=none"
        );
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
            "cpu-exps=36-47+35:gate,down kv=f16/f16 lm=none"
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
        assert_eq!(cfg.label(), "ncmoe=12 cpu-exps=12:down kv=f16/f16");
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
            "fit=on/512 t=8 b=2048/2048 kv=q8_0/q8_0 lm=none no-op-offload"
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
        assert!(err(r"llama-server -c 4096 -np 1 -ot exps=CPU").contains("-ot 'exps=CPU'"));
        assert!(err(r"llama-server -c 4096 -np 1 -ot blk\.(1[a-z])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU")
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
    }

    #[test]
    fn kv_type_parses_case_insensitively_and_rejects_unknown() {
        assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
        assert!("q3_k".parse::<KvType>().is_err());
    }
}
