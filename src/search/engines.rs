//! The engine as a tune dimension (`qtune tune --engine both`, issue 56): every engine's
//! baselines are measured, the best of all of them is the reference, and the search's best
//! config is tried on each other engine (with that engine's own levers) as a variant, so
//! that both engines' candidates race on the workload.
//!
//! The search explores on the tune's first engine (`space.fixed.engine`); the others are
//! `space.fixed.also_engines`. The reference is decided on the baselines' launches before the
//! race, so it stays the same while the race runs (and when a killed tune is resumed).

use super::context::SearchContext;
use super::rank::{better, Speeds};
use crate::config::{EngineKind, LaunchConfig};
use crate::trial::{lossless, OutcomeKind, TrialOutcome, TrialRole};

/// The other engines the tune races (none: one engine).
pub fn others(ctx: &SearchContext) -> &[EngineKind] {
    &ctx.space.fixed.also_engines
}

/// An engine's baselines: its server's default, and its own auto-fit where the tune measures
/// that (a GPU, a space that races: [`SearchContext::second_baseline`]).
pub fn pair_of(ctx: &SearchContext, engine: EngineKind) -> (LaunchConfig, Option<LaunchConfig>) {
    if engine == ctx.space.fixed.engine {
        return (ctx.baseline(), ctx.second_baseline());
    }
    let e = crate::engine::of(engine);
    let inputs = ctx.space.fixed.baseline_inputs();
    let fit = ctx
        .second_baseline()
        .map(|_| e.fit_baseline(&inputs, ctx.fit_target_mib, ctx.gpus.len().max(1)));
    (e.default_baseline(&inputs), fit)
}

/// The other engines' baselines, launched once each after the first engine's.
pub fn other_baselines(ctx: &SearchContext) -> Vec<LaunchConfig> {
    let mut out = Vec::new();
    for &e in others(ctx) {
        let (default, fit) = pair_of(ctx, e);
        out.push(default);
        out.extend(fit);
    }
    out
}

/// The pooled speeds of a baseline's launches before the race.
fn before_race(history: &[TrialOutcome], cfg: &LaunchConfig) -> Option<Speeds> {
    Speeds::pooled_measured(history.iter().filter(|o| {
        &o.config == cfg && matches!(o.role, TrialRole::Baseline | TrialRole::SecondBaseline)
    }))
}

/// The engine whose baselines measured best before the race (by the objective): its pair is
/// the reference. The first engine where one engine is tuned, where nothing measured, or on
/// a tie.
pub fn reference_engine(ctx: &SearchContext, history: &[TrialOutcome]) -> EngineKind {
    let first = ctx.space.fixed.engine;
    if others(ctx).is_empty() {
        return first;
    }
    let obj = &ctx.space.objective;
    let best_of = |e: EngineKind| -> Option<Speeds> {
        let (d, f) = pair_of(ctx, e);
        let mut best: Option<Speeds> = None;
        for c in std::iter::once(d).chain(f) {
            if let Some(s) = before_race(history, &c) {
                if best.as_ref().is_none_or(|b| better(&s, b, obj, None)) {
                    best = Some(s);
                }
            }
        }
        best
    };
    let mut pick = (first, best_of(first));
    for &e in others(ctx) {
        if let Some(s) = best_of(e) {
            if pick.1.as_ref().is_none_or(|b| better(&s, b, obj, None)) {
                pick = (e, Some(s));
            }
        }
    }
    pick.0
}

/// The reference pair: the default and (where measured) the auto-fit baseline of
/// [`reference_engine`].
pub fn reference_pair(
    ctx: &SearchContext,
    history: &[TrialOutcome],
) -> (LaunchConfig, Option<LaunchConfig>) {
    pair_of(ctx, reference_engine(ctx, history))
}

