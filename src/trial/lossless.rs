//! Losslessness, checked (issue 54): greedy speculative decoding must not change a token. Every
//! replay is greedy (temperature 0, a fixed seed) and keeps the answer tokens of its first
//! [`CHECKED_REQUESTS`] requests that overlapped no other request in the recording
//! (`ReplayedRequest::answer`, the server's `return_tokens`). A launch of a config that may
//! change its answers ([`LaunchConfig::may_change_answers`]: speculative decoding, and
//! ik_llama.cpp's smart expert reduction, lossy by design) is compared with the same config
//! without that setting ([`LaunchConfig::answer_reference`]), request by request and token
//! by token. One that is lossy by design and could not be compared is never ranked either.
//!
//! The tolerance is a near-tie, and nothing else. Verifying drafts in batches computes the
//! same logits with other kernels and another summation order than decoding one token at a
//! time, so where the model's top two tokens are nearly level either may win, and from there
//! the two answers differ legitimately (SmolLM2-135M at `-c 4096` on the pinned CPU build:
//! request 8 differed at token 42, the reference's top two at 15.0 % and 12.5 %). So at each
//! request's first differing token the launch's own server is asked for that position's top
//! candidates ([`probe`]: the common prefix as the prompt and one token to predict, which
//! nothing is drafted for, so it is the model without speculation). The divergence is a
//! near-tie when the two answers' tokens are exactly those top two and their log-probabilities
//! are at most [`TIE_MARGIN_NATS`] apart; that request's later tokens are not compared, the
//! other requests still are. Anything else (a token outside the top two, a wider gap, an
//! answer that ended early, no probe) makes the launch [`OutcomeKind::Lossy`]: measured,
//! never ranked, and the message names the request and the token.
//!
//! Why 0.5 nats (the top two within a factor of 1.65 of each other): on SmolLM2-135M (Q4_1,
//! the pinned CPU build, -c 4096, 10 prompts) the same 480 positions evaluated once as a
//! prompt batch and once decoded token by token moved the gap between the top two by more
//! than 0.05 nats at 139 of them, 0.2 at 23, 0.5 at 2 (at most 0.70; median 0, 99th
//! percentile 0.38), and flipped the top token at gaps up to 0.25 nats (measured with
//! `n_probs`). 0.05 nats would call these numerics a fault; a wrong verification (a draft
//! accepted unchecked) puts a token outside the top two or far
//! below the first, which no margin of this size excuses.

use super::classify::{Failure, Verdict};
use super::replay_trace::ReplayTiming;
pub use super::replay_trace::{Candidate, TieProbe};
use super::workload::ServerSession;
use super::{Metrics, OutcomeKind, TrialOutcome};
use crate::config::{AnswerLever, LaunchConfig};
use serde::{Deserialize, Serialize};

pub use super::replay_trace::CHECKED_REQUESTS;

/// The widest gap, in nats of log-probability, between the model's top two tokens at which a
/// speculative answer may take the second: a near-tie (why this value: the module's comment).
pub const TIE_MARGIN_NATS: f64 = 0.5;

/// Candidates asked for at a probed position (`n_probs`).
const PROBE_CANDIDATES: u32 = 4;

/// Where two replays' answers first differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The recorded request's id.
    pub request: u64,
    /// The first token that differs, counted from 1.
    pub token: usize,
    /// The token ids there: the reference's and the speculative launch's (None where that
    /// answer had ended).
    pub reference: Option<u32>,
    pub speculative: Option<u32>,
}

/// What comparing a speculative replay's answers with the reference's found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// Token for token the same on `requests` answers, `tokens` tokens in all.
    Same { requests: u32, tokens: u64 },
    /// The same but where an answer took the second of two nearly level tokens (the first
    /// such, `margin_nats` apart), after which that answer was not compared; `tokens` counts
    /// the tokens found the same.
    NearTie {
        tie: Divergence,
        margin_nats: f64,
        requests: u32,
        tokens: u64,
    },
    /// Lossy: the first divergence that is no near-tie.
    Differs(Divergence),
}

