//! Where the routed experts sit: block sets, partial boundary blocks, and the `-ot` rules that
//! place them (one regex per rule).

use super::Flag;
use serde::{Deserialize, Serialize};
use std::fmt;

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

    /// Read back a [`Self::regex_alternation`] (None for anything else).
    pub fn from_alternation(alt: &str) -> Option<Self> {
        parse_alternation(alt)
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
            let r = crate::escape::excerpt(r, 80);
            format!(
                "{} '{r}' is not an expert placement qtune renders (blk\\.(N|M)\\.ffn_..._exps=CPU)",
                Flag::OverrideTensor
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
                    return Err(format!(
                        "two whole-block {} rules: qtune renders one",
                        Flag::OverrideTensor
                    ));
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
                return Err(format!(
                    "two partial-block {} rules: qtune renders one",
                    Flag::OverrideTensor
                ));
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

/// Routed experts placed on one named GPU whatever the device of their layer
/// (`-ot blk\.(N|M)\.ffn_..._exps=CUDAn`): how a box with two cards moves experts from the
/// fuller card to the other without moving the layers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuExperts {
    /// The CUDA device index (`CUDAn`, in `CUDA_VISIBLE_DEVICES` order).
    pub device: u32,
    /// Blocks whose routed experts (every projection) go to that device.
    pub blocks: BlockSet,
}

impl GpuExperts {
    /// The buffer type name llama.cpp gives this device's memory.
    pub fn buffer_name(&self) -> String {
        format!("CUDA{}", self.device)
    }

    /// The `-ot` value (None for an empty block set).
    pub fn override_rule(&self) -> Option<String> {
        (!self.blocks.is_empty()).then(|| {
            format!(
                r"blk\.({}){EXPS_PATTERN}={}",
                self.blocks.regex_alternation(),
                self.buffer_name()
            )
        })
    }

    /// Read back a rule [`Self::override_rule`] renders; `None` when the rule does not name a
    /// CUDA device (it may be a `=CPU` rule), an error when it names one in another shape.
    pub fn from_rule(rule: &str) -> Option<Result<Self, String>> {
        let (body, dev) = rule.rsplit_once("=CUDA")?;
        let device: u32 = match dev.parse() {
            Ok(d) => d,
            Err(_) => {
                let ot = Flag::OverrideTensor;
                return Some(Err(format!(
                    "{ot} '{rule}': CUDA{dev} is not a device name"
                )));
            }
        };
        let blocks = body
            .strip_prefix(r"blk\.(")
            .and_then(|b| b.strip_suffix(EXPS_PATTERN))
            .and_then(|b| b.strip_suffix(')'))
            .and_then(parse_alternation);
        Some(blocks.map(|blocks| GpuExperts { device, blocks }).ok_or_else(|| {
            let rule = crate::escape::excerpt(rule, 80);
            format!(
                "{} '{rule}' is not an expert placement qtune renders (blk\\.(N|M)\\.ffn_..._exps=CUDAn)",
                Flag::OverrideTensor
            )
        }))
    }
}
