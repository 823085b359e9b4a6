//! Choose: the plan's config, placed for this box's cards, from a profile's choices or, without
//! one, by comparing the default space's batch and KV pairs by predicted speed.

use super::*;
use crate::engine::{Flag, LaunchArgs};

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
pub(super) struct DefaultChoices {
    pub(super) base: LaunchConfig,
    pub(super) batches: Vec<[u32; 2]>,
    pub(super) kvs: Vec<[crate::config::KvType; 2]>,
    /// The space itself, its placement styles less `fit` (which places itself at launch, so
    /// the plan cannot predict it): what the tune's placement variants are filled from.
    pub(super) space: crate::space::SearchSpace,
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
pub(super) fn default_choices(ctx: u32, host: &HostInfo) -> Result<DefaultChoices, String> {
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
pub(super) fn from_profile(
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
pub(super) struct Placed {
    pub(super) cfg: LaunchConfig,
    pub(super) fits: bool,
    pub(super) reasons: Vec<String>,
    pub(super) warnings: Vec<String>,
}

/// What each card keeps out of its predicted buffers in a plan: the larger of its CUDA context
/// and a 3 % margin, as [`plan_fit_target_mib`] on one card.
pub(super) fn plan_card_extra_mib(cards: &[crate::hardware::GpuBudget]) -> Vec<f64> {
    cards
        .iter()
        .map(|g| g.budget_mib as f64 - plan_fit_target_mib(g.budget_mib as f64))
        .collect()
}

/// Place `cfg` on this box: on one GPU the fewest `--n-cpu-moe` whose predicted VRAM fits the
/// budget; on several the fewest CPU blocks for which the tune's balanced split fits every card;
/// nothing on a box without a GPU or for a dense model.
pub(super) fn place(
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
                    let ts = Flag::TensorSplit;
                    reasons.push(format!(
                        "{ts} {}: the split that leaves the fullest card the most room, as the \
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
                    "the profile's box had {}; this one has {}: its placement does not \
                     carry over",
                    crate::util::count(
                        profile.map_or(0, |p| p.hardware.gpus.len()) as u64,
                        "GPU",
                        "GPUs"
                    ),
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
                    let ncm = Flag::NCpuMoe;
                    reasons.push(format!(
                        "{ncm} {n}: the fewest blocks' experts on the CPU whose predicted \
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
                    let ncm = Flag::NCpuMoe;
                    reasons.push(format!(
                        "the profile's box used {ncm} {n} with a budget of {}",
                        profile_budget_mib(p)
                            .map_or("?".into(), |v| crate::util::fmt_mib(v as f64))
                    ));
                }
            }
        }
        Some(_) => reasons.push(format!(
            "dense model: nothing for {} to move; placement left to the server's auto-fit",
            Flag::NCpuMoe
        )),
        None => reasons.push("no GPU on this box: CPU-only config, no placement flags".to_string()),
    }
    Placed {
        cfg,
        fits,
        reasons,
        warnings,
    }
}

/// "-b 2048 -ub 512, q8_0 KV": the non-placement choices a candidate differs by.
pub(super) fn choice_label(c: &LaunchConfig) -> String {
    let kv = if c.cache_type_k == c.cache_type_v {
        format!("{} KV", c.cache_type_k)
    } else {
        format!("{}/{} KV", c.cache_type_k, c.cache_type_v)
    };
    match (c.batch, c.ubatch) {
        (Some(b), Some(ub)) => format!("{} {b} {} {ub}, {kv}", Flag::Batch, Flag::Ubatch),
        _ => kv,
    }
}

/// The space's placement styles (`fit` left out) for `template`, filled to the plan's budget
/// by the tune's own filling ([`crate::placement::propose`]): one GPU and a MoE model
/// only; a placement predicted to swap the host is left out.
pub(super) fn styled_placements(
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
                    None => format!("{} {}", Flag::NCpuMoe, c.config.n_cpu_moe.unwrap_or(0)),
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
pub(super) fn choose_by_speed(
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
    let what = match (styled, n_fit == placed.len()) {
        (false, true) => format!("the {} batch/KV pairs of the 'default' space", n_fit),
        (false, false) => format!(
            "the {} of the 'default' space's {} batch/KV pairs that fit",
            n_fit,
            candidates.len()
        ),
        (true, all) => format!(
            "{} (the 'default' space's {} batch/KV pairs, each placed with {} and with \
             its placement styles {styles} filled to the budget)",
            if all {
                format!("the {} configs compared", placed.len())
            } else {
                format!(
                    "the {} of {} configs compared that fit",
                    n_fit,
                    placed.len()
                )
            },
            candidates.len(),
            Flag::NCpuMoe
        ),
    };
    // With placement styles compared, a choice is named by its placement too.
    let choice_label = |c: &LaunchConfig| -> String {
        if !styled {
            return choice_label(c);
        }
        match (&c.cpu_experts, c.n_cpu_moe) {
            (Some(e), _) => format!("experts of {} on the CPU, {}", e.label(), choice_label(c)),
            (None, Some(n)) => format!("{} {n}, {}", Flag::NCpuMoe, choice_label(c)),
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