/// The margin (nats) where `top`'s first two are exactly `reference` and `speculative` (either
/// order) and at most [`TIE_MARGIN_NATS`] apart: a near-tie. None for anything else.
pub fn near_tie(top: &[Candidate], reference: u32, speculative: u32) -> Option<f64> {
    let [a, b] = top.get(..2)? else {
        return None;
    };
    let pair = (a.id, b.id) == (reference, speculative) || (a.id, b.id) == (speculative, reference);
    let margin = (a.logprob - b.logprob).abs();
    (pair && reference != speculative && margin <= TIE_MARGIN_NATS).then_some(margin)
}

/// Where answer `mine` first leaves `theirs` (request `id`); None where they are the same.
fn divergence(id: u64, mine: &[u32], theirs: &[u32]) -> Option<Divergence> {
    let n = mine.len().max(theirs.len());
    let k = (0..n).find(|&k| mine.get(k) != theirs.get(k))?;
    Some(Divergence {
        request: id,
        token: k + 1,
        reference: theirs.get(k).copied(),
        speculative: mine.get(k).copied(),
    })
}

/// The near-tie margin of `d` by the probe at its position in `probes`, if there is one.
fn tie_margin(probes: &[TieProbe], d: &Divergence) -> Option<f64> {
    let p = probes
        .iter()
        .find(|p| p.request == d.request && p.token == d.token)?;
    near_tie(&p.top, d.reference?, d.speculative?)
}

/// The request pairs both replays kept answers for: (id, speculative's, reference's).
fn answer_pairs<'a>(
    speculative: &'a ReplayTiming,
    reference: &'a ReplayTiming,
) -> impl Iterator<Item = (u64, &'a [u32], &'a [u32])> {
    speculative.requests.iter().filter_map(move |q| {
        let mine = q.answer.as_deref()?;
        let theirs = reference
            .requests
            .iter()
            .find(|r| r.id == q.id)
            .and_then(|r| r.answer.as_deref())?;
        Some((q.id, mine, theirs))
    })
}

/// Compare the answers both replays kept, by request id, with the speculative replay's own
/// probes; None where they share none.
pub fn compare(speculative: &ReplayTiming, reference: &ReplayTiming) -> Option<Check> {
    compare_with(speculative, reference, &speculative.probes)
}

/// [`compare`] with `probes` (the same config's other launches probe the same divergences:
/// greedy answers repeat).
pub fn compare_with(
    speculative: &ReplayTiming,
    reference: &ReplayTiming,
    probes: &[TieProbe],
) -> Option<Check> {
    let (mut requests, mut tokens) = (0u32, 0u64);
    let mut tie: Option<(Divergence, f64)> = None;
    for (id, mine, theirs) in answer_pairs(speculative, reference) {
        requests += 1;
        let Some(d) = divergence(id, mine, theirs) else {
            tokens += mine.len() as u64;
            continue;
        };
        let Some(margin) = tie_margin(probes, &d) else {
            return Some(Check::Differs(d));
        };
        tokens += (d.token - 1) as u64;
        tie.get_or_insert((d, margin));
    }
    (requests > 0).then_some(match tie {
        Some((tie, margin_nats)) => Check::NearTie {
            tie,
            margin_nats,
            requests,
            tokens,
        },
        None => Check::Same { requests, tokens },
    })
}

