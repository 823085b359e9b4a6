//! Replaying a recorded trace against one launch (`--workload FILE.jsonl`, issue 41).
//!
//! Every replayed request is the recorded prompt's token ids, sent to llama-server's native
//! `/completion` with `cache_prompt: true` (so the prompt cache behaves as it did live),
//! `n_predict` = the recorded `n_generated` with `ignore_eos`, greedy. Overlap is kept and gaps
//! are compressed to nothing: requests start in arrival order, each as soon as every earlier
//! request it did not overlap in the recording has ended (requests that overlapped run at
//! once). A request's time is its wall clock, from sending it to the end of its answer
//! (queueing for a slot included: what the client feels); the objective is their mean, and
//! the 90th percentile is kept too, and the aggregate generation (all generated tokens over the
//! replay's wall clock: what parallel slots trade against the time per request).
//!
//! Greedy, whatever the client sent (a trace records its `temperature` and `top_p`): the
//! losslessness check ([`super::lossless`]) compares answers token for token, which only
//! greedy decoding makes repeatable, and every launch then generates the same tokens, so their
//! times compare like for like.
//!
//! It takes a [`Trace`] in memory ([`replay`]), so a trace built at run time replays the same
//! way as one read from a file. Nothing of the prompts is kept: only counts and times, and
//! the answer tokens of the few requests the losslessness check compares.

use super::classify::Failure;
use super::workload::{Measured, ServerSession};
use super::{Metrics, Stat};
use crate::engine::answer::CompletionResponse;
use crate::traffic::plan::ReplayPlan;
use crate::traffic::trace::{Request, Trace};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Requests of a replay whose answers are kept and compared: the first ones that overlapped
/// no other in the recording (a request batched with another's tokens may round differently
/// in any config, speculative or not). Four answers of a few hundred tokens each are enough to
/// meet a token the drafts got wrong, which is where verification decides; they are kept in
/// the journal, so more would grow it with every launch. The check is
/// [`super::lossless`].
pub const CHECKED_REQUESTS: usize = 4;

/// One replayed request: counts and times, never its tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayedRequest {
    /// The recorded request's id.
    pub id: u64,
    /// Prompt tokens sent.
    pub prompt_tokens: u32,
    /// Of these, reused from the server's prompt cache, and read (the server's timings).
    pub cache_n: u32,
    pub prompt_n: u32,
    /// Tokens generated.
    pub generated: u32,
    /// The server's own times: reading the prompt (time to first token) and generating.
    pub prompt_ms: f64,
    pub predicted_ms: f64,
    /// Requests of the replay in flight when it was sent (itself excluded).
    pub in_flight: u32,
    /// Wall clock from sending it to the end of its answer, seconds.
    pub request_s: f64,
    /// Speculative decoding (`--spec-type`): the tokens the server drafted for this request,
    /// and of these the ones it accepted (its `timings.draft_n`, `draft_n_accepted`). Absent
    /// where it drafted nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u32>,
    /// The answer's token ids, greedy, for the first [`CHECKED_REQUESTS`]
    /// requests that overlapped no other (the losslessness check compares them); absent on
    /// the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Vec<u32>>,
}

impl ReplayedRequest {
    /// Its generation speed as the server counts it (`predicted_per_second`): the tokens
    /// after the first over `predicted_ms`. The first token comes from the prompt's last
    /// batch, and llama-server times generation from there: one token generated reads
    /// `predicted_ms` 0.001 (its clamp to 1 us), which as one token over that time would be a
    /// million tokens a second. None with fewer than two tokens, or no time.
    pub fn gen_tps(&self) -> Option<f64> {
        (self.generated > 1 && self.predicted_ms > 0.0)
            .then(|| f64::from(self.generated - 1) / self.predicted_ms * 1000.0)
    }
}

