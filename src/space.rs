//! Search spaces (`search-spaces/*.yaml`): which flags vary, what stays fixed, the workload
//! each trial runs and the objective that ranks trials.
//! (Over 800 lines with its tests: one schema, whose every key is validated where it is
//! defined, with its range and the line it came from.)

mod levers;
mod workload;
use crate::objective::{Metric, Objective};
pub use levers::Levers;
use serde::{Deserialize, Serialize};
pub use workload::Workload;

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
    /// Optional accuracy floor for KV cache types (see `quality::floor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<QualityFloor>,
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
    #[serde(default = "default_batches", deserialize_with = "batch_pairs")]
    pub batch_ubatch: Vec<[u32; 2]>,
    /// `[K, V]` cache type pairs.
    #[serde(default = "default_kv")]
    pub kv_types: Vec<[crate::config::KvType; 2]>,
    #[serde(default = "default_fa")]
    pub flash_attn: Vec<crate::config::FlashAttn>,
    /// `--load-mode` values to try (`none`: experts on the CPU in pinned RAM, fast to copy to
    /// the GPU). Omitted: `fixed.mmap` of older spaces, else `auto` (the server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_mode: Option<Vec<crate::config::LoadMode>>,
    /// Where the CPU-side experts sit: `first` (whole blocks from block 0, `--n-cpu-moe`),
    /// `last` (whole blocks from the end, as `--fit`), `first-split` / `last-split` (plus one
    /// boundary block split per projection, to fill the card), `fit` (`--fit`'s own
    /// placement as a candidate, `--fit on --fit-target`). Omitted: `[first]`.
    #[serde(default = "default_placement")]
    pub placement: Vec<PlacementStyle>,
    /// Also try `--no-op-offload` for `batch_ubatch` pairs whose ubatch is at most this
    /// (small micro-batches, where copying CPU experts to the GPU costs more than it saves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_op_offload_max_ubatch: Option<u32>,
    /// Two GPUs or more: GPU 0's share of the layers (`-ts`), in percentage points, is also
    /// tried this far from the split by budget (each a variant, its experts refilled to each
    /// card's budget). Omitted: `[-10, 10]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_shift_pct: Option<Vec<i32>>,
    /// Settings past placement, each tried on the best config only where the workload can show
    /// it (see [`Levers`]). Omitted: none.
    #[serde(default, skip_serializing_if = "Levers::is_empty")]
    pub levers: Levers,
}

impl Vary {
    /// The `-ts` shifts to try on several GPUs ([`Vary::split_shift_pct`]).
    pub fn split_shifts(&self) -> Vec<i32> {
        self.split_shift_pct
            .clone()
            .unwrap_or_else(|| vec![-10, 10])
    }
}

/// How the experts that do not fit on the GPU are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementStyle {
    /// The first blocks' experts, whole (`--n-cpu-moe N`).
    First,
    /// The last blocks' experts, whole (`-ot` rule), where `--fit` puts them.
    Last,
    /// `first` plus the next block's experts split per projection.
    FirstSplit,
    /// `last` plus the block before them split per projection (what `--fit` does).
    LastSplit,
    /// `--fit on --fit-target <headroom>`: fit places, qtune sets the rest.
    Fit,
}

impl PlacementStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementStyle::First => "first",
            PlacementStyle::Last => "last",
            PlacementStyle::FirstSplit => "first-split",
            PlacementStyle::LastSplit => "last-split",
            PlacementStyle::Fit => "fit",
        }
    }
}

fn default_placement() -> Vec<PlacementStyle> {
    vec![PlacementStyle::First]
}

fn default_threads() -> Vec<Threads> {
    vec![Threads::Auto(AutoWord::Auto)]
}
/// One `[batch, ubatch]` pair, checked while it is read, so a bad pair is reported at its
/// own line (serde_yaml_ng attaches the location to errors raised during deserialization).
struct BatchPair([u32; 2]);

impl<'de> Deserialize<'de> for BatchPair {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let [b, ub] = <[u32; 2]>::deserialize(d)?;
        check_batch_pair(b, ub).map_err(serde::de::Error::custom)?;
        Ok(BatchPair([b, ub]))
    }
}