/// Every baseline of every engine the tune races, the first engine's first.
pub fn all_baselines(ctx: &SearchContext) -> Vec<LaunchConfig> {
    let mut out: Vec<LaunchConfig> = std::iter::once(ctx.baseline())
        .chain(ctx.second_baseline())
        .collect();
    out.extend(other_baselines(ctx));
    out
}

/// One line per engine raced: its best baseline's generation speed before the race (or why it
/// has none, unless `verdict_says`: the verdict's line for that engine says what happened),
/// and which engine's baselines are the reference. None where one engine is tuned.
pub fn baseline_note(
    ctx: &SearchContext,
    history: &[TrialOutcome],
    verdict_says: bool,
) -> Option<String> {
    if others(ctx).is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    for e in std::iter::once(ctx.space.fixed.engine).chain(others(ctx).iter().copied()) {
        let (d, f) = pair_of(ctx, e);
        let pair: Vec<LaunchConfig> = std::iter::once(d).chain(f).collect();
        let best = pair
            .iter()
            .filter_map(|c| before_race(history, c))
            .map(|s| s.gen.median)
            .fold(None, |a: Option<f64>, g| Some(a.map_or(g, |a| a.max(g))));
        let launches: Vec<&TrialOutcome> = pair
            .iter()
            .flat_map(|c| baseline_launches(history, c))
            .collect();
        let launched = pair
            .iter()
            .filter(|c| !baseline_launches(history, c).is_empty());
        let cut = !launches.is_empty() && launches.iter().all(|o| o.kind.budget_ended());
        parts.push(match (best, launched.count()) {
            (Some(g), _) => format!("{e} {g:.1} tok/s"),
            (None, _) if verdict_says => continue,
            (None, _) if cut => format!("{e} not measured (the minutes budget ended first)"),
            (None, 0) => format!("{e} not measured (its baselines were not launched)"),
            (None, 1) => format!("{e} not measured (its baseline failed)"),
            (None, _) => format!("{e} not measured (its baselines failed)"),
        });
    }
    Some(format!(
        "engines raced: generation {}; the reference is {}'s",
        parts.join(", "),
        reference_engine(ctx, history)
    ))
}

/// A baseline config's launches before the race.
fn baseline_launches<'a>(history: &'a [TrialOutcome], cfg: &LaunchConfig) -> Vec<&'a TrialOutcome> {
    history
        .iter()
        .filter(|o| {
            &o.config == cfg && matches!(o.role, TrialRole::Baseline | TrialRole::SecondBaseline)
        })
        .collect()
}

/// An other engine the tune stops trying after its baselines ([`dropped`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped<'a> {
    pub engine: EngineKind,
    /// Its baselines' launches, every one failed; the first baseline's first.
    pub failed: Vec<&'a TrialOutcome>,
}

impl Dropped<'_> {
    /// The line the tune prints: the engine, and how its first baseline failed (its outcome
    /// kind and the message's first clause, shortened).
    pub fn line(&self) -> String {
        let which = match self.failed.len() {
            1 => "its baseline".to_string(),
            2 => "both its baselines".to_string(),
            n => format!("all {n} of its baselines"),
        };
        let first = self.failed[0];
        format!(
            "{}: not tried further: {which} failed without running out of memory ({}: {})",
            self.engine,
            first.kind,
            shortened(&first.message, 96)
        )
    }
}

/// The first clause of a trial's message (before its advice: "...: read the trial log"), cut
/// to `max` characters.
pub fn shortened(message: &str, max: usize) -> String {
    let clause = message.split(": ").next().unwrap_or(message).trim();
    if clause.chars().count() <= max {
        return clause.to_string();
    }
    let cut: String = clause.chars().take(max.saturating_sub(3)).collect();
    format!("{}...", cut.trim_end())
}

/// A baseline failure that says the engine cannot run this model on this box at all, whatever
/// the placement: it crashed, hung or rejected its command line. Memory failures are not (a
/// searched placement may fit), nor launches that were never the engine's fault (a lost port,
/// a lost RPC worker) or never launched (skipped).
pub fn fails_whatever_placed(kind: OutcomeKind) -> bool {
    matches!(
        kind,
        OutcomeKind::Crash
            | OutcomeKind::LoadTimeout
            | OutcomeKind::RequestTimeout
            | OutcomeKind::BadFlag
    )
}

