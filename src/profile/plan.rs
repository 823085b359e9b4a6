//! `qtune plan`: propose a config for this box without trials, from the memory prediction and
//! the best-matching profile (a 24 GB card's profile adapted to a 16 GB card, say).

use super::*;

/// What the plan's predicted buffers may fill of a VRAM budget: the budget minus the larger of
/// the card's CUDA context ([`crate::model::cards::CARD_CONTEXT_MIB`]: a plan launches nothing,
/// so it cannot measure it as a tune does) and a 3 % margin for prediction error.
pub fn plan_fit_target_mib(budget_mib: f64) -> f64 {
    budget_mib - crate::model::cards::CARD_CONTEXT_MIB.max(budget_mib * 0.03)
}
/// Budgets within this fraction of the profile's count as "the same card budget".
const SAME_BUDGET_FRACTION: f64 = 0.10;

/// How far a plan can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Same model, same card, about the same VRAM budget: the profile's winner, re-checked.
    High,
    /// Same model (or its shape) on another card or budget: placement re-predicted.
    Medium,
    /// No matching profile: the default search space's first choices.
    Low,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// How a profile's model relates to the model being planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModelMatch {
    /// Different architecture or shape.
    Other,
    /// Same architecture, block count and expert count (e.g. another quantization).
    Shape,
    /// Same model fingerprint (shape and tensor types).
    Fingerprint,
}

/// How `p`'s model relates to `layout`.
pub fn model_match(p: &Profile, layout: &ModelLayout) -> ModelMatch {
    if p.model.fingerprint == layout.fingerprint {
        ModelMatch::Fingerprint
    } else if p.model.arch == layout.arch
        && p.model.n_blocks == layout.n_blocks
        && p.model.n_experts == layout.n_experts
    {
        ModelMatch::Shape
    } else {
        ModelMatch::Other
    }
}

/// The VRAM budget a profile was tuned under (None for a CPU-only tune).
pub fn profile_budget_mib(p: &Profile) -> Option<u64> {
    if p.hardware.gpus.is_empty() {
        return None;
    }
    p.hardware.vram_budget_mib.or_else(|| {
        crate::run::vram_budget_mib(
            true,
            p.hardware.free_vram_at_start_mib,
            p.hardware.headroom_mib,
        )
    })
}

/// This box's VRAM budget: free VRAM (summed) minus headroom; None with no GPU. With two GPUs
/// or more, the sum of each card's budget (the headroom kept on each).
pub fn box_budget_mib(hw: &HardwareProfile, headroom_mib: u64) -> Option<u64> {
    crate::run::box_vram_budget_mib(hw, headroom_mib)
}

fn same_gpus(p: &Profile, hw: &HardwareProfile) -> bool {
    let mine: Vec<String> = hw.gpus.iter().map(|g| sanitize_label(&g.name)).collect();
    let theirs: Vec<String> = p.hardware.gpus.iter().map(|g| g.name.clone()).collect();
    mine == theirs
}

fn same_budget(p: &Profile, budget: Option<u64>) -> bool {
    match (profile_budget_mib(p), budget) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            (a as f64 - b as f64).abs() < SAME_BUDGET_FRACTION * (a.max(b).max(1)) as f64
        }
        _ => false,
    }
}

/// The best profile for `layout` on `hw` among `profiles`: same model fingerprint first, then
/// same architecture and shape; among those the same GPUs, then the closest VRAM budget.
/// None when no profile is for this model.
pub fn best_profile<'a>(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    headroom_mib: u64,
    profiles: &'a [Profile],
) -> Option<&'a Profile> {
    let budget = box_budget_mib(hw, headroom_mib);
    profiles
        .iter()
        .filter(|p| model_match(p, layout) > ModelMatch::Other)
        .min_by_key(|p| {
            let distance = match (profile_budget_mib(p), budget) {
                (Some(a), Some(b)) => a.abs_diff(b),
                (None, None) => 0,
                _ => u64::MAX,
            };
            (
                std::cmp::Reverse(model_match(p, layout)),
                !same_gpus(p, hw),
                distance,
            )
        })
}

/// A launch config proposed for this box, with why and how far to trust it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub config: LaunchConfig,
    pub confidence: Confidence,
    /// Why the config is what it is, one sentence each.
    pub reasons: Vec<String>,
    /// Things the user should check (host RAM, nothing fits).
    pub warnings: Vec<String>,
    pub predicted_gpu_mib: f64,
    pub predicted_host_mib: f64,
    /// Free VRAM minus headroom; None with no GPU.
    pub budget_mib: Option<u64>,
    /// Name of the profile the plan started from.
    pub from_profile: Option<String>,
    /// False when even all experts on the CPU do not fit the budget.
    pub fits: bool,
    /// Predicted generation and prompt speed, with intervals; None with the reason in
    /// `speed_note` when the model cannot predict this box.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed: Option<PlanSpeed>,
    /// Why there is no speed prediction, or what it rests on.
    pub speed_note: String,
    /// Two GPUs or more: each card's budget and predicted VRAM, MiB, device order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cards: Vec<(crate::hardware::GpuBudget, f64)>,
    /// No profile: the configs compared by predicted speed (each batch/KV pair, placed with
    /// `--n-cpu-moe` and, on one GPU, with the space's placement styles; empty when none were).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compared: Vec<PlanCandidate>,
    /// One GPU: what `llama-server` gives with no flags, predicted from the placement its own
    /// fit is expected to choose ([`crate::placement::server_default_stand_in`]): the
    /// tune's reference, and what it keeps when nothing is proven faster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_default: Option<DefaultSpeed>,
}

/// The server's default, predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DefaultSpeed {
    /// The placement its fit is expected to choose, as qtune's flags would say it.
    pub placement: String,
    pub prediction: crate::model::speed::SpeedPrediction,
}

/// [`Plan::server_default`]: one GPU with a speed model for it, a MoE model.
fn server_default_speed(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    ctx: u32,
) -> Option<DefaultSpeed> {
    use crate::placement::{predict_server_default, stand_in_placement};
    let [gpu] = hw.gpus.as_slice() else {
        return None;
    };
    let (stand_in, prediction) = predict_server_default(
        layout,
        &LaunchConfig::baseline(ctx),
        gpu.vram_free_mib as f64,
        &crate::model::speed::SpeedBox::from_hardware(hw),
        crate::model::speed::DEFAULT_PROMPT_TOKENS,
    )?;
    Some(DefaultSpeed {
        placement: stand_in_placement(&stand_in),
        prediction,
    })
}

/// The plan's predicted speed (`crate::model::speed`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanSpeed {
    pub prediction: crate::model::speed::SpeedPrediction,
    /// "model" (the speed model alone) or "profile" (the profile's measured winner scaled by
    /// the model's ratio between the two boxes and configs).
    pub basis: String,
}