/// What replaying a trace against one launch measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayTiming {
    /// The workload's name (the trace's file name).
    pub workload: String,
    /// Requests in the trace (of which `requests` were replayed: the plan's sampling).
    pub in_trace: u32,
    /// Each replayed request, in arrival order.
    pub requests: Vec<ReplayedRequest>,
    /// Mean and 90th percentile (nearest rank) of the requests' times, seconds.
    pub mean_s: f64,
    pub p90_s: f64,
    /// Wall clock of the whole replay, seconds.
    pub wall_s: f64,
    /// Aggregate generation: every replayed request's generated tokens over the replay's wall
    /// clock, tokens/s ([`aggregate_tps`]); what parallel slots raise while each request may
    /// slow. Absent in results written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_tps: Option<f64>,
    /// Speculative decoding's acceptance over the whole replay (the requests' drafted and
    /// accepted tokens summed); absent where the server drafted nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<super::acceptance::Acceptance>,
    /// A speculative launch's answers that left the reference's: the model's top candidates
    /// at each first differing token, asked of this launch's server after the timed replay
    /// ([`super::lossless::probe`]). Empty where nothing differed or nothing was compared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<TieProbe>,
}

/// One candidate for a token, as llama-server's `n_probs` lists it (`top_logprobs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: u32,
    /// Natural log of its probability (pre-sampling softmax).
    pub logprob: f64,
}

/// The model's top candidates at a request's first token where a speculative answer left
/// the reference's, most likely first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TieProbe {
    pub request: u64,
    /// Counted from 1, as [`Divergence::token`].
    pub token: usize,
    pub top: Vec<Candidate>,
}

impl ReplayTiming {
    /// Drafted and accepted tokens over its requests; None where the server drafted nothing.
    pub fn drafted(&self) -> Option<super::acceptance::Acceptance> {
        let counts = self
            .requests
            .iter()
            .map(|q| (q.draft_n, q.draft_n_accepted));
        self.acceptance
            .or_else(|| super::acceptance::Acceptance::of(counts))
    }
}

/// The aggregate generation of a replay: the requests' generated tokens over its wall clock
/// (None when no time passed).
pub fn aggregate_tps(requests: &[ReplayedRequest], wall_s: f64) -> Option<f64> {
    let generated: u64 = requests.iter().map(|q| u64::from(q.generated)).sum();
    (wall_s > 0.0 && wall_s.is_finite()).then(|| generated as f64 / wall_s)
}

