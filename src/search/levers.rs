//! Settings past placement, tried on the best config the search found, each only where the
//! workload can show what it does (issue 42's levers):
//! - **speculative decoding** from the context's n-grams (`--spec-type`), only on real text (a
//!   replayed trace or the built-in session): its drafts are text the model re-emits, and
//!   cycled filler text would fake their acceptance;
//! - **context checkpoints** (`--checkpoint-min-step`): never on a replay, which cannot show
//!   them ([`checkpoints_not_replayed`]); the summary says so where the model has recurrent
//!   layers (Qwen3.5) and the workload's prompts diverge from the cached one;
//! - **parallel slots** (`-np N -kvu`), only where requests overlap.
//!
//! What was not tried, and why, is said in words for the summary.

use crate::config::LaunchConfig;
use crate::space::Levers;

/// What the tune's workload can show, from its requests (a trace, or the built-in session).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadTraits {
    /// The prompts are real text (a recorded trace or the built-in session), not cycled filler.
    pub real_text: bool,
    /// The most requests in flight at once.
    pub max_overlap: u32,
    /// Some request's prompt shares a prefix with an earlier one and then diverges from it
    /// before that one's end (history edited, thinking dropped): the cache cannot be reused
    /// past that point.
    pub diverges: bool,
    /// The model has recurrent layers (its state cannot roll back token by token).
    pub recurrent: bool,
    /// Its chat requests are replayed with their message delimiters (the trace knows them),
    /// so the server keeps checkpoints at user messages as it did live.
    pub chat_checkpoints: bool,
    /// The model has random weights (`qtune synth`, its GGUF's name says so): its answers
    /// loop, so speculation is never tried on it ([`SYNTHETIC_NO_SPECULATION`]).
    pub synthetic: bool,
    /// The trace's answers predict that `--spec-type ngram-mod` cannot pay
    /// ([`crate::traffic::speculate`]): it is not tried ([`SpecForecast::line`]).
    pub spec_cannot_pay: Option<SpecForecast>,
    /// Why `--spec-type draft-mtp` cannot run (the build, the architecture or the file: one
    /// line from [`crate::engine::mtp::unavailable`]); None where it can, or where the space
    /// does not ask for it.
    pub mtp_unavailable: Option<String>,
}

/// What the trace's answers predict for `--spec-type ngram-mod`, where it cannot pay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecForecast {
    pub drafted: u64,
    pub accepted: u64,
    /// Generation time with it over without, in thousandths.
    pub gen_ratio_milli: u32,
}

impl SpecForecast {
    /// The prediction over `trace`'s answers, where it says ngram-mod cannot pay; None where
    /// it can, or where the trace holds no answers to predict from.
    pub fn cannot_pay(trace: &crate::traffic::trace::Trace) -> Option<SpecForecast> {
        use crate::traffic::speculate;
        let p = speculate::predict(trace, speculate::NgramMod::default());
        p.cannot_pay().then(|| SpecForecast {
            drafted: p.drafted,
            accepted: p.accepted,
            gen_ratio_milli: (p.gen_ratio * 1000.0).round().clamp(0.0, 1e9) as u32,
        })
    }

    /// The tune's one line.
    pub fn line(&self) -> String {
        let acc = if self.drafted == 0 {
            "nothing would be drafted".to_string()
        } else {
            format!(
                "{:.0} % of {} drafted tokens accepted, generation {:.2}x the time",
                self.accepted as f64 * 100.0 / self.drafted as f64,
                self.drafted,
                f64::from(self.gen_ratio_milli) / 1000.0
            )
        };
        format!("speculative decoding (ngram-mod): not tried, predicted from the trace's answers not to pay ({acc})")
    }
}

/// Why speculative decoding is not tried on a random-weight model.
pub const SYNTHETIC_NO_SPECULATION: &str = "speculative decoding: not ranked, the model has random weights (qtune synth): its answers loop and n-gram drafts predict a loop perfectly (every draft accepted), so any gain would be the model's artifact; the same config races without speculation instead";

/// What `draft-mtp` listed in a space does on a random-weight model: its drafts come from a
/// random MTP layer, so its acceptance means nothing, but what drafting and verifying cost
/// does not depend on the weights. The user asked for it by listing it: it is launched and
/// measured, and never ranked.
pub const SYNTHETIC_MTP_COST_ONLY: &str = "MTP: measured for its cost only, not ranked: the model has random weights (qtune synth), so what its MTP layer drafts, and how much of it is accepted, means nothing; the verify and drafting cost does not depend on the weights";