fn check_batch_pair(b: u32, ub: u32) -> Result<(), String> {
    if ub == 0 || b == 0 || ub > b || b > 65536 {
        return Err(format!("[{b}, {ub}]: need 1 <= ubatch <= batch <= 65536"));
    }
    Ok(())
}

fn batch_pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<[u32; 2]>, D::Error> {
    Ok(Vec::<BatchPair>::deserialize(d)?
        .into_iter()
        .map(|p| p.0)
        .collect())
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
    /// Older spaces: `mmap: true` (the server's default load mode) or `false` (`none`). Newer
    /// ones name the load modes in `vary.load_mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmap: Option<bool>,
    /// `--fit-target` MiB of the `fit` placement; omitted: the tune's VRAM headroom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_target_mib: Option<u32>,
    /// At most this many generation threads (`-t`) in every launch, the baseline included.
    /// A tune sets it when other processes leave fewer free cores than the server's default
    /// threads, or from `QTUNE_MAX_THREADS` ([`crate::hardware::busy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_cap: Option<u32>,
    /// The engine every launch of the tune uses: the one `--server` (or the cache) is. Not a
    /// space file's setting; absent: llama.cpp.
    #[serde(default, skip_serializing_if = "crate::config::EngineKind::is_default")]
    pub engine: crate::config::EngineKind,
    /// The other engines the tune races (`qtune tune --engine both`): their baselines are
    /// measured too and the search's best is tried on each. Not a space file's setting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_engines: Vec<crate::config::EngineKind>,
    /// The head's RPC workers (`qtune tune --rpc`), as measured when the tune started: every
    /// launch, the baseline included, gets `--rpc` with their addresses, and the placements
    /// split the layers over their devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rpc_workers: Vec<crate::hardware::rpc::WorkerInfo>,
}

impl Fixed {
    /// What the engine's baselines are launched with ([`crate::engine::Engine::default_baseline`]).
    pub fn baseline_inputs(&self) -> crate::engine::BaselineInputs {
        crate::engine::BaselineInputs {
            ctx: self.ctx,
            parallel: self.parallel,
            threads_cap: self.threads_cap,
            rpc: crate::hardware::rpc::addresses(&self.rpc_workers),
        }
    }
}

impl SearchSpace {
    /// The load modes to try, the first being the starting point.
    pub fn load_modes(&self) -> Vec<crate::config::LoadMode> {
        use crate::config::LoadMode;
        match (&self.vary.load_mode, self.fixed.mmap) {
            (Some(v), _) if !v.is_empty() => v.clone(),
            (_, Some(false)) => vec![LoadMode::None],
            _ => vec![LoadMode::Auto],
        }
    }

    /// The op-offload settings to try at micro-batch `ubatch`: `[true]`, plus `false`
    /// (`--no-op-offload`) when `ubatch` is at most `vary.no_op_offload_max_ubatch`.
    pub fn op_offload_choices(&self, ubatch: u32) -> Vec<bool> {
        match self.vary.no_op_offload_max_ubatch {
            Some(max) if ubatch <= max => vec![true, false],
            _ => vec![true],
        }
    }

    /// Is `--fit`'s placement one of the candidates?
    pub fn has_fit_candidate(&self) -> bool {
        self.vary.placement.contains(&PlacementStyle::Fit)
    }
}

fn default_parallel() -> u32 {
    1
}

/// The longest tune budget, minutes: a week (a longer one is a typo, not a plan).
pub const MAX_BUDGET_MINUTES: f64 = 7.0 * 24.0 * 60.0;

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
    /// The space's own launches and minutes, where the tune grew them to race other engines
    /// (`--engine both` with no budget asked for); None: the budget is the space's or the
    /// user's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_engines: Option<BudgetBase>,
}

/// A budget's launches and minutes ([`Budget::before_engines`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetBase {
    pub trials: u32,
    pub minutes: f64,
}

fn default_confirm_top() -> u32 {
    2
}
fn default_confirm_rounds() -> u32 {
    crate::objective::MIN_CLAIM_ROUNDS as u32
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            trials: 20,
            minutes: 15.0,
            confirm_top: 2,
            confirm_rounds: default_confirm_rounds(),
            before_engines: None,
        }
    }
}