/// The 90th percentile of `v` by nearest rank (the smallest value at or above 90 % of them).
pub fn p90(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((0.9 * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
}

/// The `tokenizer_sha256` of the launched server, as the recorder computes it.
pub async fn tokenizer_sha256(session: &mut ServerSession<'_>) -> Result<String, Failure> {
    let body = serde_json::json!({
        "content": crate::traffic::trace::TOKENIZER_PROBE,
        "add_special": true,
        "parse_special": true,
    });
    let timeout = session.timeout_for(0, 0);
    let text = session.post_json("/tokenize", body, timeout).await?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::BadResponse(format!("/tokenize returned unreadable JSON: {e}")))?;
    let ids = v["tokens"]
        .as_array()
        .ok_or_else(|| Failure::BadResponse("/tokenize returned no tokens".into()))?;
    Ok(crate::traffic::trace::tokenizer_sha256(ids))
}

/// The line that stops a tune whose trace another tokenizer recorded.
pub fn tokenizer_mismatch(name: &str, want: &str, got: &str) -> String {
    format!(
        "the trace {name} was recorded with another tokenizer (its tokenizer_sha256 {}…, this model's {}…): its token ids mean other text here; record the session again with this model, or tune the model it was recorded with",
        &want[..want.len().min(12)],
        &got[..got.len().min(12)]
    )
}

/// For each planned request (by index), the earlier planned requests it waits for: those it
/// did not overlap in the recording (they had ended before it arrived).
fn waits_for(reqs: &[&Request]) -> Vec<Vec<usize>> {
    reqs.iter()
        .enumerate()
        .map(|(i, r)| {
            (0..i)
                .filter(|&j| !r.overlapped.contains(&reqs[j].id))
                .collect()
        })
        .collect()
}

/// Replay `plan`'s requests of `trace` against the session's server (see the module's doc).
pub async fn replay(
    session: &mut ServerSession<'_>,
    trace: &Trace,
    plan: &ReplayPlan,
    name: &str,
) -> Result<ReplayTiming, Failure> {
    let reqs: Vec<&Request> = trace
        .requests
        .iter()
        .filter(|r| plan.ids.contains(&r.id))
        .collect();
    if reqs.is_empty() {
        return Err(Failure::BadResponse(
            "the trace has no request to replay (was it loaded?)".into(),
        ));
    }
    let waits = waits_for(&reqs);
    // A request's timeout covers the requests it overlapped too (it may queue behind them).
    let timeouts: Vec<Duration> = reqs
        .iter()
        .map(|r| {
            let with = reqs
                .iter()
                .copied()
                .filter(|o| r.overlapped.contains(&o.id));
            let (p, g) = std::iter::once(*r)
                .chain(with)
                .fold((0usize, 0u64), |(p, g), o| {
                    (
                        p + o.prompt_tokens.as_ref().map_or(0, Vec::len),
                        g + o.n_generated.unwrap_or(0),
                    )
                });
            session.timeout_for(p, u32::try_from(g).unwrap_or(u32::MAX))
        })
        .collect();
    let total: Duration = timeouts.iter().sum();
    let client = session.client.clone();
    let url = format!("{}/completion", session.base_url);
    let n = reqs.len();
    // A chat request goes with the message delimiters its server gave it live (where the
    // trace knows them): the server then keeps the same context checkpoints.
    let delimiters = trace.header.server.message_delimiters.clone();
    // The answers kept for the losslessness check: the first requests alone in the recording.
    let checked: Vec<u64> = reqs
        .iter()
        .filter(|r| r.overlapped.is_empty())
        .take(CHECKED_REQUESTS)
        .map(|r| r.id)
        .collect();
    let jobs: Vec<Job> = reqs
        .iter()
        .map(|r| Job {
            id: r.id,
            ids: r.prompt_tokens.clone().unwrap_or_default(),
            n_predict: u32::try_from(r.n_generated.unwrap_or(1)).unwrap_or(u32::MAX),
            delimiters: delimiters
                .clone()
                .filter(|_| crate::traffic::trace::is_chat_endpoint(&r.endpoint)),
            keep_answer: checked.contains(&r.id),
        })
        .collect();
    let started = Instant::now();
    let run = async move {
        let mut set: tokio::task::JoinSet<(usize, Result<ReplayedRequest, Failure>)> =
            tokio::task::JoinSet::new();
        let mut done = vec![false; n];
        let mut out: Vec<Option<ReplayedRequest>> = vec![None; n];
        let mut next = 0;
        let mut running = 0u32;
        loop {
            while next < n && waits[next].iter().all(|&j| done[j]) {
                let job = jobs[next].clone();
                let (client, url, timeout, i, in_flight) =
                    (client.clone(), url.clone(), timeouts[next], next, running);
                set.spawn(async move {
                    let r = tokio::time::timeout(timeout, one(&client, &url, &job, in_flight))
                        .await
                        .unwrap_or(Err(Failure::RequestTimeout {
                            secs: timeout.as_secs_f64(),
                            budget: false,
                        }));
                    (i, r)
                });
                running += 1;
                next += 1;
            }
            let Some(joined) = set.join_next().await else {
                break;
            };
            let (i, r) = joined.map_err(|e| Failure::Connection(format!("{e}")))?;
            running -= 1;
            done[i] = true;
            out[i] = Some(r?);
        }
        Ok(out.into_iter().flatten().collect::<Vec<ReplayedRequest>>())
    };
    let requests = session.watched(total, run).await?;
    let wall_s = started.elapsed().as_secs_f64();
    let times: Vec<f64> = requests.iter().map(|r| r.request_s).collect();
    Ok(ReplayTiming {
        workload: name.to_string(),
        in_trace: u32::try_from(plan.in_trace).unwrap_or(u32::MAX),
        mean_s: times.iter().sum::<f64>() / times.len().max(1) as f64,
        p90_s: p90(&times).unwrap_or(0.0),
        aggregate_tps: aggregate_tps(&requests, wall_s),
        acceptance: super::acceptance::Acceptance::of(
            requests.iter().map(|q| (q.draft_n, q.draft_n_accepted)),
        ),
        requests,
        wall_s,
        probes: Vec::new(),
    })
}

/// One request to replay.
#[derive(Clone)]
struct Job {
    id: u64,
    /// The prompt's token ids.
    ids: Vec<u32>,
    n_predict: u32,
    /// The chat's message delimiters, sent with a replayed chat request.
    delimiters: Option<serde_json::Value>,
    /// Ask for the answer's tokens and keep them (the losslessness check's requests).
    keep_answer: bool,
}

/// One replayed request, timed by the wall clock; checks the server generated every token.
async fn one(
    client: &reqwest::Client,
    url: &str,
    job: &Job,
    in_flight: u32,
) -> Result<ReplayedRequest, Failure> {
    let Job {
        id,
        ref ids,
        n_predict,
        ref delimiters,
        keep_answer,
    } = *job;
    let mut body = serde_json::json!({
        "prompt": ids,
        "n_predict": n_predict,
        "ignore_eos": true,
        "cache_prompt": true,
        "seed": 42,
        "temperature": 0,
        "stream": false,
    });
    if let Some(d) = delimiters {
        body["message_delimiters"] = d.clone();
    }
    if keep_answer {
        body["return_tokens"] = serde_json::Value::Bool(true);
    }
    let t0 = Instant::now();
    let resp = client
        .post(url)
        .json(&body)
        .send()
        .await
        .map_err(|e| Failure::Connection(format!("{e:#}")))?;
    let status = resp.status();
    let text = super::workload::bounded_body(resp, "/completion").await?;
    let request_s = t0.elapsed().as_secs_f64();
    if !status.is_success() {
        return Err(Failure::Http {
            status: status.as_u16(),
            body: text,
        });
    }
    let reply = serde_json::from_str::<CompletionResponse>(&text).map_err(|e| {
        Failure::BadResponse(format!("/completion returned no readable timings: {e}"))
    })?;
    // Read in the engine's answer dialect: ik_llama.cpp's timings have no `cache_n` (read
    // as 0 here once, every replayed request then "differed" from the recorded length).
    let (t, tokens) = reply.into_parts();
    // The answer's tokens where asked for; a server that sends none (or a bad list) leaves
    // the request unchecked.
    let answer = if keep_answer {
        tokens.filter(|a| a.len() as u64 == u64::from(n_predict))
    } else {
        None
    };
    if t.predicted_n != i64::from(n_predict) {
        return Err(Failure::BadResponse(format!(
            "it generated {} tokens instead of {n_predict} for replayed request {id} (context too small for the trace?)",
            t.predicted_n
        )));
    }
    if !(t.prompt_ms.is_finite() && t.predicted_ms.is_finite()) {
        return Err(Failure::BadResponse(
            "its timings are not finite numbers".into(),
        ));
    }
    let clamp = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
    Ok(ReplayedRequest {
        id,
        prompt_tokens: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        cache_n: clamp(t.cache_n),
        prompt_n: clamp(t.prompt_n),
        generated: clamp(t.predicted_n),
        prompt_ms: t.prompt_ms,
        predicted_ms: t.predicted_ms,
        in_flight,
        request_s,
        draft_n: t.draft_n.map(clamp),
        draft_n_accepted: t.draft_n_accepted.map(clamp),
        answer,
    })
}

/// Prompt tokens a request must read for its speed to count as a prompt-speed sample (one
/// read after a cache hit of all but a token times nothing but overhead).
const MIN_PROMPT_SAMPLE: u32 = 16;

/// The whole measurement of a launch whose workload is a trace: an optional warm-up (a short
/// prompt no trace prompt starts with, not cached), then the replay. The speeds of the
/// metrics are the replayed requests' own (generation of each; prompt of each that read at
/// least [`MIN_PROMPT_SAMPLE`] tokens, else of all); the objective is the replay's mean time.
pub async fn measure(
    session: &mut ServerSession<'_>,
    w: &crate::space::Workload,
    r: &crate::traffic::plan::ReplayWorkload,
) -> Result<Measured, Failure> {
    let Some(trace) = r.trace.clone() else {
        return Err(Failure::BadResponse(format!(
            "the trace {} is not loaded",
            r.name
        )));
    };
    if w.warmup {
        // Token ids 1..=8 reversed: no BOS-first prompt shares a token with it.
        let ids: Vec<u32> = (1..=8).rev().collect();
        session.complete(&ids, 1).await?;
    }
    let timing = replay(session, &trace, &r.plan, &r.name).await?;
    let mut warnings = Vec::new();
    let gen: Vec<f64> = timing
        .requests
        .iter()
        .filter_map(ReplayedRequest::gen_tps)
        .collect();
    let prompt_all: Vec<&ReplayedRequest> = timing
        .requests
        .iter()
        .filter(|q| q.prompt_ms > 0.0 && q.prompt_n > 0)
        .collect();
    let long: Vec<&&ReplayedRequest> = prompt_all
        .iter()
        .filter(|q| q.prompt_n >= MIN_PROMPT_SAMPLE)
        .collect();
    let pp: Vec<f64> = if long.is_empty() {
        prompt_all
            .iter()
            .map(|q| f64::from(q.prompt_n) / q.prompt_ms * 1000.0)
            .collect()
    } else {
        long.iter()
            .map(|q| f64::from(q.prompt_n) / q.prompt_ms * 1000.0)
            .collect()
    };
    let ttft: Vec<f64> = timing.requests.iter().map(|q| q.prompt_ms).collect();
    let stat = |v: &[f64], what: &str| {
        Stat::from_samples(v).ok_or_else(|| {
            Failure::BadResponse(format!("the replay measured no {what} (all timings zero)"))
        })
    };
    let mismatched: Vec<u64> = timing
        .requests
        .iter()
        .filter(|q| q.cache_n + q.prompt_n != q.prompt_tokens)
        .map(|q| q.id)
        .collect();
    if !mismatched.is_empty() {
        warnings.push(format!(
            "the server's prompt length differs from the recorded one for {} replayed request(s) (first: request {})",
            mismatched.len(),
            mismatched[0]
        ));
    }
    let metrics = Metrics {
        drafts: None,
        gen_tps: stat(&gen, "generation speed")?,
        prompt_tps: stat(&pp, "prompt speed")?,
        ttft_ms: stat(&ttft, "time to first token")?,
        gen_tps_at_depth: None,
        shapes: Vec::new(),
        request_s: Some(timing.mean_s),
        replay: Some(timing),
    };
    Ok(Measured { metrics, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_90th_percentile_is_the_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(p90(&v), Some(9.0));
        assert_eq!(p90(&[3.0]), Some(3.0));
        let v: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(p90(&v), Some(18.0));
        assert_eq!(p90(&[]), None);
    }

    #[test]
    fn requests_wait_only_for_those_they_did_not_overlap() {
        let t: crate::traffic::trace::Trace = crate::traffic::trace::parse(
            br#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"x","upstream":"u"}
{"type":"request","id":1,"endpoint":"/completion","stream":false,"arrived_ms":0,"first_byte_ms":null,"ended_ms":10,"overlapped":[],"status":200,"outcome":"ok","prompt_tokens":[1],"n_generated":1,"max_tokens":null,"timings":null}
{"type":"request","id":2,"endpoint":"/completion","stream":false,"arrived_ms":20,"first_byte_ms":null,"ended_ms":40,"overlapped":[3],"status":200,"outcome":"ok","prompt_tokens":[1],"n_generated":1,"max_tokens":null,"timings":null}
{"type":"request","id":3,"endpoint":"/completion","stream":false,"arrived_ms":25,"first_byte_ms":null,"ended_ms":50,"overlapped":[2],"status":200,"outcome":"ok","prompt_tokens":[1],"n_generated":1,"max_tokens":null,"timings":null}
{"type":"request","id":4,"endpoint":"/completion","stream":false,"arrived_ms":60,"first_byte_ms":null,"ended_ms":70,"overlapped":[],"status":200,"outcome":"ok","prompt_tokens":[1],"n_generated":1,"max_tokens":null,"timings":null}
"#,
        )
        .unwrap();
        let reqs: Vec<&Request> = t.requests.iter().collect();
        // 2 and 3 run at once after 1; 4 waits for all three.
        assert_eq!(
            waits_for(&reqs),
            vec![vec![], vec![0], vec![0], vec![0, 1, 2]]
        );
    }
}
