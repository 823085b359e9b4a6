//! Search spaces (`search-spaces/*.yaml`): which flags vary, what stays fixed, the workload
//! each trial runs and the objective that ranks trials.

use serde::{Deserialize, Serialize};

/// What one trial asks of the server, measured the way a single user uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Prompt length in tokens for each measured request.
    pub prompt_tokens: u32,
    /// Tokens generated per measured request (`ignore_eos`).
    pub gen_tokens: u32,
    /// Measured requests per trial (after the warm-up).
    pub repetitions: u32,
    /// Send one unmeasured warm-up request first.
    #[serde(default = "default_true")]
    pub warmup: bool,
    /// Optional: tokens already in context before generation is measured (long-context speed).
    #[serde(default)]
    pub context_depth: Option<u32>,
}

fn default_true() -> bool {
    true
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            prompt_tokens: 512,
            gen_tokens: 128,
            repetitions: 3,
            warmup: true,
            context_depth: None,
        }
    }
}

/// A search space as written in `search-spaces/*.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpace {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub vary: Vary,
    pub fixed: Fixed,
    pub workload: Workload,
    #[serde(default)]
    pub objective: Objective,
    #[serde(default)]
    pub budget: Budget,
}

/// `--n-cpu-moe` range: `auto` (0 ..= block count) or explicit bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NCpuMoe {
    Auto(AutoWord),
    Range { min: u32, max: u32 },
}

/// The literal word `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoWord {
    Auto,
}

/// A thread count or `auto` (physical cores).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Threads {
    Auto(AutoWord),
    Count(u32),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vary {
    /// Omitted for CPU-only spaces and dense models.
    #[serde(default)]
    pub n_cpu_moe: Option<NCpuMoe>,
    #[serde(default = "default_threads")]
    pub threads: Vec<Threads>,
    /// `[batch, ubatch]` pairs; `ubatch <= batch`.
    #[serde(default = "default_batches")]
    pub batch_ubatch: Vec<[u32; 2]>,
    /// `[K, V]` cache type pairs.
    #[serde(default = "default_kv")]
    pub kv_types: Vec<[crate::config::KvType; 2]>,
    #[serde(default = "default_fa")]
    pub flash_attn: Vec<crate::config::FlashAttn>,
}

fn default_threads() -> Vec<Threads> {
    vec![Threads::Auto(AutoWord::Auto)]
}
fn default_batches() -> Vec<[u32; 2]> {
    vec![[2048, 512]]
}
fn default_kv() -> Vec<[crate::config::KvType; 2]> {
    vec![[crate::config::KvType::F16, crate::config::KvType::F16]]
}
fn default_fa() -> Vec<crate::config::FlashAttn> {
    vec![crate::config::FlashAttn::Auto]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixed {
    /// Context size; `--ctx` on the command line overrides it.
    pub ctx: u32,
    #[serde(default = "default_parallel")]
    pub parallel: u32,
    #[serde(default = "default_true")]
    pub mmap: bool,
}

fn default_parallel() -> u32 {
    1
}

/// What ranks trials.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Generation tok/s, prompt tok/s as tie-break.
    Gen,
    /// Prompt processing tok/s.
    Prompt,
    /// `gen_weight * gen/gen_best + prompt_weight * prompt/prompt_best`.
    Blend,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    pub metric: Metric,
    #[serde(default = "one")]
    pub gen_weight: f64,
    #[serde(default)]
    pub prompt_weight: f64,
    /// Generation results within this many percent count as a tie, broken by prompt speed.
    #[serde(default = "default_tie")]
    pub tie_pct: f64,
}

fn one() -> f64 {
    1.0
}
fn default_tie() -> f64 {
    3.0
}

impl Default for Objective {
    fn default() -> Self {
        Objective {
            metric: Metric::Gen,
            gen_weight: 1.0,
            prompt_weight: 0.0,
            tie_pct: 3.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Most server launches for the search (baseline and confirmation not counted).
    pub trials: u32,
    /// Wall-clock limit for the whole tune, minutes.
    pub minutes: f64,
    /// Candidates re-measured against the baseline at the end.
    #[serde(default = "default_confirm_top")]
    pub confirm_top: u32,
    /// Interleaved rounds (A B A B ...) of the confirmation.
    #[serde(default = "default_confirm_rounds")]
    pub confirm_rounds: u32,
}

fn default_confirm_top() -> u32 {
    2
}
fn default_confirm_rounds() -> u32 {
    2
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            trials: 20,
            minutes: 15.0,
            confirm_top: 2,
            confirm_rounds: 2,
        }
    }
}