/// Ask this launch's server for the model's top candidates at each request's first token
/// where `mine` (its replay) left `reference`'s answers: the trace's prompt and the common
/// prefix as the prompt, one token to predict (nothing drafted), uncached. A probe the server
/// does not answer readably is left out, and its divergence then counts as lossy.
pub async fn probe(
    session: &mut ServerSession<'_>,
    trace: &crate::traffic::trace::Trace,
    mine: &ReplayTiming,
    reference: &ReplayTiming,
) -> Vec<TieProbe> {
    let mut out = Vec::new();
    let wanted: Vec<Divergence> = answer_pairs(mine, reference)
        .filter_map(|(id, m, t)| divergence(id, m, t))
        .filter(|d| d.reference.is_some() && d.speculative.is_some())
        .collect();
    for d in wanted {
        let Some(prompt) = trace
            .requests
            .iter()
            .find(|r| r.id == d.request)
            .and_then(|r| r.prompt_tokens.as_ref())
        else {
            continue;
        };
        let Some(answer) = reference
            .requests
            .iter()
            .find(|r| r.id == d.request)
            .and_then(|r| r.answer.as_ref())
        else {
            continue;
        };
        let mut ids = prompt.clone();
        ids.extend_from_slice(&answer[..d.token - 1]);
        match top_candidates(session, &ids).await {
            Ok(top) => out.push(TieProbe {
                request: d.request,
                token: d.token,
                top,
            }),
            Err(e) => tracing::debug!("probing request {} at token {}: {e}", d.request, d.token),
        }
    }
    out
}

/// The model's top [`PROBE_CANDIDATES`] for the token after `ids`.
async fn top_candidates(
    session: &mut ServerSession<'_>,
    ids: &[u32],
) -> Result<Vec<Candidate>, Failure> {
    let body = serde_json::json!({
        "prompt": ids,
        "n_predict": 1,
        "n_probs": PROBE_CANDIDATES,
        "cache_prompt": false,
        "seed": 42,
        "temperature": 0,
        "stream": false,
    });
    let timeout = session.timeout_for(ids.len(), 1);
    let text = session.post_json("/completion", body, timeout).await?;
    parse_top(&text)
}

/// `completion_probabilities[0].top_logprobs` of a `/completion` answer (the pinned server's
/// `probs_vector_to_json`): `[{"id": 42, "token": "x", "bytes": [...], "logprob": -0.1}]`.
fn parse_top(text: &str) -> Result<Vec<Candidate>, Failure> {
    let bad = |why: &str| Failure::BadResponse(format!("/completion with n_probs: {why}"));
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
    let top = v["completion_probabilities"][0]["top_logprobs"]
        .as_array()
        .ok_or_else(|| bad("no completion_probabilities[0].top_logprobs"))?;
    let top: Vec<Candidate> = top
        .iter()
        .map(|c| {
            Some(Candidate {
                id: u32::try_from(c["id"].as_u64()?).ok()?,
                logprob: c["logprob"]
                    .as_f64()
                    .filter(|l| l.is_finite() && *l <= 0.0)?,
            })
        })
        .collect::<Option<_>>()
        .ok_or_else(|| bad("a candidate without a readable id and log-probability"))?;
    if top.len() < 2 || top.windows(2).any(|w| w[0].logprob < w[1].logprob) {
        return Err(bad("fewer than two candidates, or not most likely first"));
    }
    Ok(top)
}

/// The config `c` without what may change its answers: the reference they must equal.
pub fn reference_of(c: &LaunchConfig) -> LaunchConfig {
    c.answer_reference()
}

/// The first ok launch in `history` of `config`'s reference whose replay kept answers.
pub fn reference_replay<'a>(
    config: &LaunchConfig,
    history: &'a [TrialOutcome],
) -> Option<&'a ReplayTiming> {
    let want = reference_of(config);
    history
        .iter()
        .filter(|o| o.config == want && o.kind.is_ok())
        .filter_map(|o| o.metrics.as_ref()?.replay.as_ref())
        .find(|r| r.requests.iter().any(|q| q.answer.is_some()))
}

/// Each config that keeps the model's answers in `history` with its first ok replay that kept answers
/// (what [`reference_replay`] finds for it): the references a runner probes against, as the
/// launches of a tune resumed from its journal left them.
pub fn references(history: &[TrialOutcome]) -> Vec<(LaunchConfig, ReplayTiming)> {
    let mut out: Vec<(LaunchConfig, ReplayTiming)> = Vec::new();
    for o in history.iter().filter(|o| !o.config.may_change_answers()) {
        if out.iter().any(|(c, _)| *c == o.config) {
            continue;
        }
        if let Some(r) = reference_replay(&o.config, history) {
            out.push((o.config.clone(), r.clone()));
        }
    }
    out
}