/// Predict the plan's speed: from the profile's measured winner scaled by the model's ratio
/// (this config on this box over the winner's config on the profile's box) when the profile
/// is for this model, else the model alone.
pub fn plan_speed(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    cfg: &LaunchConfig,
    profile: Option<&Profile>,
) -> (Option<PlanSpeed>, String) {
    use crate::model::speed::{self, SpeedBox, FITTED};
    let here = SpeedBox::from_hardware(hw);
    let prompt = profile
        .map(|p| p.space.workload.prompt_tokens)
        .unwrap_or(speed::DEFAULT_PROMPT_TOKENS);
    let Some(mut pred) = speed::predict(layout, cfg, &here, hw.has_gpu(), prompt, &FITTED) else {
        return (
            None,
            format!(
                "no speed prediction: {}",
                here.sources
                    .iter()
                    .find(|s| s.contains("unknown"))
                    .cloned()
                    .unwrap_or_else(|| "placement is left to the server".into())
            ),
        );
    };
    let model_note = format!(
        "speed from the model alone ({}; pp for a {prompt}-token prompt){}",
        here.sources.join(", "),
        if hw.has_gpu() {
            ""
        } else {
            "; CPU-only: the model was fitted on GPU runs only, so this is a rough estimate \
             and the interval is likely too narrow"
        }
    );
    let Some(p) = profile.filter(|p| model_match(p, layout) > ModelMatch::Other) else {
        return (
            Some(PlanSpeed {
                prediction: pred,
                basis: "model".into(),
            }),
            model_note,
        );
    };
    let there = SpeedBox {
        gpu_bw_gbs: p
            .hardware
            .gpus
            .first()
            .and_then(|g| speed::gpu_bandwidth_by_name(&g.name)),
        pcie_gbs: here.pcie_gbs,
        host_bw_gbs: p
            .hardware
            .mem_bandwidth_gbs
            .unwrap_or(speed::DEFAULT_HOST_BW_GBS),
        physical_cores: p
            .hardware
            .physical_cores
            .unwrap_or(p.hardware.logical_cores)
            .max(1),
        host_bw_share_by_threads: Vec::new(),
        sources: Vec::new(),
    };
    let Some(theirs) = speed::predict(
        layout,
        &p.winner.config,
        &there,
        !p.hardware.gpus.is_empty(),
        prompt,
        &FITTED,
    ) else {
        return (
            Some(PlanSpeed {
                prediction: pred,
                basis: "model".into(),
            }),
            format!("{model_note}; the profile's winner could not be modelled, so it is not used"),
        );
    };
    if p.winner.tg.median <= 0.0 || p.winner.pp.median <= 0.0 {
        return (
            Some(PlanSpeed {
                prediction: pred,
                basis: "model".into(),
            }),
            model_note,
        );
    }
    let scale = |e: &mut speed::Estimate, measured: f64, modelled: f64| {
        let r = measured / modelled;
        e.tps *= r;
        e.low *= r;
        e.high *= r;
    };
    scale(&mut pred.tg, p.winner.tg.median, theirs.tg.tps);
    scale(&mut pred.pp, p.winner.pp.median, theirs.pp.tps);
    (
        Some(PlanSpeed {
            prediction: pred,
            basis: "profile".into(),
        }),
        format!(
            "speed: the profile's measured winner ({:.0} tg, {:.0} pp tok/s on {}) scaled by the \
             model's ratio between that box and config and this one; interval as the model's",
            p.winner.tg.median,
            p.winner.pp.median,
            p.hardware.gpu_label()
        ),
    )
}

/// Threads for this box from a profile's thread count: a profile that used all its physical
/// cores uses all of ours; otherwise its count, at most our logical cores.
pub fn scale_threads(profile_threads: u32, p: &ProfileHardware, host: &HostInfo) -> u32 {
    let ours_physical = host.physical_cores.unwrap_or(host.logical_cores).max(1);
    if p.physical_cores == Some(profile_threads) {
        ours_physical
    } else {
        profile_threads.min(host.logical_cores.max(1))
    }
}

/// Predicted generation speeds within this many percent of the fastest candidate's are a tie,
/// which predicted prompt speed breaks ([`crate::model::speed::PICK_TIE_PCT`] says why 3 %).
pub const PLAN_TIE_PCT: f64 = crate::model::speed::PICK_TIE_PCT;

/// One config the plan compared (no profile): a batch/KV pair with one placement, and its
/// predicted speeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanCandidate {
    /// The config's label (placement, threads, batch sizes, KV type).
    pub config: String,
    /// Its predicted VRAM fits the budget (less the CUDA context and a margin).
    pub fits: bool,
    /// Predicted generation and prompt speed, tok/s (None: it does not fit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tg_tps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pp_tps: Option<f64>,
    /// The plan's config.
    pub chosen: bool,
}

/// The built-in `default` space's choices for what is not placement: its first threads, flash
/// attention and load mode on `base`, and its batch/ubatch and KV type pairs to choose from.
struct DefaultChoices {
    base: LaunchConfig,
    batches: Vec<[u32; 2]>,
    kvs: Vec<[crate::config::KvType; 2]>,
    /// The space itself, its placement styles less `fit` (which places itself at launch, so
    /// the plan cannot predict it): what the tune's placement variants are filled from.
    space: crate::space::SearchSpace,
}

impl DefaultChoices {
    /// Every batch/ubatch pair with every KV pair, the space's first choices first.
    fn candidates(&self) -> Vec<LaunchConfig> {
        let batches: Vec<Option<[u32; 2]>> = if self.batches.is_empty() {
            vec![None]
        } else {
            self.batches.iter().copied().map(Some).collect()
        };
        let kvs: Vec<Option<[crate::config::KvType; 2]>> = if self.kvs.is_empty() {
            vec![None]
        } else {
            self.kvs.iter().copied().map(Some).collect()
        };
        let mut out = Vec::new();
        for b in &batches {
            for kv in &kvs {
                let mut c = self.base.clone();
                if let Some([b, ub]) = b {
                    c.batch = Some(*b);
                    c.ubatch = Some(*ub);
                }
                if let Some([k, v]) = kv {
                    c.cache_type_k = *k;
                    c.cache_type_v = *v;
                }
                out.push(c);
            }
        }
        out
    }
}

/// The built-in `default` space's choices at context `ctx` on `host` (Err: why it did not load).
fn default_choices(ctx: u32, host: &HostInfo) -> Result<DefaultChoices, String> {
    let s = crate::space::load("default").map_err(|e| e.to_string())?;
    let mut base = LaunchConfig::baseline(ctx);
    base.parallel = s.fixed.parallel;
    base.load_mode = s.load_modes()[0];
    base.threads = s.vary.threads.first().map(|t| match t {
        crate::space::Threads::Auto(_) => host.physical_cores.unwrap_or(host.logical_cores).max(1),
        crate::space::Threads::Count(n) => (*n).min(host.logical_cores.max(1)),
    });
    if let Some(fa) = s.vary.flash_attn.first() {
        base.flash_attn = *fa;
    }
    let mut space = s.clone();
    space
        .vary
        .placement
        .retain(|&p| p != crate::space::PlacementStyle::Fit);
    Ok(DefaultChoices {
        base,
        batches: s.vary.batch_ubatch.clone(),
        kvs: s.vary.kv_types.clone(),
        space,
    })
}