/// Built-in spaces, embedded so the binary works anywhere (the files in `search-spaces/`).
pub const BUILTIN: [(&str, &str); 5] = [
    ("default", include_str!("../search-spaces/default.yaml")),
    ("quick", include_str!("../search-spaces/quick.yaml")),
    ("cpu-only", include_str!("../search-spaces/cpu-only.yaml")),
    (
        "long-context",
        include_str!("../search-spaces/long-context.yaml"),
    ),
    ("demo", include_str!("../search-spaces/demo.yaml")),
];

/// A space that could not be used, with where in the file.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    #[error("cannot read search space {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("unknown search space '{0}': give a YAML file or one of default, quick, cpu-only, long-context, demo")]
    Unknown(String),
}

/// The largest space file read (a space is a few hundred bytes; this bounds `/dev/zero`).
pub const MAX_SPACE_BYTES: u64 = 1024 * 1024;

/// Load a space by built-in name or YAML path, and validate it.
pub fn load(name_or_path: &str) -> Result<SearchSpace, SpaceError> {
    if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, &format!("built-in space '{name_or_path}'"));
    }
    let path = std::path::Path::new(name_or_path);
    if !path.exists() && !name_or_path.contains('/') && !name_or_path.ends_with(".yaml") {
        return Err(SpaceError::Unknown(name_or_path.to_string()));
    }
    let bytes = crate::util::read_bounded(path, MAX_SPACE_BYTES).map_err(|e| match e {
        crate::util::BoundedReadError::Io(source) => SpaceError::Read {
            path: name_or_path.to_string(),
            source,
        },
        other => SpaceError::Invalid {
            path: name_or_path.to_string(),
            message: other.to_string(),
        },
    })?;
    let text = String::from_utf8(bytes).map_err(|e| SpaceError::Invalid {
        path: name_or_path.to_string(),
        message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })?;
    parse(&text, name_or_path)
}

/// The largest prompt, generation and context depth a workload may ask for, in tokens, and
/// the most repetitions: checked in their own type before any sum (issue 33: a
/// `prompt_tokens` of 4294967295 wrapped past the context check).
pub const MAX_WORKLOAD_TOKENS: u32 = 1 << 20;
pub const MAX_REPETITIONS: u32 = 10_000;

/// Why a workload's numbers are out of range (None: in range). Shared by spaces and
/// `qtune compare`'s flags.
pub fn workload_range_error(
    prompt_tokens: u32,
    gen_tokens: u32,
    repetitions: u32,
    context_depth: Option<u32>,
) -> Option<String> {
    for (name, v, max) in [
        ("prompt_tokens", prompt_tokens, MAX_WORKLOAD_TOKENS),
        ("gen_tokens", gen_tokens, MAX_WORKLOAD_TOKENS),
        ("repetitions", repetitions, MAX_REPETITIONS),
        (
            "context_depth",
            context_depth.unwrap_or(0),
            MAX_WORKLOAD_TOKENS,
        ),
    ] {
        if v > max {
            return Some(format!("{name} {v} is outside 1..={max}"));
        }
    }
    None
}

/// Parse and validate YAML text; errors carry the line number.
pub fn parse(text: &str, origin: &str) -> Result<SearchSpace, SpaceError> {
    crate::util::check_yaml_shape(text, crate::util::MAX_YAML_DEPTH).map_err(|message| {
        SpaceError::Invalid {
            path: origin.to_string(),
            message,
        }
    })?;
    // A value quoted in the parser's message may hold a line break: one line, always.
    let space: SearchSpace = serde_yaml::from_str(text).map_err(|e| SpaceError::Invalid {
        path: origin.to_string(),
        message: crate::escape::one_line(&match e.location() {
            Some(l) => format!("line {}: {}", l.line(), strip_location(&e.to_string())),
            None => e.to_string(),
        }),
    })?;
    validate(&space).map_err(|(key, message)| SpaceError::Invalid {
        path: origin.to_string(),
        message: match line_of(text, key) {
            Some(l) => format!("line {l}: {message}"),
            None => message,
        },
    })?;
    Ok(space)
}

fn strip_location(msg: &str) -> String {
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// First line (1-based) where `key:` appears.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let pat = format!("{key}:");
    text.lines()
        .position(|l| l.trim_start().starts_with(&pat))
        .map(|i| i + 1)
}