/// The other engines whose baselines all launched and all failed, none of them for memory
/// ([`fails_whatever_placed`]): the tune tries none of their variants (issue 56: ik_llama.cpp
/// could not load the synthetic Qwen3.5-35B at all, and 3 more launches crashed the same way).
/// Read from the history alone, so a resumed tune decides the same from its journal.
pub fn dropped<'a>(ctx: &SearchContext, history: &'a [TrialOutcome]) -> Vec<Dropped<'a>> {
    let mut out = Vec::new();
    for &engine in others(ctx) {
        let (d, f) = pair_of(ctx, engine);
        let mut pair = vec![d];
        pair.extend(f.filter(|f| !pair.contains(f)));
        let launches: Vec<Vec<&TrialOutcome>> =
            pair.iter().map(|c| baseline_launches(history, c)).collect();
        if launches.iter().any(Vec::is_empty) {
            continue;
        }
        let failed: Vec<&TrialOutcome> = launches.into_iter().flatten().collect();
        if failed.iter().all(|o| fails_whatever_placed(o.kind)) {
            out.push(Dropped { engine, failed });
        }
    }
    out
}

/// Whether [`dropped`] has `engine`.
pub fn is_dropped(ctx: &SearchContext, history: &[TrialOutcome], engine: EngineKind) -> bool {
    dropped(ctx, history).iter().any(|d| d.engine == engine)
}

/// The search's best config on each other engine, where that engine can express it
/// ([`crate::engine::Caps`]), then that engine's own levers on it
/// ([`crate::engine::Engine::own_levers`]); and the lines saying which levers were skipped.
/// None on an engine whose baselines failed whatever the placement ([`dropped`]).
pub fn variants(
    ctx: &SearchContext,
    history: &[TrialOutcome],
    best: &LaunchConfig,
) -> (Vec<LaunchConfig>, Vec<String>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let gone = dropped(ctx, history);
    for &e in others(ctx)
        .iter()
        .chain(std::iter::once(&ctx.space.fixed.engine))
    {
        if gone.iter().any(|d| d.engine == e) {
            continue;
        }
        let on = LaunchConfig {
            engine: e,
            ..best.clone()
        };
        let engine = crate::engine::of(e);
        if !engine.caps().expresses(&on) {
            continue;
        }
        if e != best.engine {
            out.push(on.clone());
        }
        let levers = engine.own_levers(&on, &lever_context(ctx, &on));
        out.extend(levers.configs);
        skipped.extend(levers.skipped);
    }
    (out, skipped)
}

/// Another engine's translation of the search's best placed one block further (its own
/// boundary: [`super::strategy::QtuneSearch`] asks for it when the translation ran out of
/// memory), then that engine's own levers on it.
pub fn placed_further(ctx: &SearchContext, failed: &LaunchConfig, n: u32) -> Vec<LaunchConfig> {
    let moved = failed.clone().with_experts_on_cpu(n);
    let levers = crate::engine::of(moved.engine)
        .own_levers(&moved, &lever_context(ctx, &moved))
        .configs;
    std::iter::once(moved).chain(levers).collect()
}

/// What an engine's own levers need to know of the box, the model, the workload and the
/// config.
fn lever_context(ctx: &SearchContext, c: &LaunchConfig) -> crate::engine::LeverContext {
    crate::engine::LeverContext {
        has_gpu: ctx.has_gpu,
        experts_on_cpu: ctx.has_gpu && !c.no_experts_on_cpu(),
        moe: ctx.layout.is_moe(),
        experts_used: ctx.layout.n_experts_used,
        answers_unchecked: answers_unchecked(&ctx.workload_traits),
        pinned_build: ctx
            .server_versions
            .iter()
            .any(|(e, v)| *e == c.engine && crate::engine::of(*e).is_pinned_build(v)),
    }
}