/// The config a profile's winner gives on this box, before placement: its threads (scaled to
/// this box's cores), batch sizes, KV type, flash attention, load mode and op offload.
fn from_profile(
    p: &Profile,
    layout: &ModelLayout,
    hw: &HardwareProfile,
    ctx: u32,
    reasons: &mut Vec<String>,
) -> LaunchConfig {
    let w = &p.winner.config;
    match model_match(p, layout) {
        ModelMatch::Fingerprint => reasons.push(format!(
            "profile '{}' is for this exact model (same fingerprint)",
            p.name
        )),
        ModelMatch::Shape => reasons.push(format!(
            "profile '{}' is for the same architecture and shape ({} blocks, {} experts) \
             but other tensor types",
            p.name, layout.n_blocks, layout.n_experts
        )),
        ModelMatch::Other => reasons.push(format!(
            "profile '{}' is for another model ({} {} blocks): only its threads, batch \
             sizes and KV type are used",
            p.name, p.model.arch, p.model.n_blocks
        )),
    }
    let threads = w.threads.map(|t| {
        let s = scale_threads(t, &p.hardware, &hw.host);
        if s != t {
            reasons.push(format!(
                "threads {t} on the profile's box ({} physical cores) become {s} here ({} physical, {} logical)",
                p.hardware.physical_cores.map_or("?".into(), |c| c.to_string()),
                hw.host.physical_cores.map_or("?".into(), |c| c.to_string()),
                hw.host.logical_cores
            ));
        }
        s
    });
    if p.space.ctx != ctx {
        reasons.push(format!(
            "the profile was tuned at ctx {}; planned for ctx {ctx} (KV cache re-predicted)",
            p.space.ctx
        ));
    }
    // The profile's choices; the placement is the plan's own (none yet).
    LaunchConfig {
        parallel: w.parallel,
        threads,
        batch: w.batch,
        ubatch: w.ubatch,
        cache_type_k: w.cache_type_k,
        cache_type_v: w.cache_type_v,
        flash_attn: w.flash_attn,
        load_mode: w.load_mode,
        op_offload: w.op_offload,
        ..LaunchConfig::baseline(ctx)
    }
}

/// A config placed on this box, with why and what to check.
struct Placed {
    cfg: LaunchConfig,
    fits: bool,
    reasons: Vec<String>,
    warnings: Vec<String>,
}

/// What each card keeps out of its predicted buffers in a plan: the larger of its CUDA context
/// and a 3 % margin, as [`plan_fit_target_mib`] on one card.
fn plan_card_extra_mib(cards: &[crate::hardware::GpuBudget]) -> Vec<f64> {
    cards
        .iter()
        .map(|g| g.budget_mib as f64 - plan_fit_target_mib(g.budget_mib as f64))
        .collect()
}

/// Place `cfg` on this box: on one GPU the fewest `--n-cpu-moe` whose predicted VRAM fits the
/// budget; on several the fewest CPU blocks for which the tune's balanced split fits every card;
/// nothing on a box without a GPU or for a dense model.
fn place(
    layout: &ModelLayout,
    profile: Option<&Profile>,
    mut cfg: LaunchConfig,
    budget: Option<u64>,
    cards: &[crate::hardware::GpuBudget],
) -> Placed {
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();
    let mut fits = true;
    match budget {
        Some(_) if layout.is_moe() && cards.len() >= 2 => {
            // Two GPUs or more: the split is predicted again for these cards,
            // whatever box the profile came from, by the rule the tune splits with
            // (`SearchContext::config`): for each count of CPU blocks the `-ts` split that
            // leaves the fullest card the most room; the fewest blocks for which that room is
            // not negative. Each card keeps its CUDA context (or a 3 % margin, the larger) out
            // of what its buffers fill, as on one GPU.
            let nb = layout.n_blocks;
            let extra = plan_card_extra_mib(cards);
            let placement =
                |n: u32| crate::model::cards::balanced_split(layout, &cfg, cards, &extra, n);
            let budgets = cards
                .iter()
                .map(|g| {
                    format!(
                        "CUDA{} {}",
                        g.index,
                        crate::util::fmt_mib(g.budget_mib as f64)
                    )
                })
                .collect::<Vec<_>>()
                .join(" + ");
            match (0..=nb).map(placement).find(|p| p.room_mib >= 0.0) {
                Some(p) => {
                    let experts = match p.cpu_blocks.len() {
                        0 => "every expert on the cards".to_string(),
                        n => format!(
                            "the experts of {n} blocks on the CPU, each taken from the share of \
                             the card that needs the room"
                        ),
                    };
                    cfg.place_on_gpus(p.split, p.cpu_blocks);
                    reasons.push(format!(
                        "-ts {}: the split that leaves the fullest card the most room, as the \
                         tune splits, on this box's card budgets ({budgets}); {experts}, so \
                         every card's predicted VRAM fits its own budget less its CUDA context \
                         and a margin ({} of room left on the fullest)",
                        cfg.tensor_split
                            .iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        crate::util::fmt_mib(p.room_mib)
                    ));
                }
                None => {
                    fits = false;
                    let p = placement(nb);
                    cfg.place_on_gpus(p.split, p.cpu_blocks);
                    warnings.push(format!(
                        "nothing fits: even with all {nb} blocks' experts on the CPU a card's \
                         predicted VRAM exceeds its budget less its CUDA context and a margin \
                         ({budgets})"
                    ));
                }
            }
            if profile.is_some_and(|p| p.hardware.gpus.len() != cards.len()) {
                reasons.push(format!(
                    "the profile's box had {} GPU(s); this one has {}: its placement does not \
                     carry over",
                    profile.map_or(0, |p| p.hardware.gpus.len()),
                    cards.len()
                ));
            }
        }
        Some(b) if layout.is_moe() => {
            let target = plan_fit_target_mib(b as f64);
            cfg.place_experts(0);
            match crate::model::memory::min_n_cpu_moe_that_fits(layout, &cfg, target) {
                Some(n) => {
                    cfg.n_cpu_moe = Some(n);
                    reasons.push(format!(
                        "--n-cpu-moe {n}: the fewest blocks' experts on the CPU whose predicted \
                         VRAM fits {} of the {} budget (the rest: the CUDA context and a margin)",
                        crate::util::fmt_mib(target),
                        crate::util::fmt_mib(b as f64)
                    ));
                }
                None => {
                    fits = false;
                    cfg.n_cpu_moe = Some(layout.n_blocks);
                    warnings.push(format!(
                        "nothing fits: even with all {} blocks' experts on the CPU the predicted \
                         VRAM exceeds what the {} budget leaves after the CUDA context and a margin",
                        layout.n_blocks,
                        crate::util::fmt_mib(b as f64)
                    ));
                }
            }
            if let (Some(p), Some(n)) = (profile, p_ncmoe(profile)) {
                if cfg.n_cpu_moe != Some(n) {
                    reasons.push(format!(
                        "the profile's box used --n-cpu-moe {n} with a budget of {}",
                        profile_budget_mib(p)
                            .map_or("?".into(), |v| crate::util::fmt_mib(v as f64))
                    ));
                }
            }
        }
        Some(_) => reasons.push(
            "dense model: nothing for --n-cpu-moe to move; placement left to the server's \
             auto-fit"
                .to_string(),
        ),
        None => reasons.push("no GPU on this box: CPU-only config, no placement flags".to_string()),
    }
    Placed {
        cfg,
        fits,
        reasons,
        warnings,
    }
}