/// The most threads a space may name (llama.cpp's own limit is far above any real machine).
pub const MAX_THREADS: u32 = 1024;

/// Values of a valid space this machine and model cannot try, each as one line, so the app
/// layer can say so instead of leaving them out silently.
pub fn host_warnings(s: &SearchSpace, logical_cores: u32, n_blocks: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in &s.vary.threads {
        if let Threads::Count(c) = t {
            if *c > logical_cores.max(1) {
                out.push(format!(
                    "space '{}': threads {c} is more than this machine's {logical_cores} logical cores; it is not tried",
                    s.name
                ));
            }
        }
    }
    if let Some(NCpuMoe::Range { min, max }) = s.vary.n_cpu_moe {
        if max > n_blocks {
            out.push(format!(
                "space '{}': n_cpu_moe {min}..{max} goes past the model's {n_blocks} layers; searched as {}..{}",
                s.name,
                min.min(n_blocks),
                n_blocks
            ));
        }
    }
    out
}

/// Check values serde cannot: returns (the offending key, the message).
pub fn validate(s: &SearchSpace) -> Result<(), (&'static str, String)> {
    if !(256..=1_048_576).contains(&s.fixed.ctx) {
        return Err((
            "ctx",
            format!("ctx {} is outside 256..=1048576", s.fixed.ctx),
        ));
    }
    if s.fixed.threads_cap == Some(0) {
        return Err(("threads_cap", "threads_cap must be at least 1".into()));
    }
    if !(1..=256).contains(&s.fixed.parallel) {
        return Err(("parallel", "parallel must be 1..=256".into()));
    }
    if let Some(NCpuMoe::Range { min, max }) = s.vary.n_cpu_moe {
        if min > max {
            return Err((
                "n_cpu_moe",
                format!("n_cpu_moe min {min} is above max {max}"),
            ));
        }
    }
    if s.vary.threads.is_empty() {
        return Err((
            "threads",
            "threads needs at least one value (or 'auto')".into(),
        ));
    }
    if let Some(Threads::Count(0)) = s
        .vary
        .threads
        .iter()
        .find(|t| matches!(t, Threads::Count(0)))
    {
        return Err(("threads", "threads must be at least 1".into()));
    }
    if let Some(c) = s.vary.threads.iter().find_map(|t| match t {
        Threads::Count(c) if *c > MAX_THREADS => Some(*c),
        _ => None,
    }) {
        return Err((
            "threads",
            format!("threads {c} is outside 1..={MAX_THREADS}"),
        ));
    }
    if s.vary.batch_ubatch.is_empty() {
        return Err((
            "batch_ubatch",
            "batch_ubatch needs at least one [batch, ubatch] pair".into(),
        ));
    }
    for [b, ub] in &s.vary.batch_ubatch {
        check_batch_pair(*b, *ub).map_err(|m| ("batch_ubatch", m))?;
    }
    if s.vary.kv_types.is_empty() {
        return Err(("kv_types", "kv_types needs at least one [K, V] pair".into()));
    }
    if s.vary.flash_attn.is_empty() {
        return Err(("flash_attn", "flash_attn needs at least one value".into()));
    }
    match &s.vary.load_mode {
        Some(v) if v.is_empty() => {
            return Err((
                "load_mode",
                "load_mode needs at least one value (auto, none, mmap, mlock, mmap+mlock, dio)"
                    .into(),
            ))
        }
        Some(_) if s.fixed.mmap.is_some() => {
            return Err((
                "mmap",
                "give vary.load_mode or the older fixed.mmap, not both".into(),
            ))
        }
        _ => {}
    }
    if s.vary.placement.is_empty() {
        return Err((
            "placement",
            "placement needs at least one of first, last, first-split, last-split, fit".into(),
        ));
    }
    if let Some(ub) = s.vary.no_op_offload_max_ubatch {
        if !(1..=65536).contains(&ub) {
            return Err((
                "no_op_offload_max_ubatch",
                format!("no_op_offload_max_ubatch {ub} is outside 1..=65536"),
            ));
        }
    }
    s.vary.levers.check()?;
    if let Some(t) = s.fixed.fit_target_mib {
        if t > 1_048_576 {
            return Err((
                "fit_target_mib",
                format!("fit_target_mib {t} is outside 0..=1048576 MiB"),
            ));
        }
    }
    let w = &s.workload;
    if w.prompt_tokens == 0 || w.gen_tokens == 0 || w.repetitions == 0 {
        return Err((
            "workload",
            "prompt_tokens, gen_tokens and repetitions must be at least 1".into(),
        ));
    }
    if let Some(msg) = workload_range_error(
        w.prompt_tokens,
        w.gen_tokens,
        w.repetitions,
        w.context_depth,
    ) {
        return Err(("workload", msg));
    }
    if w.shape_repetitions == 0 || w.shape_repetitions > MAX_REPETITIONS {
        return Err((
            "workload",
            format!("shape_repetitions must be between 1 and {MAX_REPETITIONS}"),
        ));
    }
    if u64::from(w.prompt_tokens)
        + u64::from(w.gen_tokens)
        + u64::from(w.context_depth.unwrap_or(0))
        > u64::from(s.fixed.ctx)
    {
        return Err((
            "workload",
            format!(
                "prompt_tokens + gen_tokens + context_depth exceed ctx {}",
                s.fixed.ctx
            ),
        ));
    }
    // A trace is read and checked by `Workload::resolve`, against the launch's context.
    if let Some(m) = w
        .mix
        .as_ref()
        .filter(|m| !crate::traffic::plan::is_trace(m))
    {
        if let Err(e) = crate::workloads::load(m) {
            return Err(("mix", e.to_string()));
        }
    }
    if s.objective.metric == Metric::GenAtDepth && w.context_depth.is_none() {
        return Err((
            "metric",
            "metric gen_at_depth needs workload.context_depth".into(),
        ));
    }
    if !(0.0..=50.0).contains(&s.objective.tie_pct) {
        return Err(("tie_pct", "tie_pct must be within 0..=50".into()));
    }
    if let Some(f) = &s.quality {
        validate_quality_floor(f)?;
    }
    if s.budget.trials == 0
        || !s.budget.minutes.is_finite()
        || s.budget.minutes <= 0.0
        || s.budget.minutes > MAX_BUDGET_MINUTES
    {
        return Err((
            "budget",
            format!(
                "budget trials must be at least 1, and minutes above 0 and at most {} (a week)",
                MAX_BUDGET_MINUTES as u32
            ),
        ));
    }
    Ok(())
}