/// The check of a launch's metrics against its reference in `history`, with the probes of
/// every launch of the config there; None for a config that keeps the model's answers by
/// construction, or where nothing could be compared.
pub fn check(config: &LaunchConfig, m: &Metrics, history: &[TrialOutcome]) -> Option<Check> {
    if !config.may_change_answers() {
        return None;
    }
    let mine = m.replay.as_ref()?;
    let mut probes = mine.probes.clone();
    probes.extend(
        history
            .iter()
            .filter(|o| &o.config == config)
            .filter_map(|o| o.metrics.as_ref()?.replay.as_ref())
            .flat_map(|r| r.probes.iter().cloned()),
    );
    compare_with(mine, reference_replay(config, history)?, &probes)
}

/// "request 3's answer differs at token 57 (id 1234 without speculation, 987 with it)".
pub fn divergence_phrase(d: &Divergence) -> String {
    divergence_phrase_of(d, "speculation")
}

/// [`divergence_phrase`] naming what the launch had (`lever`: "expert reduction").
fn divergence_phrase_of(d: &Divergence, lever: &str) -> String {
    let id = |t: Option<u32>| t.map_or("its end".to_string(), |t| format!("id {t}"));
    format!(
        "request {}'s answer differs at token {} ({} without {lever}, {} with it)",
        d.request,
        d.token,
        id(d.reference),
        id(d.speculative)
    )
}

/// The [`OutcomeKind::Lossy`] verdict for a launch whose greedy answers differ from the same
/// config's without what may change them ([`LaunchConfig::answer_lever`]), and for every
/// launch of a lever lossy by design (smart expert reduction), whatever its check found;
/// None for any other.
pub fn lossy(config: &LaunchConfig, m: &Metrics, history: &[TrialOutcome]) -> Option<Verdict> {
    let lever = config.answer_lever()?;
    let message = match (check(config, m, history), lever) {
        (Some(Check::Differs(d)), AnswerLever::Speculation(spec)) => format!(
            "{}: {} at temperature 0, so it is not recommended (greedy speculation must not change a token)",
            spec.as_str(),
            divergence_phrase(&d)
        ),
        (Some(Check::Differs(d)), _) => format!(
            "lossy: {}: {} at temperature 0, so it is not recommended",
            lever.name(),
            divergence_phrase_of(&d, lever.noun())
        ),
        (None, _) if lever.lossy_by_design() => format!(
            "lossy: {}: its answers could not be compared with the same config's without it, so it is not recommended",
            lever.name()
        ),
        // Answers that matched do not make a lever that drops experts lossless: they matched on
        // these few requests, or the server did not apply it (ik_llama.cpp 0.1.5 parses -ser
        // and leaves it out of its expert selection). Named, measured, never recommended.
        (Some(c), _) if lever.lossy_by_design() => format!(
            "lossy: {}: {}, yet it drops experts by design, so it is not recommended",
            lever.name(),
            check_phrase(&c)
        ),
        _ => return None,
    };
    Some(Verdict {
        kind: OutcomeKind::Lossy,
        message,
        evidence: Vec::new(),
    })
}

/// `outcome` reclassified [`OutcomeKind::Lossy`] where it is an ok speculative launch whose
/// answers differ from its reference's in `history` (the search calls it on every launch, a
/// journaled one replayed on resume included, so the classification is the same both times).
pub fn classify(mut outcome: TrialOutcome, history: &[TrialOutcome]) -> TrialOutcome {
    if outcome.kind.is_ok() {
        if let Some(v) = outcome
            .metrics
            .as_ref()
            .and_then(|m| lossy(&outcome.config, m, history))
        {
            outcome.kind = v.kind;
            outcome.message = v.message;
        }
    }
    outcome
}

/// "answers identical to the same config's without it (4 requests, 1,024 tokens, temperature
/// 0)", or where they first differ.
pub fn check_phrase(c: &Check) -> String {
    check_phrase_against(c, "the same config's without it")
}