/// A speed for a reason: "10,512 tok/s".
fn fmt_tps(v: f64) -> String {
    format!("{} tok/s", crate::util::fmt_thousands(v))
}

/// "-b 2048 -ub 512, q8_0 KV": the non-placement choices a candidate differs by.
fn choice_label(c: &LaunchConfig) -> String {
    let kv = if c.cache_type_k == c.cache_type_v {
        format!("{} KV", c.cache_type_k)
    } else {
        format!("{}/{} KV", c.cache_type_k, c.cache_type_v)
    };
    match (c.batch, c.ubatch) {
        (Some(b), Some(ub)) => format!("-b {b} -ub {ub}, {kv}"),
        _ => kv,
    }
}

/// The space's placement styles (`fit` left out) for `template`, filled to the plan's budget
/// by the tune's own filling ([`crate::placement::propose`]): one GPU and a MoE model
/// only; a placement predicted to swap the host is left out.
fn styled_placements(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    space: &crate::space::SearchSpace,
    template: &LaunchConfig,
    budget: Option<u64>,
    cards: &[crate::hardware::GpuBudget],
) -> Vec<Placed> {
    let Some(b) = budget else {
        return Vec::new();
    };
    if !layout.is_moe() || cards.len() >= 2 || space.vary.placement.is_empty() {
        return Vec::new();
    }
    let target = plan_fit_target_mib(b as f64);
    let limits = crate::placement::Limits {
        vram_budget_mib: target,
        ram_available_mib: Some(hw.host.ram_available_mib as f64),
        fit_target_mib: 0,
    };
    crate::placement::propose(layout, template, space, &limits)
        .into_iter()
        .filter(|c| c.refused.is_none() && c.style != crate::space::PlacementStyle::Fit)
        .map(|mut c| {
            // Nothing on the CPU (the whole model fits): the same placement as --n-cpu-moe 0.
            if c.config.cpu_experts.is_none() && c.config.n_cpu_moe.is_none() {
                c.config.n_cpu_moe = Some(0);
            }
            c
        })
        .map(|c| Placed {
            reasons: vec![format!(
                "{}: the '{}' placement style filled to the budget as the tune fills it: the \
                 most expert bytes on the GPU whose predicted VRAM fits {} of the {} budget (the \
                 rest: the CUDA context and a margin)",
                match &c.config.cpu_experts {
                    Some(e) => format!("experts of {} on the CPU", e.label()),
                    None => format!("--n-cpu-moe {}", c.config.n_cpu_moe.unwrap_or(0)),
                },
                c.style.as_str(),
                crate::util::fmt_mib(target),
                crate::util::fmt_mib(b as f64)
            )],
            cfg: c.config,
            fits: true,
            warnings: Vec::new(),
        })
        .collect()
}

/// No profile: place every batch/ubatch × KV pair of the `default` space (on one GPU, with
/// `--n-cpu-moe` and with each of the space's placement styles but `fit`, filled to the budget
/// as the tune fills them) and keep the one the speed model predicts best by the tune's
/// objective: the fastest in generation, and among the candidates within [`PLAN_TIE_PCT`] of
/// it the fastest in prompt (at the same predicted prompt speed the faster in generation, then
/// the space's order); a plain `--n-cpu-moe N` tied with that winner in both is kept instead
/// (it needs no `-ot` rule). A candidate that does not fit is out. When the model cannot compare them (no
/// GPU, an unknown card, a dense model, nothing fits) the space's first choices are kept.
fn choose_by_speed(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    choices: &DefaultChoices,
    budget: Option<u64>,
    cards: &[crate::hardware::GpuBudget],
    reasons: &mut Vec<String>,
) -> (Placed, Vec<PlanCandidate>) {
    use crate::model::speed::{self, SpeedBox, FITTED};
    const FIRST: &str = "no profile for this model: threads, batch sizes and KV type are the \
                         built-in 'default' space's first choices (run 'qtune tune' to measure)";
    let candidates = choices.candidates();
    let first = || place(layout, None, candidates[0].clone(), budget, cards);
    if !hw.has_gpu() {
        reasons.push(format!(
            "{FIRST}; not chosen by predicted speed: the speed model was fitted on GPU runs only"
        ));
        return (first(), Vec::new());
    }
    let sb = SpeedBox::from_hardware(hw);
    let mut placed: Vec<(Placed, Option<speed::SpeedPrediction>)> = Vec::new();
    let mut to_predict = Vec::new();
    for c in &candidates {
        let p = place(layout, None, c.clone(), budget, cards);
        let styles = if p.fits {
            styled_placements(layout, hw, &choices.space, c, budget, cards)
        } else {
            Vec::new()
        };
        to_predict.push(p);
        for s in styles {
            if !to_predict.iter().any(|o| o.cfg == s.cfg) {
                to_predict.push(s);
            }
        }
    }
    for p in to_predict {
        let pred = if p.fits {
            let Some(pred) = speed::predict(
                layout,
                &p.cfg,
                &sb,
                true,
                speed::DEFAULT_PROMPT_TOKENS,
                &FITTED,
            ) else {
                reasons.push(format!(
                    "{FIRST}; not chosen by predicted speed: the speed model cannot predict \
                     this box or placement"
                ));
                return (first(), Vec::new());
            };
            Some(pred)
        } else {
            None
        };
        placed.push((p, pred));
    }
    let inputs: Vec<Option<speed::PickInput>> = placed
        .iter()
        .map(|(p, pred)| {
            pred.as_ref().map(|s| speed::PickInput {
                primary: s.tg.tps,
                secondary: s.pp.tps,
                plain: p.cfg.cpu_experts.is_none(),
            })
        })
        .collect();
    let Some(pick) = speed::pick(&inputs, PLAN_TIE_PCT) else {
        reasons.push(format!(
            "{FIRST}; none of its batch/KV pairs fits this budget"
        ));
        return (placed.swap_remove(0).0, Vec::new());
    };
    let tps = |i: usize| inputs[i].map_or((0.0, 0.0), |p| (p.primary, p.secondary));
    let n_fit = inputs.iter().flatten().count();
    let (win_tg, win_pp) = tps(pick.win);
    let best_tg = tps(pick.fastest).0;
    let fastest_tg = pick.fastest;
    let win = (pick.win, win_tg, win_pp);
    let tied_len = pick.tied;
    let chosen = &placed[win.0].0.cfg;
    reasons.push(
        "no profile for this model: threads and flash attention are the built-in 'default' \
         space's first choices, its batch sizes and KV types compared by predicted speed (run \
         'qtune tune' to measure)"
            .to_string(),
    );
    let styles = choices
        .space
        .vary
        .placement
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let styled = placed.len() > candidates.len();
    let what =
        match (styled, n_fit == placed.len()) {
            (false, true) => format!("the {} batch/KV pairs of the 'default' space", n_fit),
            (false, false) => format!(
                "the {} of the 'default' space's {} batch/KV pairs that fit",
                n_fit,
                candidates.len()
            ),
            (true, all) => format!(
            "{} (the 'default' space's {} batch/KV pairs, each placed with --n-cpu-moe and with \
             its placement styles {styles} filled to the budget)",
            if all {
                format!("the {} configs compared", placed.len())
            } else {
                format!("the {} of {} configs compared that fit", n_fit, placed.len())
            },
            candidates.len()
        ),
        };
    // With placement styles compared, a choice is named by its placement too.
    let choice_label = |c: &LaunchConfig| -> String {
        if !styled {
            return choice_label(c);
        }
        match (&c.cpu_experts, c.n_cpu_moe) {
            (Some(e), _) => format!("experts of {} on the CPU, {}", e.label(), choice_label(c)),
            (None, Some(n)) => format!("--n-cpu-moe {n}, {}", choice_label(c)),
            (None, None) => choice_label(c),
        }
    };
    let why = if fastest_tg == win.0 && tied_len == 1 {
        format!(
            "{}: predicted fastest in generation ({}) of {what}; no other within {PLAN_TIE_PCT} %",
            choice_label(chosen),
            fmt_tps(win.1)
        )
    } else if fastest_tg == win.0 {
        format!(
            "{}: predicted fastest in generation ({}) of {what}, and the fastest in prompt ({}) \
             of the {} within {PLAN_TIE_PCT} % of it",
            choice_label(chosen),
            fmt_tps(win.1),
            fmt_tps(win.2),
            tied_len
        )
    } else {
        format!(
            "{}: predicted {} in generation, within {PLAN_TIE_PCT} % of the fastest of {what} \
             ({}, {}); of the {} within it, the fastest in prompt ({})",
            choice_label(chosen),
            fmt_tps(win.1),
            fmt_tps(best_tg),
            choice_label(&placed[fastest_tg].0.cfg),
            tied_len,
            fmt_tps(win.2)
        )
    };
    reasons.push(why);
    let compared = placed
        .iter()
        .enumerate()
        .map(|(i, (p, pred))| PlanCandidate {
            config: p.cfg.label(),
            fits: p.fits,
            tg_tps: pred.as_ref().map(|s| s.tg.tps),
            pp_tps: pred.as_ref().map(|s| s.pp.tps),
            chosen: i == win.0,
        })
        .collect();
    (placed.swap_remove(win.0).0, compared)
}