/// Why `--checkpoint-min-step` is not tried on a replay without message delimiters. The
/// pinned llama.cpp keeps a recurrent model's context checkpoints near the end of every
/// prompt, and, for a chat request whose template gives it message delimiters (Qwen3.5's
/// own), also at user messages at least `--checkpoint-min-step` apart. A replay sends token
/// ids to `/completion`, with the chat's delimiters only where the trace holds them (the
/// recorder derives them from the server's template for the Qwen3.5 family,
/// [`crate::traffic::trace::chat_message_delimiters`]); without them the server keeps only the
/// end-of-prompt checkpoints, whatever the flag says.
/// Measured on tiny-qwen35moe (a 7,758-token ChatML history edited at its 4th of 6 user
/// messages): 7,751 tokens re-read at the default 8,192 and 3,881 at 256 with the chat path's
/// delimiters; 7,760 at both without them.
pub fn checkpoints_not_replayed() -> String {
    format!(
        "context checkpoints: not tried, this replay cannot show them (llama.cpp spaces checkpoints by {cms} only at user messages of chat requests, and the trace holds no message delimiters for its chat template, or no chat requests); where your client edits history far back on this model, try {cms} 1024 by hand",
        cms = crate::engine::Flag::CheckpointMinStep
    )
}

/// A prompt that shares a prefix with an earlier one and leaves it more than this many tokens
/// before the earlier one's end diverges: the server keeps a checkpoint near the end of each
/// prompt, so a divergence closer to the end than this costs little on any model.
pub const DIVERGENCE_MIN_TOKENS: usize = 256;

impl WorkloadTraits {
    /// What a trace's requests show (`recurrent`: the model's, from its layout).
    pub fn of_trace(trace: &crate::traffic::trace::Trace, recurrent: bool) -> WorkloadTraits {
        let prompts: Vec<Option<&[u32]>> = trace
            .requests
            .iter()
            .map(|r| r.prompt_tokens.as_deref())
            .collect();
        let links = crate::traffic::trace::prefix_links(&prompts);
        let diverges = links.iter().any(|l| {
            l.is_some_and(|(j, n)| prompts[j].is_some_and(|p| n + DIVERGENCE_MIN_TOKENS < p.len()))
        });
        // The most requests in flight at one time: a sweep over arrivals and ends (an end
        // before an arrival at the same instant).
        let mut events: Vec<(f64, i32)> = trace
            .requests
            .iter()
            .flat_map(|r| [(r.arrived_ms, 1), (r.ended_ms.max(r.arrived_ms), -1)])
            .collect();
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut now, mut max_overlap) = (0i32, 0i32);
        for (_, d) in events {
            now += d;
            max_overlap = max_overlap.max(now);
        }
        let max_overlap = max_overlap.max(0) as u32;
        let chat_checkpoints = trace.header.server.message_delimiters.is_some()
            && trace
                .requests
                .iter()
                .any(|r| crate::traffic::trace::is_chat_endpoint(&r.endpoint));
        WorkloadTraits {
            real_text: true,
            max_overlap,
            diverges,
            recurrent,
            chat_checkpoints,
            synthetic: false,
            spec_cannot_pay: SpecForecast::cannot_pay(trace),
            mtp_unavailable: None,
        }
    }
}

/// The configs to measure, and a line for each lever that was not tried.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeverPlan {
    pub configs: Vec<LaunchConfig>,
    pub skipped: Vec<String>,
}