/// `quality:` in a search space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityFloor {
    /// Least same-top-1 percentage against the f16 reference.
    #[serde(default)]
    pub min_top1_pct: Option<f64>,
    /// Most mean KL divergence against the f16 reference.
    #[serde(default)]
    pub max_mean_kld: Option<f64>,
    /// Text to score (default: the King James Version, see `quality::text`).
    #[serde(default)]
    pub text: Option<std::path::PathBuf>,
    /// Chunks per run (default: 16,384 tokens / ctx, at least 2).
    #[serde(default)]
    pub chunks: Option<u32>,
}

impl QualityFloor {
    /// The floor in words, e.g. "same top-1 >= 99 %".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.min_top1_pct {
            parts.push(format!("same top-1 >= {m} %"));
        }
        if let Some(m) = self.max_mean_kld {
            parts.push(format!("mean KLD <= {m}"));
        }
        parts.join(", ")
    }
}

/// Check values serde cannot (for [`validate`]): (the offending key, the message).
pub fn validate_quality_floor(f: &QualityFloor) -> Result<(), (&'static str, String)> {
    if f.min_top1_pct.is_none() && f.max_mean_kld.is_none() {
        return Err((
            "quality",
            "quality needs min_top1_pct or max_mean_kld (or remove it)".into(),
        ));
    }
    if let Some(m) = f.min_top1_pct {
        if !(0.0..=100.0).contains(&m) {
            return Err((
                "min_top1_pct",
                format!("min_top1_pct {m} is outside 0..=100"),
            ));
        }
    }
    if let Some(m) = f.max_mean_kld {
        if !m.is_finite() || m < 0.0 {
            return Err((
                "max_mean_kld",
                format!("max_mean_kld {m} must be 0 or more"),
            ));
        }
    }
    if f.chunks == Some(0) {
        return Err(("chunks", "quality chunks must be at least 1".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_space_parses() {
        for (name, _) in BUILTIN {
            load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// Issue 52: the demo and cpu-only spaces raced at most 2 rounds while a claim needs 3,
    /// so a first demo could never recommend anything.
    #[test]
    fn every_builtin_space_affords_the_rounds_a_claim_needs() {
        let need = crate::objective::MIN_CLAIM_ROUNDS as u32;
        for (name, _) in BUILTIN {
            let b = load(name).unwrap().budget;
            let race = b.confirm_rounds * (b.confirm_top.max(1) + 1);
            assert!(
                b.confirm_rounds >= need && b.trials >= race + 4,
                "{name}: {} rounds of {} in {} launches",
                b.confirm_rounds,
                b.confirm_top,
                b.trials
            );
        }
    }

    #[test]
    fn unknown_key_is_refused_with_its_line() {
        let text = BUILTIN[1].1.replace("workload:", "workload:\n  flavour: 3");
        let err = parse(&text, "x.yaml").unwrap_err().to_string();
        assert!(err.contains("line") && err.contains("flavour"), "{err}");
    }

    #[test]
    fn ubatch_above_batch_is_refused_with_its_line() {
        let text = "name: t\nvary:\n  batch_ubatch: [[512, 1024]]\nfixed:\n  ctx: 4096\nworkload:\n  prompt_tokens: 64\n  gen_tokens: 16\n  repetitions: 2\n";
        let err = parse(text, "t.yaml").unwrap_err().to_string();
        assert_eq!(
            err,
            "t.yaml: line 3: vary.batch_ubatch: [512, 1024]: need 1 <= ubatch <= batch <= 65536"
        );
    }

    #[test]
    fn a_bad_pair_is_reported_where_its_list_starts_with_its_key_path() {
        let text = "name: t\nvary:\n  batch_ubatch:\n    - [2048, 512]\n    - [512, 1024]\nfixed:\n  ctx: 4096\nworkload:\n  prompt_tokens: 64\n  gen_tokens: 16\n  repetitions: 2\n";
        let err = parse(text, "t.yaml").unwrap_err().to_string();
        // serde_yaml_ng places the error at the sequence the pair is in (line 4), with the
        // key path; the old key grep could only name the key's line (3).
        assert_eq!(
            err,
            "t.yaml: line 4: vary.batch_ubatch: [512, 1024]: need 1 <= ubatch <= batch <= 65536"
        );
    }

    #[test]
    fn malformed_yaml_reports_a_line() {
        let err = parse("name: [unclosed\n", "bad.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.yaml: line"), "{err}");
    }

    const SMALL: &str = "name: t\nvary:\n  flash_attn: [on]\nfixed:\n  ctx: 4096\nworkload:\n  prompt_tokens: 64\n  gen_tokens: 16\n  repetitions: 2\n";

    #[test]
    fn default_space_searches_pinned_experts_and_fits_own_placement() {
        use crate::config::LoadMode;
        let d = load("default").unwrap();
        assert!(d.load_modes().contains(&LoadMode::None));
        assert_eq!(d.load_modes()[0], LoadMode::None);
        assert!(d.has_fit_candidate());
        assert!(d.vary.placement.contains(&PlacementStyle::LastSplit));
        assert_eq!(d.vary.no_op_offload_max_ubatch, Some(256));
        assert_eq!(d.op_offload_choices(256), [true, false]);
        assert_eq!(d.op_offload_choices(512), [true]);
        // A space that names none of the new keys keeps today's behaviour.
        let s = parse(SMALL, "t.yaml").unwrap();
        assert_eq!(s.load_modes(), [LoadMode::Auto]);
        assert_eq!(s.vary.placement, [PlacementStyle::First]);
        assert!(!s.has_fit_candidate());
        assert_eq!(s.op_offload_choices(1), [true]);
    }

    #[test]
    fn older_spaces_with_fixed_mmap_still_parse() {
        use crate::config::LoadMode;
        let old = SMALL.replace("  ctx: 4096\n", "  ctx: 4096\n  mmap: false\n");
        assert_eq!(
            parse(&old, "t.yaml").unwrap().load_modes(),
            [LoadMode::None]
        );
        let old = SMALL.replace("  ctx: 4096\n", "  ctx: 4096\n  mmap: true\n");
        assert_eq!(
            parse(&old, "t.yaml").unwrap().load_modes(),
            [LoadMode::Auto]
        );
        let both = old.replace(
            "  flash_attn: [on]\n",
            "  flash_attn: [on]\n  load_mode: [none]\n",
        );
        let err = parse(&both, "t.yaml").unwrap_err().to_string();
        assert!(err.contains("line 7") && err.contains("not both"), "{err}");
    }

    #[test]
    fn out_of_range_placement_keys_are_refused_with_their_line() {
        let with = |line: &str| {
            SMALL.replace(
                "  flash_attn: [on]\n",
                &format!("  flash_attn: [on]\n{line}\n"),
            )
        };
        for (line, want) in [
            ("  load_mode: [pinned]", "line 4"),
            ("  load_mode: []", "load_mode needs at least one value"),
            ("  placement: [middle]", "line 4"),
            ("  placement: []", "placement needs at least one"),
            ("  no_op_offload_max_ubatch: 0", "outside 1..=65536"),
            (
                "  no_op_offload_max_ubatch: 70000",
                "line 4: no_op_offload_max_ubatch 70000",
            ),
            ("  levers: {parallel: [1]}", "outside 2..=64 slots"),
            (
                "  levers: {checkpoint_min_step: [0]}",
                "outside 1..=1048576",
            ),
            ("  levers: {speculative: [draft-simple]}", "line 4"),
            ("  levers: {slots: [2]}", "line 4"),
        ] {
            let err = parse(&with(line), "t.yaml").unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
        let fit = SMALL.replace("  ctx: 4096\n", "  ctx: 4096\n  fit_target_mib: 2000000\n");
        let err = parse(&fit, "t.yaml").unwrap_err().to_string();
        assert!(err.contains("line 6: fit_target_mib 2000000"), "{err}");
        let ok = with("  load_mode: [none, mmap+mlock]\n  placement: [last, fit]\n  levers: {speculative: [ngram-mod, draft-mtp], checkpoint_min_step: [1024], parallel: [2, 4]}");
        let s = parse(&ok, "t.yaml").unwrap();
        assert_eq!(
            s.vary.levers.speculative,
            [
                crate::config::SpecType::NgramMod,
                crate::config::SpecType::DraftMtp
            ]
        );
        assert_eq!(s.vary.levers.parallel, [2, 4]);
        assert_eq!(
            s.vary.placement,
            [PlacementStyle::Last, PlacementStyle::Fit]
        );
    }

    #[test]
    fn quality_floor_parses_and_bad_values_name_their_line() {
        let base = "name: t\nfixed:\n  ctx: 4096\nvary: {}\nworkload:\n  prompt_tokens: 64\n  gen_tokens: 16\n  repetitions: 2\n";
        let s = parse(&format!("{base}quality:\n  min_top1_pct: 99\n"), "t.yaml").unwrap();
        assert_eq!(s.quality.unwrap().min_top1_pct, Some(99.0));
        let err = parse(&format!("{base}quality:\n  min_top1_pct: 120\n"), "t.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t.yaml: line 10: min_top1_pct 120 is outside 0..=100");
    }

    /// Issue 53: a budget is refused by its class (not finite, not above 0, past a week),
    /// from a space file as from `--budget-minutes`.
    #[test]
    fn budgets_past_a_week_or_not_finite_are_refused() {
        for minutes in ["1e300", ".inf", ".nan", "0", "-3", "10081"] {
            let text = format!("{SMALL}budget:\n  trials: 4\n  minutes: {minutes}\n");
            let err = parse(&text, "t.yaml").map(|_| ()).unwrap_err().to_string();
            assert!(err.contains("at most 10080 (a week)"), "{minutes}: {err}");
        }
        let ok = format!("{SMALL}budget:\n  trials: 4\n  minutes: 10080\n");
        assert!(parse(&ok, "t.yaml").is_ok());
    }

    #[test]
    fn bad_kv_type_is_refused() {
        let text = "name: t\nvary:\n  kv_types: [[q8_0, 'q8_0; rm -rf /']]\nfixed:\n  ctx: 4096\nworkload:\n  prompt_tokens: 64\n  gen_tokens: 16\n  repetitions: 2\n";
        assert!(parse(text, "t.yaml").is_err());
    }
}