/// Propose a config for `layout` on `hw` from `profile` (or the defaults) at context `ctx`,
/// leaving `headroom_mib` of free VRAM unused. Pure: no probing, no files.
///
/// With a profile its choices are kept and only placed again. Without one the `default`
/// space's batch sizes and KV types are compared by predicted speed ([`PLAN_TIE_PCT`]).
pub fn plan(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    profile: Option<&Profile>,
    ctx: u32,
    headroom_mib: u64,
) -> Plan {
    let mut reasons = Vec::new();
    let budget = box_budget_mib(hw, headroom_mib);
    let matched = profile.map(|p| model_match(p, layout));
    let cards = crate::run::gpu_budgets(hw, headroom_mib);

    let (placed, compared) = match profile {
        Some(p) => {
            let cfg = from_profile(p, layout, hw, ctx, &mut reasons);
            (place(layout, profile, cfg, budget, &cards), Vec::new())
        }
        None => match default_choices(ctx, &hw.host) {
            Ok(choices) => choose_by_speed(layout, hw, &choices, budget, &cards, &mut reasons),
            Err(e) => {
                reasons.push(format!(
                    "no profile for this model and the default space did not load ({e}): server defaults"
                ));
                (
                    place(layout, None, LaunchConfig::baseline(ctx), budget, &cards),
                    Vec::new(),
                )
            }
        },
    };
    let Placed {
        cfg,
        fits,
        reasons: place_reasons,
        mut warnings,
    } = placed;
    reasons.extend(place_reasons);

    let pred = if cards.len() >= 2 {
        let free: Vec<f64> = cards.iter().map(|g| g.free_mib as f64).collect();
        crate::model::memory::predict_devices(layout, &cfg, &free)
    } else {
        crate::model::memory::predict(layout, &cfg, hw.has_gpu())
    };
    if pred.host_mib > hw.host.ram_available_mib as f64 {
        warnings.push(format!(
            "predicted host memory {} exceeds this box's available RAM {}{}",
            crate::util::fmt_mib(pred.host_mib),
            crate::util::fmt_mib(hw.host.ram_available_mib as f64),
            if cfg.load_mode.maps_file() {
                " (the model is memory-mapped: expect paging from disk)"
            } else {
                ""
            }
        ));
    }

    let confidence = match (profile, matched) {
        (Some(p), Some(ModelMatch::Fingerprint)) if same_gpus(p, hw) && same_budget(p, budget) => {
            reasons.push("same model, same card and a VRAM budget within 10 %".to_string());
            Confidence::High
        }
        (Some(p), Some(ModelMatch::Fingerprint | ModelMatch::Shape)) => {
            if !same_gpus(p, hw) {
                reasons.push(format!(
                    "the profile ran on {}; this box has {}",
                    p.hardware.gpu_label(),
                    if hw.gpus.is_empty() {
                        "no GPU".to_string()
                    } else {
                        hw.gpus
                            .iter()
                            .map(|g| g.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" + ")
                    }
                ));
            } else if !same_budget(p, budget) {
                reasons.push(format!(
                    "the profile's VRAM budget ({}) differs from this box's ({}) by 10 % or more",
                    profile_budget_mib(p).map_or("-".into(), |v| crate::util::fmt_mib(v as f64)),
                    budget.map_or("-".into(), |v| crate::util::fmt_mib(v as f64))
                ));
            }
            Confidence::Medium
        }
        _ => Confidence::Low,
    };

    let (speed, speed_note) = plan_speed(layout, hw, &cfg, profile);
    Plan {
        server_default: server_default_speed(layout, hw, ctx),
        config: cfg,
        speed,
        speed_note,
        confidence,
        reasons,
        warnings,
        predicted_gpu_mib: pred.gpu_mib,
        predicted_host_mib: pred.host_mib,
        budget_mib: budget,
        from_profile: profile.map(|p| p.name.clone()),
        fits,
        cards: cards
            .iter()
            .map(|g| {
                let used = pred
                    .gpu_devices
                    .iter()
                    .find(|d| d.device == g.index)
                    .map_or(0.0, |d| d.total_mib);
                (g.clone(), used)
            })
            .collect(),
        compared,
    }
}

fn p_ncmoe(profile: Option<&Profile>) -> Option<u32> {
    profile.and_then(|p| p.winner.config.n_cpu_moe)
}