/// `best` with each of the space's levers that this workload can show.
pub fn propose(levers: &Levers, best: &LaunchConfig, traits: &WorkloadTraits) -> LeverPlan {
    let mut plan = LeverPlan::default();
    let with = |t| LaunchConfig {
        spec_type: Some(t),
        ..best.clone()
    };
    // The model's own MTP layer drafts from what the model predicts, not from the workload's
    // text: tried on any workload where the build and the file can; on random weights for its
    // cost only (the trial is journaled `degenerate`, never ranked).
    if let Some(&t) = levers.speculative.iter().find(|t| t.is_mtp()) {
        if let Some(why) = &traits.mtp_unavailable {
            plan.skipped.push(why.clone());
        } else {
            plan.configs.push(with(t));
            if traits.synthetic {
                plan.skipped.push(SYNTHETIC_MTP_COST_ONLY.to_string());
            }
        }
    }
    let ngrams: Vec<_> = levers.speculative.iter().filter(|t| !t.is_mtp()).collect();
    if !ngrams.is_empty() {
        if traits.synthetic {
            plan.skipped.push(SYNTHETIC_NO_SPECULATION.to_string());
        } else if traits.real_text {
            if let Some(f) = traits.spec_cannot_pay {
                plan.skipped.push(f.line());
            }
            let vetoed = |t: crate::config::SpecType| {
                traits.spec_cannot_pay.is_some() && t == crate::config::SpecType::NgramMod
            };
            plan.configs.extend(
                ngrams
                    .into_iter()
                    .filter(|&&t| !vetoed(t))
                    .map(|&t| with(t)),
            );
        } else {
            plan.skipped.push(
                "speculative decoding: not tried, the workload's text is filler (its drafts would be accepted on repetition, not on what you run); tune with --workload agent (the agent session) or a recorded trace"
                    .to_string(),
            );
        }
    }
    if !levers.checkpoint_min_step.is_empty() {
        if !traits.recurrent {
            plan.skipped.push(
                "context checkpoints: not tried, the model has no recurrent layers (its cache is reused up to any divergence)"
                    .to_string(),
            );
        } else if !traits.diverges {
            plan.skipped.push(
                "context checkpoints: not tried, no prompt of the workload diverges from the cached one".to_string(),
            );
        } else if !traits.chat_checkpoints {
            // The replay cannot show it: see [`checkpoints_not_replayed`].
            plan.skipped.push(checkpoints_not_replayed());
        } else {
            for &n in &levers.checkpoint_min_step {
                plan.configs.push(LaunchConfig {
                    checkpoint_min_step: Some(n),
                    ..best.clone()
                });
            }
        }
    }
    if !levers.parallel.is_empty() {
        if traits.max_overlap >= 2 {
            for &n in &levers.parallel {
                plan.configs.push(LaunchConfig {
                    parallel: n,
                    kv_unified: Some(true),
                    ..best.clone()
                });
            }
        } else {
            plan.skipped
                .push("parallel slots: not tried, no requests of the workload overlap".to_string());
        }
    }
    plan.configs.retain(|c| c != best);
    plan
}