/// Why this tune cannot check a launch's answers against its reference's: a random-weight
/// model's text means nothing, and only a replayed trace keeps greedy answers to compare.
pub fn answers_unchecked(traits: &super::levers::WorkloadTraits) -> Option<&'static str> {
    if traits.synthetic {
        Some("the model has random weights (qtune synth), so what it costs in quality cannot be checked")
    } else if !traits.real_text {
        Some("this workload keeps no answers to check it against (--workload agent, or a trace from qtune record, does)")
    } else {
        None
    }
}

/// How many launches [`variants`] would take after `history`'s baselines, for the reserve
/// the exploration leaves (none for an engine [`dropped`]).
pub fn variant_count(ctx: &SearchContext, history: &[TrialOutcome]) -> u32 {
    let probe = ctx.config(&ctx.start_base(), 0);
    variants(ctx, history, &probe).0.len() as u32
}

/// A line for each config lossy by design the tune measured (ik_llama.cpp's smart expert
/// reduction): its generation speed beside the same config's without it, and what the
/// losslessness check found ("lossy: request 1's answer differs at token 5 ...").
pub fn lossy_lever_lines(history: &[TrialOutcome]) -> Vec<String> {
    let gen = |c: &LaunchConfig, kinds: &dyn Fn(&TrialOutcome) -> bool| {
        let s: Vec<f64> = history
            .iter()
            .filter(|o| &o.config == c && kinds(o))
            .filter_map(|o| o.metrics.as_ref())
            .flat_map(|m| m.gen_tps.samples.iter().copied())
            .collect();
        crate::trial::Stat::from_samples(&s).map(|s| s.median)
    };
    let mut seen: Vec<&LaunchConfig> = Vec::new();
    let mut out = Vec::new();
    for o in history {
        let Some(lever) = o.config.answer_lever().filter(|l| l.lossy_by_design()) else {
            continue;
        };
        if seen.contains(&&o.config) {
            continue;
        }
        seen.push(&o.config);
        let launches: Vec<&TrialOutcome> =
            history.iter().filter(|t| t.config == o.config).collect();
        let ids: Vec<String> = launches.iter().map(|t| t.id.to_string()).collect();
        let measured = |t: &TrialOutcome| t.metrics.is_some();
        let Some(mine) = gen(&o.config, &measured) else {
            continue;
        };
        let theirs = gen(&o.config.answer_reference(), &|t| t.kind.is_ok());
        let checks: Vec<lossless::Check> = launches
            .iter()
            .filter_map(|t| lossless::check(&t.config, t.metrics.as_ref()?, history))
            .collect();
        let check = checks
            .iter()
            .find(|c| matches!(c, lossless::Check::Differs(_)))
            .or(checks.first());
        let found = match check {
            Some(c @ lossless::Check::Differs(_)) => format!(
                "{}, so it is not recommended",
                lossless::check_phrase_of(c, lever)
            ),
            Some(c) => lossless::check_phrase_of(c, lever),
            None => "its answers could not be compared with the same config's without it, so it is not recommended".to_string(),
        };
        out.push(format!(
            "{} {} ({} {}): generation {mine:.1} tok/s{}; {found}",
            o.config.engine,
            lever.name(),
            if ids.len() == 1 { "trial" } else { "trials" },
            ids.join(", "),
            theirs.map_or(String::new(), |t| format!(" ({t:.1} tok/s without it)")),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shortened;

    #[test]
    fn a_failure_is_named_by_its_first_clause_cut_to_fit() {
        let crash = "llama-server died while loading (killed by signal 11 SIGSEGV) with no \
                     out-of-memory line: read the trial log";
        let clause = crash.split(": read").next().unwrap();
        assert_eq!(shortened(crash, 96), clause);
        assert_eq!(shortened(crash, 20), "llama-server died...");
    }
}