/// The text block `qtune plan` prints on stderr.
pub fn plan_text(plan: &Plan, model: &Path) -> String {
    let mib = crate::util::fmt_mib;
    let mut o = String::new();
    let _ = writeln!(o, "Plan for {}", model.display());
    let _ = writeln!(
        o,
        "  profile: {}",
        plan.from_profile
            .as_deref()
            .unwrap_or("none (built-in defaults)")
    );
    let _ = writeln!(o, "  config: {}", plan.config.label());
    let _ = writeln!(o, "  confidence: {}", plan.confidence.as_str());
    for r in &plan.reasons {
        let _ = writeln!(o, "    - {r}");
    }
    if !plan.compared.is_empty() {
        let _ = writeln!(o, "  compared (predicted, not measured; * the plan's):");
        for c in &plan.compared {
            let speed = match (c.tg_tps, c.pp_tps) {
                (Some(tg), Some(pp)) => format!("tg {tg:.0}, pp {pp:.0} tok/s"),
                _ => "does not fit".to_string(),
            };
            let mark = if c.chosen { '*' } else { ' ' };
            let _ = writeln!(o, "    {mark} {}: {speed}", c.config);
        }
    }
    match plan.budget_mib {
        Some(b) => {
            let _ = writeln!(
                o,
                "  predicted VRAM: {} of buffers, within {} of a {} budget (the rest: the CUDA context and a margin)",
                mib(plan.predicted_gpu_mib),
                mib(plan_fit_target_mib(b as f64)),
                mib(b as f64)
            );
        }
        None => {
            let _ = writeln!(o, "  predicted VRAM: none (no GPU)");
        }
    }
    for (g, used) in &plan.cards {
        let _ = writeln!(
            o,
            "    CUDA{} {}: {} of its {} budget",
            g.index,
            g.name,
            mib(*used),
            mib(g.budget_mib as f64)
        );
    }
    let _ = writeln!(o, "  predicted host RAM: {}", mib(plan.predicted_host_mib));
    match &plan.speed {
        Some(sp) => {
            let p = &sp.prediction;
            let _ = writeln!(
                o,
                "  predicted speed (a prediction, not a measurement): tg {}, pp {}",
                p.tg.text(),
                p.pp.text()
            );
            let _ = writeln!(
                o,
                "    per token: GPU {:.1} ms, CPU experts {:.1} ms, overhead {:.1} ms",
                p.decode.gpu_ms, p.decode.cpu_experts_ms, p.decode.overhead_ms
            );
            let _ = writeln!(o, "    - {}", plan.speed_note);
        }
        None => {
            let _ = writeln!(o, "  predicted speed: none ({})", plan.speed_note);
        }
    }
    if let Some(d) = &plan.server_default {
        let _ = writeln!(
            o,
            "  the server's default (no flags: its own fit, {}, mmap, f16 KV, -ub 512), predicted: tg {}, pp {}",
            d.placement,
            d.prediction.tg.text(),
            d.prediction.pp.text()
        );
    }
    for w in &plan.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KvType;
    use crate::hardware::{GpuInfo, PcieLink};

    fn layout(n_experts: u32) -> ModelLayout {
        let experts = if n_experts > 0 { 400 << 20 } else { 0 };
        ModelLayout {
            file_bytes: 0,
            n_experts_used: n_experts.min(2),
            n_embd: 1024,
            n_head: 8,
            n_head_kv: 2,
            n_vocab: 1000,
            ctx_train: 32768,
            token_embd_bytes: 100 << 20,
            output_bytes: 100 << 20,
            tensor_bytes: 0,
            fingerprint: "00112233aabbccdd".into(),
            ..ModelLayout::uniform(24, n_experts, experts, 40 << 20)
        }
    }

    fn host(physical: u32, logical: u32) -> HostInfo {
        HostInfo {
            cpu_model: "test cpu".into(),
            physical_cores: Some(physical),
            logical_cores: logical,
            ram_total_mib: 65536,
            ram_available_mib: 60000,
            os: "test".into(),
            mem_bandwidth_gbs: None,
            mem_bandwidth_by_threads: Vec::new(),
        }
    }

    fn hw(gpu: Option<(&str, u64)>) -> HardwareProfile {
        HardwareProfile {
            gpus: gpu
                .into_iter()
                .map(|(name, free)| GpuInfo {
                    index: 0,
                    name: name.into(),
                    uuid: "GPU-0".into(),
                    vram_total_mib: free + 300,
                    vram_free_mib: free,
                    vram_used_mib: 300,
                    pcie: PcieLink {
                        gen_current: None,
                        gen_max: None,
                        width_current: None,
                        width_max: None,
                    },
                    compute_capability: None,
                    processes: Vec::new(),
                    mem_bandwidth_gbs: None,
                })
                .collect(),
            no_gpu_reason: gpu.is_none().then(|| "test".to_string()),
            driver_version: None,
            cuda_version: None,
            host: host(8, 16),
            fingerprint: "abcdef0123456789".into(),
        }
    }

    /// The profile of the other test module, re-pointed at `layout(8)` on a 6 GiB card.
    fn profile_for(l: &ModelLayout) -> Profile {
        let mut p = crate::profile::tests::profile();
        p.model.fingerprint = l.fingerprint.clone();
        p.model.arch = l.arch.clone();
        p.model.n_blocks = l.n_blocks;
        p.model.n_experts = l.n_experts;
        p.model.n_experts_used = l.n_experts_used;
        p.hardware.gpus[0].name = "Test GPU 6G".into();
        p.hardware.free_vram_at_start_mib = 6144;
        p.hardware.headroom_mib = 512;
        p.hardware.vram_budget_mib = Some(5632);
        p
    }

    #[test]
    fn threads_scale_with_physical_cores_or_are_capped() {
        let mut ph = crate::profile::tests::profile().hardware;
        ph.physical_cores = Some(8);
        // All physical cores there: all physical cores here.
        assert_eq!(scale_threads(8, &ph, &host(16, 32)), 16);
        assert_eq!(scale_threads(8, &ph, &host(4, 8)), 4);
        // Any other count: kept, capped at our logical cores.
        assert_eq!(scale_threads(6, &ph, &host(16, 32)), 6);
        assert_eq!(scale_threads(12, &ph, &host(4, 8)), 8);
    }

    #[test]
    fn same_model_same_card_same_budget_is_high_and_keeps_the_profile_choices() {
        let l = layout(8);
        let p = profile_for(&l);
        let plan = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
        assert_eq!(plan.confidence, Confidence::High, "{:?}", plan.reasons);
        assert_eq!(plan.config.cache_type_k, KvType::Q8_0);
        assert_eq!(plan.config.batch, Some(2048));
        assert_eq!(plan.config.threads, Some(8));
        assert_eq!(plan.config.n_gpu_layers, Some(999));
        assert_eq!(plan.config.fit, Some(false));
        assert!(plan.fits);
        assert!(plan.predicted_gpu_mib <= plan_fit_target_mib(5632.0));
        // One block fewer on the CPU would not fit the margin.
        let n = plan.config.n_cpu_moe.unwrap();
        assert!(n > 0);
        let one_less = LaunchConfig {
            n_cpu_moe: Some(n - 1),
            ..plan.config.clone()
        };
        assert!(
            crate::model::memory::predict(&l, &one_less, true).gpu_mib
                > plan_fit_target_mib(5632.0)
        );
        assert_eq!(plan.from_profile.as_deref(), Some(p.name.as_str()));
    }

    #[test]
    fn other_budget_or_card_is_medium_and_other_model_is_low() {
        let l = layout(8);
        let p = profile_for(&l);
        let bigger = plan(&l, &hw(Some(("Test GPU 6G", 8192))), Some(&p), 8192, 512);
        assert_eq!(bigger.confidence, Confidence::Medium);
        assert!(
            bigger.reasons.iter().any(|r| r.contains("10 %")),
            "{:?}",
            bigger.reasons
        );
        let other_card = plan(&l, &hw(Some(("Other GPU", 6144))), Some(&p), 8192, 512);
        assert_eq!(other_card.confidence, Confidence::Medium);
        let mut shape_only = p.clone();
        shape_only.model.fingerprint = "ffff".into();
        assert_eq!(model_match(&shape_only, &l), ModelMatch::Shape);
        let mut other = p.clone();
        other.model.n_blocks = 40;
        other.model.fingerprint = "eeee".into();
        assert_eq!(model_match(&other, &l), ModelMatch::Other);
        let low = plan(
            &l,
            &hw(Some(("Test GPU 6G", 6144))),
            Some(&other),
            8192,
            512,
        );
        assert_eq!(low.confidence, Confidence::Low);
    }

    #[test]
    fn best_profile_prefers_fingerprint_then_card_then_budget() {
        let l = layout(8);
        let box_hw = hw(Some(("Test GPU 6G", 6144)));
        let exact = profile_for(&l);
        let mut shape = exact.clone();
        shape.name = "shape".into();
        shape.model.fingerprint = "ffff".into();
        let mut other_card = exact.clone();
        other_card.name = "other card".into();
        other_card.hardware.gpus[0].name = "Other GPU".into();
        let mut far = exact.clone();
        far.name = "far".into();
        far.hardware.vram_budget_mib = Some(20000);
        let mut other_model = exact.clone();
        other_model.name = "other model".into();
        other_model.model.arch = "llama".into();
        other_model.model.fingerprint = "eeee".into();

        let all = vec![
            other_model.clone(),
            shape.clone(),
            far.clone(),
            other_card.clone(),
            exact.clone(),
        ];
        let pick = |ps: &[Profile]| best_profile(&l, &box_hw, 512, ps).map(|p| p.name.clone());
        assert_eq!(pick(&all), Some(exact.name.clone()));
        assert_eq!(pick(&all[..4]), Some("far".to_string()));
        assert_eq!(
            pick(&[shape.clone(), other_card.clone()]),
            Some("other card".into())
        );
        assert_eq!(pick(&[other_model.clone(), shape]), Some("shape".into()));
        assert_eq!(pick(&[other_model]), None);
    }

    #[test]
    fn no_gpu_or_dense_model_gets_no_placement_flags() {
        for (l, gpu) in [(layout(8), None), (layout(0), Some(("Test GPU 6G", 6144)))] {
            let plan = plan(&l, &hw(gpu), None, 4096, 512);
            assert_eq!(plan.confidence, Confidence::Low);
            assert!(plan.fits);
            assert!(plan.config.is_auto_placement(), "{:?}", plan.config);
            let args = plan.config.server_args();
            assert!(
                !args.iter().any(|a| a == "-ngl" || a == "--n-cpu-moe"),
                "{args:?}"
            );
            assert_eq!(plan.budget_mib, gpu.map(|(_, f)| f - 512));
            // No GPU: a CPU-only prediction, said to be rough. An unknown GPU with the
            // server's own placement: no prediction, and why.
            let text = plan_text(&plan, Path::new("m.gguf"));
            if gpu.is_none() {
                assert!(plan.speed.is_some(), "{text}");
                assert!(
                    text.contains("predicted speed (a prediction, not a measurement): tg "),
                    "{text}"
                );
                assert!(text.contains("CPU-only"), "{text}");
            } else {
                assert!(plan.speed.is_none(), "{text}");
                assert!(
                    text.contains("predicted speed: none (no speed prediction: "),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn nothing_fits_is_reported_and_host_ram_is_checked() {
        let l = layout(8);
        let mut tiny_box = hw(Some(("Test GPU 6G", 700)));
        tiny_box.host.ram_available_mib = 100;
        let plan = plan(&l, &tiny_box, None, 8192, 512);
        assert!(!plan.fits);
        assert!(
            plan.warnings.iter().any(|w| w.contains("nothing fits")),
            "{:?}",
            plan.warnings
        );
        assert!(
            plan.warnings.iter().any(|w| w.contains("available RAM")),
            "{:?}",
            plan.warnings
        );
        let text = plan_text(&plan, Path::new("m.gguf"));
        assert!(text.contains("warning: nothing fits"), "{text}");
    }

    /// A card the speed model knows (by name), `free_mib` free.
    fn known_card(free_mib: u64) -> HardwareProfile {
        hw(Some(("NVIDIA GeForce RTX 4090", free_mib)))
    }

    /// `cfg` with the default space's first batch/KV choices (-b 2048 -ub 512, q8_0), placed
    /// on one card as the plan places: the fewest --n-cpu-moe that fits `budget_mib`.
    fn first_choices(l: &ModelLayout, cfg: &LaunchConfig, budget_mib: f64) -> LaunchConfig {
        let mut c = LaunchConfig {
            batch: Some(2048),
            ubatch: Some(512),
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            ..cfg.clone()
        };
        c.place_experts(0);
        let n =
            crate::model::memory::min_n_cpu_moe_that_fits(l, &c, plan_fit_target_mib(budget_mib));
        c.n_cpu_moe = n;
        c
    }

    fn predicted(l: &ModelLayout, hw: &HardwareProfile, c: &LaunchConfig) -> (f64, f64) {
        let (sp, note) = plan_speed(l, hw, c, None);
        let p = sp.unwrap_or_else(|| panic!("{note}")).prediction;
        (p.tg.tps, p.pp.tps)
    }

    #[test]
    fn without_a_profile_a_model_that_fits_whole_gets_the_faster_prompt_at_tied_generation() {
        let l = layout(8);
        let card = known_card(24_576);
        let pl = plan(&l, &card, None, 8192, 512);
        assert!(pl.fits, "{:?}", pl.warnings);
        assert_eq!(pl.config.n_cpu_moe, Some(0), "the model fits whole");
        let first = first_choices(&l, &pl.config, 24_064.0);
        assert_eq!(first.n_cpu_moe, Some(0));
        let (tg, pp) = predicted(&l, &card, &pl.config);
        let (tg0, pp0) = predicted(&l, &card, &first);
        // Not the space's first choices: a larger micro-batch or f16 KV, because the model
        // predicts it faster in prompt at a generation speed within the tie band.
        assert!(
            pl.config.ubatch > Some(512) || pl.config.cache_type_k == KvType::F16,
            "{}",
            pl.config.label()
        );
        assert!(pp > pp0 * 1.05, "pp {pp:.0} vs the first choices' {pp0:.0}");
        assert!(
            tg >= tg0 * (1.0 - PLAN_TIE_PCT / 100.0),
            "tg {tg:.0} vs {tg0:.0}"
        );
        assert!(pl.predicted_gpu_mib <= plan_fit_target_mib(24_064.0));
        // What was compared, and why this one, is said.
        assert_eq!(pl.compared.len(), 8, "{:#?}", pl.compared);
        assert_eq!(pl.compared.iter().filter(|c| c.chosen).count(), 1);
        assert!(
            pl.reasons.iter().any(
                |r| r.contains("of the 8 batch/KV pairs of the 'default' space")
                    && r.contains("the fastest in prompt")
            ),
            "{:?}",
            pl.reasons
        );
        let text = plan_text(&pl, Path::new("m.gguf"));
        assert!(
            text.contains("  compared (predicted, not measured"),
            "{text}"
        );
        // What the server gives with no flags is predicted next to it: every expert on this
        // card, the same generation as the plan's (a tie), less prompt speed than the plan's.
        let d = pl.server_default.as_ref().expect("one known GPU");
        assert_eq!(d.placement, "every expert on the GPU");
        assert!(
            d.prediction.pp.tps < pp,
            "{} vs {pp:.0}",
            d.prediction.pp.text()
        );
        assert!(d.prediction.pp.high > d.prediction.pp.tps * 1.4);
        assert!(text.contains("the server's default (no flags"), "{text}");
        // A profile's choices are kept: no comparison.
        let p = profile_for(&l);
        let from_profile = plan(&l, &card, Some(&p), 8192, 512);
        assert!(from_profile.compared.is_empty());
        assert_eq!(from_profile.config.ubatch, p.winner.config.ubatch);
        assert_eq!(
            from_profile.config.cache_type_k,
            p.winner.config.cache_type_k
        );
    }

    #[test]
    fn without_a_profile_a_card_too_small_for_the_bigger_compute_buffer_keeps_what_fits() {
        let l = layout(8);
        // 2,800 MiB free: the experts all on the CPU, and room for -ub 2048's compute buffer
        // with q8_0 KV but not with f16 KV, nor for -ub 4096's.
        let card = known_card(2800);
        let pl = plan(&l, &card, None, 8192, 512);
        assert!(pl.fits, "{:?}", pl.warnings);
        assert!(pl.predicted_gpu_mib <= plan_fit_target_mib(2288.0));
        let fits: Vec<(String, bool)> = pl
            .compared
            .iter()
            .map(|c| (c.config.clone(), c.fits))
            .collect();
        assert!(
            fits.iter().any(|(c, f)| !f && c.contains("b=4096/4096")),
            "{fits:?}"
        );
        assert!(
            fits.iter().any(|(c, f)| *f && c.contains("b=2048/2048")),
            "{fits:?}"
        );
        let chosen = pl.compared.iter().find(|c| c.chosen).unwrap();
        assert!(
            chosen.fits && chosen.config == pl.config.label(),
            "{chosen:?}"
        );
        assert_eq!(
            (pl.config.ubatch, pl.config.cache_type_k),
            (Some(2048), KvType::Q8_0),
            "the faster prompt of what fits"
        );
        for c in pl.compared.iter().filter(|c| !c.fits) {
            assert!(c.tg_tps.is_none() && c.pp_tps.is_none(), "{c:?}");
        }
        let text = plan_text(&pl, Path::new("m.gguf"));
        assert!(
            text.contains("b=4096/4096 kv=q8_0/q8_0 fa=on lm=none: does not fit"),
            "{text}"
        );

        // 12,000 MiB free: -ub 2048 with f16 KV, and -ub 4096, need one more block's experts on
        // the CPU, which costs far more generation than the tie band: the plan keeps the
        // first choices' placement and takes the larger micro-batch only where it fits there.
        let card = known_card(12_000);
        let pl = plan(&l, &card, None, 8192, 512);
        let first = first_choices(&l, &pl.config, 11_488.0);
        assert_eq!(
            pl.config.n_cpu_moe,
            first.n_cpu_moe,
            "{}",
            pl.config.label()
        );
        assert!(
            pl.compared.iter().any(|c| !c.chosen
                && c.fits
                && c.tg_tps.unwrap() < 0.97 * predicted(&l, &card, &first).0),
            "{:#?}",
            pl.compared
        );
        assert!(pl.predicted_gpu_mib <= plan_fit_target_mib(11_488.0));
    }

    #[test]
    fn a_box_with_two_cards_gets_its_split_predicted_again() {
        let l = layout(8);
        let mut two = hw(Some(("Test GPU 6G", 6144)));
        let mut second = two.gpus[0].clone();
        second.index = 1;
        second.name = "Test GPU 4G".into();
        second.vram_free_mib = 4096;
        two.gpus.push(second);
        // From a one-GPU profile of the same model: the split is this box's own.
        let p = profile_for(&l);
        let pl = plan(&l, &two, Some(&p), 8192, 512);
        assert!(pl.fits, "{pl:#?}");
        assert_eq!(pl.config.n_cpu_moe, None);
        assert_eq!(pl.budget_mib, Some(5632 + 3584));
        assert_eq!(pl.cards.len(), 2);
        // Each card's predicted VRAM within its budget less its CUDA context and margin.
        for (g, used) in &pl.cards {
            assert!(
                *used > 0.0 && *used <= plan_fit_target_mib(g.budget_mib as f64),
                "{g:?} {used}"
            );
        }
        // The split is the tune's balanced one: no other split (with its CPU blocks taken the
        // same way) leaves the fullest card more room, and with one CPU block fewer no split
        // fits at all.
        let cards = crate::run::gpu_budgets(&two, 512);
        let free: Vec<f64> = cards.iter().map(|g| g.free_mib as f64).collect();
        let context = vec![crate::model::cards::CARD_CONTEXT_MIB; 2];
        let room = |split: &[u32], n: u32| {
            let mut c = pl.config.clone();
            let blocks = crate::model::cards::cpu_fill(&l, &c, split, &cards, &context, n);
            c.place_on_gpus(split.to_vec(), blocks);
            let pred = crate::model::memory::predict_devices(&l, &c, &free);
            pred.gpu_devices
                .iter()
                .map(|d| {
                    let b = cards[d.device as usize].budget_mib as f64;
                    plan_fit_target_mib(b) - d.total_mib
                })
                .fold(f64::INFINITY, f64::min)
        };
        let n = pl
            .config
            .cpu_experts
            .as_ref()
            .map_or(0, |e| e.blocks.len() as u32);
        let split = pl.config.tensor_split.clone();
        let ours = room(&split, n);
        assert!(ours >= 0.0, "{ours}");
        for p0 in 5..=95u32 {
            let other = room(&[p0, 100 - p0], n);
            assert!(
                other <= ours + 1e-6,
                "-ts {p0},{} leaves {other:.0} MiB on the fullest card, -ts {split:?} {ours:.0}",
                100 - p0
            );
            if n > 0 {
                assert!(
                    room(&[p0, 100 - p0], n - 1) < 0.0,
                    "{p0} with {} CPU blocks",
                    n - 1
                );
            }
        }
        let ts = format!("-ts {},{}: ", split[0], split[1]);
        assert!(
            pl.reasons
                .iter()
                .any(|r| r.starts_with(&ts) && r.contains("the fullest card the most room")),
            "{:?}",
            pl.reasons
        );
        // The reason is one sentence, without a run of spaces from a broken line continuation.
        for r in pl.reasons.iter().chain(&pl.warnings) {
            assert!(!r.contains("  "), "{r:?}");
        }
        assert!(
            pl.reasons.iter().any(|r| r.contains("had 1 GPU(s)")),
            "{:?}",
            pl.reasons
        );
        let text = plan_text(&pl, Path::new("m.gguf"));
        assert!(text.contains("CUDA1 Test GPU 4G: "), "{text}");
        // The same box with one card plans as before: --n-cpu-moe, no split.
        let one = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
        assert!(one.config.n_cpu_moe.is_some() && one.config.tensor_split.is_empty());
        assert!(one.cards.is_empty());
    }
}