/// [`check_phrase`] of a launch with `lever`: a difference is named as lossy, not as a fault
/// of speculation, where the lever is lossy by design.
pub fn check_phrase_of(c: &Check, lever: AnswerLever) -> String {
    match c {
        Check::Differs(d) if lever.lossy_by_design() => {
            format!("lossy: {}", divergence_phrase_of(d, lever.noun()))
        }
        _ => check_phrase(c),
    }
}

/// [`check_phrase`] naming the reference's answers (`"A's"`).
pub fn check_phrase_against(c: &Check, reference: &str) -> String {
    match c {
        Check::Same { requests, tokens } => format!(
            "answers identical to {reference} ({}, {} tokens, temperature 0)",
            crate::util::count(u64::from(*requests), "request", "requests"),
            crate::util::fmt_thousands(*tokens as f64)
        ),
        Check::NearTie {
            tie,
            margin_nats,
            requests,
            tokens,
        } => format!(
            "answers differ from {reference} only at a near-tie (request {}, token {}, margin \
             {margin_nats:.2} nats; {}, {} tokens alike, temperature 0)",
            tie.request,
            tie.token,
            crate::util::count(u64::from(*requests), "request", "requests"),
            crate::util::fmt_thousands(*tokens as f64)
        ),
        Check::Differs(d) => format!("not lossless: {}", divergence_phrase(d)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::replay_trace::ReplayedRequest;

    fn replay(answers: &[(u64, Option<Vec<u32>>)]) -> ReplayTiming {
        ReplayTiming {
            workload: "w".into(),
            in_trace: answers.len() as u32,
            requests: answers
                .iter()
                .map(|(id, a)| ReplayedRequest {
                    id: *id,
                    prompt_tokens: 8,
                    cache_n: 0,
                    prompt_n: 8,
                    generated: a.as_ref().map_or(4, |a| a.len() as u32),
                    prompt_ms: 1.0,
                    predicted_ms: 1.0,
                    in_flight: 0,
                    request_s: 0.1,
                    draft_n: None,
                    draft_n_accepted: None,
                    answer: a.clone(),
                })
                .collect(),
            mean_s: 0.1,
            p90_s: 0.1,
            wall_s: 0.4,
            aggregate_tps: None,
            acceptance: None,
            probes: Vec::new(),
        }
    }

    #[test]
    fn the_first_differing_token_is_named_by_request_and_position() {
        let reference = replay(&[(1, Some(vec![5, 6, 7])), (2, Some(vec![1, 2, 3, 4]))]);
        let same = replay(&[(1, Some(vec![5, 6, 7])), (2, Some(vec![1, 2, 3, 4]))]);
        assert_eq!(
            compare(&same, &reference),
            Some(Check::Same {
                requests: 2,
                tokens: 7
            })
        );
        let differs = replay(&[(1, Some(vec![5, 6, 7])), (2, Some(vec![1, 2, 9, 4]))]);
        let c = compare(&differs, &reference).unwrap();
        assert_eq!(
            c,
            Check::Differs(Divergence {
                request: 2,
                token: 3,
                reference: Some(3),
                speculative: Some(9)
            })
        );
        assert_eq!(
            check_phrase(&c),
            "not lossless: request 2's answer differs at token 3 (id 3 without speculation, id 9 with it)"
        );
        // A shorter answer differs where it ends.
        let short = replay(&[(1, Some(vec![5, 6]))]);
        let Some(Check::Differs(d)) = compare(&short, &reference) else {
            panic!("a shorter answer is not the same");
        };
        assert_eq!((d.token, d.speculative), (3, None));
        // Nothing kept on one side: nothing compared.
        assert_eq!(compare(&replay(&[(1, None)]), &reference), None);
        assert_eq!(compare(&replay(&[(9, Some(vec![1]))]), &reference), None);
    }

    fn top(c: &[(u32, f64)]) -> Vec<Candidate> {
        c.iter()
            .map(|&(id, logprob)| Candidate { id, logprob })
            .collect()
    }

    #[test]
    fn a_near_tie_is_the_top_two_within_the_margin_and_nothing_else() {
        let lp = |p: f64| p.ln();
        // SmolLM2's case: the reference's top two at 15.0 % and 12.5 % (0.18 nats apart).
        let m = near_tie(&top(&[(3, lp(0.150)), (9, lp(0.125)), (4, lp(0.05))]), 3, 9).unwrap();
        assert!((m - (0.150f64 / 0.125).ln()).abs() < 1e-12);
        // Either order: the probe's own numerics may rank them the other way.
        assert!(near_tie(&top(&[(9, lp(0.150)), (3, lp(0.125))]), 3, 9).is_some());
        // Too far apart: e^0.5 is 1.65, and 2.0 is beyond it.
        assert_eq!(near_tie(&top(&[(3, lp(0.40)), (9, lp(0.20))]), 3, 9), None);
        // The speculative token third, or not listed: no tie however close.
        assert_eq!(
            near_tie(&top(&[(3, lp(0.2)), (4, lp(0.19)), (9, lp(0.18))]), 3, 9),
            None
        );
        assert_eq!(near_tie(&top(&[(3, lp(0.2)), (4, lp(0.19))]), 3, 9), None);
        assert_eq!(near_tie(&top(&[(3, lp(0.2))]), 3, 9), None);
        assert_eq!(near_tie(&[], 3, 9), None);
    }

    #[test]
    fn identical_near_tie_and_lossy_are_told_apart() {
        let reference = replay(&[(1, Some(vec![5, 6, 7])), (2, Some(vec![1, 2, 3, 4]))]);
        let mut mine = replay(&[(1, Some(vec![5, 6, 7])), (2, Some(vec![1, 2, 9, 8]))]);
        // Without a probe the divergence is lossy.
        assert!(matches!(
            compare(&mine, &reference),
            Some(Check::Differs(_))
        ));
        // Probed: 3 and 9 level within 0.1 nats is a near-tie; the other requests count.
        mine.probes = vec![TieProbe {
            request: 2,
            token: 3,
            top: top(&[(3, -1.0), (9, -1.1), (8, -3.0)]),
        }];
        let c = compare(&mine, &reference).unwrap();
        let Check::NearTie {
            tie,
            margin_nats,
            requests,
            tokens,
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!((tie.request, tie.token, requests, tokens), (2, 3, 2, 5));
        assert!((margin_nats - 0.1).abs() < 1e-9);
        assert_eq!(
            check_phrase(&c),
            "answers differ from the same config's without it only at a near-tie (request 2, \
             token 3, margin 0.10 nats; 2 requests, 5 tokens alike, temperature 0)"
        );
        // A probe elsewhere, or a clear gap, leaves it lossy.
        let mut far = mine.clone();
        far.probes[0].top = top(&[(3, -0.1), (9, -2.5)]);
        assert!(matches!(compare(&far, &reference), Some(Check::Differs(_))));
        let mut elsewhere = mine.clone();
        elsewhere.probes[0].token = 4;
        assert!(matches!(
            compare(&elsewhere, &reference),
            Some(Check::Differs(_))
        ));
        // A near-tie in one request does not excuse a clear divergence in another.
        let mut both = replay(&[(1, Some(vec![5, 0, 7])), (2, Some(vec![1, 2, 9, 8]))]);
        both.probes = mine.probes.clone();
        let Some(Check::Differs(d)) = compare(&both, &reference) else {
            panic!("request 1 differs without a tie")
        };
        assert_eq!((d.request, d.token), (1, 2));
        // Another launch's probe of the same divergence counts (compare_with).
        let unprobed = replay(&[(1, Some(vec![5, 6, 7])), (2, Some(vec![1, 2, 9, 8]))]);
        assert!(matches!(
            compare_with(&unprobed, &reference, &mine.probes),
            Some(Check::NearTie { .. })
        ));
    }

    /// A launch lossy by design (ik_llama.cpp's smart expert reduction) is checked like a
    /// speculative one: `lossy` where its answers differ, named so; also where nothing kept
    /// answers to compare with; not where they are the same. A plain config is never checked.
    #[test]
    fn expert_reduction_is_checked_and_lossy_where_its_answers_differ() {
        use crate::trial::{TrialOutcome, TrialRole};
        let plain = LaunchConfig::baseline(2048);
        let ser = LaunchConfig {
            engine_opts: crate::config::EngineOpts {
                expert_reduction: Some(6),
                ..Default::default()
            },
            ..plain.clone()
        };
        let metrics = |r: ReplayTiming| {
            let stat = super::super::Stat::from_samples(&[1.0]).unwrap();
            Metrics {
                gen_tps: stat.clone(),
                prompt_tps: stat.clone(),
                ttft_ms: stat,
                gen_tps_at_depth: None,
                shapes: Vec::new(),
                request_s: Some(0.1),
                replay: Some(r),
                drafts: None,
            }
        };
        let launch = |c: &LaunchConfig, r: ReplayTiming| TrialOutcome {
            kind: OutcomeKind::Ok,
            metrics: Some(metrics(r)),
            ..TrialOutcome::skipped(c, TrialRole::Search, "ok".into())
        };
        let history = vec![launch(&plain, replay(&[(1, Some(vec![5, 6, 7]))]))];
        let differs = metrics(replay(&[(1, Some(vec![5, 9, 7]))]));
        let v = lossy(&ser, &differs, &history).expect("its answers differ");
        assert_eq!(v.kind, OutcomeKind::Lossy);
        assert_eq!(
            v.message,
            "lossy: smart expert reduction to 6 experts: request 1's answer differs at token 2 \
             (id 6 without expert reduction, id 9 with it) at temperature 0, so it is not \
             recommended"
        );
        // Answers that matched (a server that did not apply it, or too few requests to show
        // it) do not make it lossless: still lossy, saying what the check found.
        let same = metrics(replay(&[(1, Some(vec![5, 6, 7]))]));
        let v = lossy(&ser, &same, &history).expect("lossy by design");
        assert_eq!(v.kind, OutcomeKind::Lossy);
        assert!(
            v.message
                .contains("answers identical to the same config's without it")
                && v.message.contains("yet it drops experts by design"),
            "{}",
            v.message
        );
        // Nothing to compare with: not ranked either (speculation is, its answers the model's).
        let v = lossy(&ser, &same, &[]).expect("unchecked");
        assert!(v.message.contains("could not be compared"), "{}", v.message);
        let spec = LaunchConfig {
            spec_type: Some(crate::config::SpecType::NgramMod),
            ..plain.clone()
        };
        assert!(lossy(&spec, &same, &[]).is_none());
        assert!(lossy(&plain, &differs, &history).is_none());
        // The references a resumed runner probes against are the plain configs only.
        let mut both = history.clone();
        both.push(launch(&ser, replay(&[(1, Some(vec![5, 9, 7]))])));
        let refs = references(&both);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].0, plain);
    }

    #[test]
    fn top_candidates_read_the_pinned_servers_answer() {
        // The shape of the pinned llama-server's reply to n_probs (probs_vector_to_json).
        let text = r#"{"content":" the","completion_probabilities":[{"id":279,"token":" the",
            "bytes":[32,116,104,101],"logprob":-1.2,"top_logprobs":[
            {"id":279,"token":" the","bytes":[32],"logprob":-1.2},
            {"id":264,"token":" a","bytes":[32],"logprob":-1.25}]}],"timings":{}}"#;
        let t = parse_top(text).unwrap();
        assert_eq!(t, top(&[(279, -1.2), (264, -1.25)]));
        for bad in [
            r#"{"content":"x"}"#,
            r#"{"completion_probabilities":[{"top_logprobs":[{"id":1,"logprob":-1.0}]}]}"#,
            r#"{"completion_probabilities":[{"top_logprobs":[{"id":1,"logprob":-2.0},
                {"id":2,"logprob":-1.0}]}]}"#,
            r#"{"completion_probabilities":[{"top_logprobs":[{"id":-1,"logprob":-1.0},
                {"id":2,"logprob":-1.0}]}]}"#,
            "not json",
        ] {
            assert!(parse_top(bad).is_err(), "{bad}");
        }
    }
}