/// A line for each speculative config the tune measured: the acceptance over its launches
/// ("ngram-mod: 61 % of drafted tokens accepted (1234 of 2020, 8 requests)"), and, for one
/// whose answers looped, that it was not ranked.
pub fn acceptance_lines(history: &[crate::trial::TrialOutcome]) -> Vec<String> {
    use crate::trial::acceptance::{self, Acceptance};
    use crate::trial::lossless::{self, Check};
    use crate::trial::OutcomeKind;
    let mut seen: Vec<&LaunchConfig> = Vec::new();
    let mut out = Vec::new();
    for o in history {
        let Some(spec) = o.config.spec_type else {
            continue;
        };
        if seen.contains(&&o.config) {
            continue;
        }
        seen.push(&o.config);
        let mut all: Vec<Acceptance> = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        let (mut looped, mut cost_only) = (false, false);
        for t in history.iter().filter(|t| t.config == o.config) {
            let Some(a) = t.metrics.as_ref().and_then(acceptance::of_metrics) else {
                continue;
            };
            // Not ranked: its answers loop, or (random weights) it was measured for its cost.
            looped |= t.kind == OutcomeKind::Degenerate && a.loops();
            cost_only |= t.kind == OutcomeKind::Degenerate && !a.loops();
            ids.push(t.id.to_string());
            all.push(a);
        }
        let Some(a) = Acceptance::sum(all) else {
            continue;
        };
        let which = format!(
            "{} {}",
            if ids.len() == 1 { "trial" } else { "trials" },
            ids.join(", ")
        );
        // Losslessness: a launch whose answers differ says where; else the first compared.
        let checks: Vec<Check> = history
            .iter()
            .filter(|t| t.config == o.config)
            .filter_map(|t| lossless::check(&t.config, t.metrics.as_ref()?, history))
            .collect();
        let check = checks
            .iter()
            .find(|c| matches!(c, Check::Differs(_)))
            .or(checks.iter().find(|c| matches!(c, Check::NearTie { .. })))
            .or(checks.first());
        out.push(match (looped, check) {
            (false, _) if cost_only => format!(
                "{} in {which}: measured for its cost only (random weights), not ranked",
                a.line(spec.as_str())
            ),
            (true, _) => format!(
                "{} in {which}: the answers loop (n-gram drafts predict a loop perfectly), so speculation is not ranked; the same config races without it",
                a.line(spec.as_str())
            ),
            (false, Some(c @ Check::Differs(_))) => format!(
                "{} in {which}; {} at temperature 0, so it is not recommended",
                a.line(spec.as_str()),
                lossless::check_phrase(c)
            ),
            (false, Some(c)) => format!(
                "{} in {which}; {}",
                a.line(spec.as_str()),
                lossless::check_phrase(c)
            ),
            (false, None) => format!(
                "{} in {which}; losslessness not checked (no launch of the same config without it kept its answers)",
                a.line(spec.as_str())
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SpecType;
    use crate::engine::LaunchArgs;

    fn levers() -> Levers {
        Levers {
            speculative: vec![SpecType::NgramMod],
            checkpoint_min_step: vec![1024],
            parallel: vec![2, 4],
        }
    }

    #[test]
    fn filler_text_without_overlap_tries_nothing_and_says_why() {
        let best = LaunchConfig::baseline(8192);
        let p = propose(&levers(), &best, &WorkloadTraits::default());
        assert!(p.configs.is_empty());
        assert_eq!(p.skipped.len(), 3, "{:?}", p.skipped);
        assert!(p.skipped[0].starts_with("speculative decoding: not tried"));
        assert!(p.skipped[1].contains("no recurrent layers"));
        assert!(p.skipped[2].contains("overlap"));
    }

    #[test]
    fn a_real_diverging_concurrent_session_on_a_hybrid_model_tries_the_levers_a_replay_shows() {
        let best = LaunchConfig::baseline(8192);
        let traits = WorkloadTraits {
            real_text: true,
            max_overlap: 3,
            diverges: true,
            recurrent: true,
            chat_checkpoints: false,
            synthetic: false,
            spec_cannot_pay: None,
            mtp_unavailable: None,
        };
        let p = propose(&levers(), &best, &traits);
        // Checkpoints are said, not tried: without the chat's message delimiters a replay
        // cannot show them.
        assert_eq!(p.skipped, vec![checkpoints_not_replayed()]);
        let args: Vec<String> = p
            .configs
            .iter()
            .map(|c| c.server_args().join(" "))
            .collect();
        assert_eq!(args.len(), 3, "{args:?}");
        assert!(args[0].ends_with("--spec-type ngram-mod"));
        assert!(args[1].contains("-np 2") && args[1].ends_with("-kvu"));
        assert!(args[2].contains("-np 4"));
        // Issue 52: the slots lever was labelled `-kvu`; its label carries all its flags.
        let slots = p.configs[1].label();
        assert!(
            slots.contains("-np 2") && slots.ends_with("-kvu"),
            "{slots}"
        );
        assert!(
            !p.configs[0].label().contains("-np"),
            "{}",
            p.configs[0].label()
        );
        // Every variant keeps the rest of the best config.
        assert!(p.configs.iter().all(|c| c.ctx == 8192));
    }

    fn trace(requests: &[(f64, f64, Vec<u32>)]) -> crate::traffic::trace::Trace {
        let header = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"2026-11-26T00:00:00Z","upstream":"http://127.0.0.1:1/","server":{},"model":{},"tokenizer_sha256":null}"#;
        let mut text = format!("{header}\n");
        for (i, (a, e, p)) in requests.iter().enumerate() {
            text.push_str(&format!(
                r#"{{"type":"request","id":{},"endpoint":"/completion","stream":false,"arrived_ms":{a},"first_byte_ms":null,"ended_ms":{e},"overlapped":[],"status":200,"outcome":"ok","prompt_tokens":{p:?},"n_generated":4,"max_tokens":4,"timings":null}}"#,
                i + 1
            ));
            text.push('\n');
        }
        crate::traffic::trace::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn a_trace_shows_its_overlap_and_its_divergences() {
        let long: Vec<u32> = (0..1000).collect();
        let mut edited = long[..500].to_vec();
        edited.extend(5000..5100);
        let mut extended = long.clone();
        extended.extend(7000..7010);
        // One after the other, each extending the last: no overlap, no divergence.
        let t = trace(&[(0.0, 10.0, long.clone()), (20.0, 30.0, extended.clone())]);
        let w = WorkloadTraits::of_trace(&t, true);
        assert_eq!((w.max_overlap, w.diverges, w.real_text), (1, false, true));
        // History edited half-way, and two requests in flight at once.
        let t = trace(&[
            (0.0, 10.0, long.clone()),
            (20.0, 40.0, edited),
            (25.0, 30.0, (9000..9050).collect()),
        ]);
        let w = WorkloadTraits::of_trace(&t, true);
        assert_eq!((w.max_overlap, w.diverges), (2, true));
    }

    #[test]
    fn a_chat_replayed_with_its_delimiters_tries_closer_checkpoints() {
        let best = LaunchConfig::baseline(8192);
        let traits = WorkloadTraits {
            real_text: true,
            diverges: true,
            recurrent: true,
            chat_checkpoints: true,
            ..Default::default()
        };
        let p = propose(&levers(), &best, &traits);
        assert!(p
            .configs
            .iter()
            .any(|c| c.checkpoint_min_step == Some(1024)));
    }

    #[test]
    fn speculation_predicted_not_to_pay_is_not_tried_and_says_so_in_one_line() {
        let best = LaunchConfig::baseline(8192);
        let f = SpecForecast {
            drafted: 31,
            accepted: 0,
            gen_ratio_milli: 1006,
        };
        let traits = WorkloadTraits {
            real_text: true,
            spec_cannot_pay: Some(f),
            ..Default::default()
        };
        let mut lv = levers();
        lv.speculative = vec![SpecType::NgramMod, SpecType::NgramSimple];
        let p = propose(&lv, &best, &traits);
        let specs: Vec<_> = p.configs.iter().filter_map(|c| c.spec_type).collect();
        // ngram-mod is predicted; the others are not, and are still tried.
        assert_eq!(specs, vec![SpecType::NgramSimple], "{p:?}");
        assert_eq!(
            p.skipped[0],
            "speculative decoding (ngram-mod): not tried, predicted from the trace's answers \
             not to pay (0 % of 31 drafted tokens accepted, generation 1.01x the time)"
        );
        // Without a forecast it is tried.
        let traits = WorkloadTraits {
            spec_cannot_pay: None,
            ..traits
        };
        let p = propose(&lv, &best, &traits);
        assert!(p
            .configs
            .iter()
            .any(|c| c.spec_type == Some(SpecType::NgramMod)));
    }

    #[test]
    fn a_random_weight_model_never_tries_speculation_and_says_why_in_one_line() {
        let best = LaunchConfig::baseline(8192);
        let traits = WorkloadTraits {
            real_text: true,
            synthetic: true,
            ..Default::default()
        };
        let p = propose(&levers(), &best, &traits);
        assert!(p.configs.iter().all(|c| c.spec_type.is_none()), "{p:?}");
        assert_eq!(p.skipped[0], SYNTHETIC_NO_SPECULATION);
        assert!(!SYNTHETIC_NO_SPECULATION.contains('\n'));
    }

    #[test]
    fn mtp_is_tried_where_it_can_run_for_its_cost_on_random_weights_and_else_says_why() {
        let best = LaunchConfig::baseline(8192);
        let both = Levers {
            speculative: vec![SpecType::NgramMod, SpecType::DraftMtp],
            ..Default::default()
        };
        let mtp = |p: &LeverPlan| {
            p.configs
                .iter()
                .filter(|c| c.spec_type == Some(SpecType::DraftMtp))
                .count()
        };
        // A real model on filler text: MTP drafts the model's own predictions, n-grams do not.
        let p = propose(&both, &best, &WorkloadTraits::default());
        assert_eq!((mtp(&p), p.configs.len()), (1, 1), "{p:?}");
        assert!(p.skipped[0].starts_with("speculative decoding: not tried"));
        // Random weights: MTP is launched for its cost, said in one line; n-grams never.
        let synthetic = WorkloadTraits {
            real_text: true,
            synthetic: true,
            ..Default::default()
        };
        let p = propose(&both, &best, &synthetic);
        assert_eq!((mtp(&p), p.configs.len()), (1, 1), "{p:?}");
        assert_eq!(
            p.skipped,
            [SYNTHETIC_MTP_COST_ONLY, SYNTHETIC_NO_SPECULATION].map(String::from)
        );
        // The build or the file cannot: the one line says which, nothing launched.
        let why = "MTP: not tried, this GGUF has no MTP layer (qwen35moe.nextn_predict_layers = 0; a convert without --no-mtp keeps it)";
        let lacking = WorkloadTraits {
            real_text: true,
            mtp_unavailable: Some(why.to_string()),
            ..Default::default()
        };
        let p = propose(&both, &best, &lacking);
        assert_eq!(mtp(&p), 0);
        assert_eq!(p.configs.len(), 1);
        assert_eq!(p.skipped, [why.to_string()]);
    }

    #[test]
    fn checkpoints_need_a_divergence_on_a_hybrid_model() {
        let best = LaunchConfig::baseline(8192);
        let traits = WorkloadTraits {
            recurrent: true,
            ..Default::default()
        };
        let only = Levers {
            checkpoint_min_step: vec![512],
            ..Default::default()
        };
        let p = propose(&only, &best, &traits);
        assert!(p.configs.is_empty());
        assert!(p.skipped[0].contains("diverges"), "{:?}", p.skipped);
    }
}
