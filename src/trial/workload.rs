//! The measured workload of one trial, over llama-server's HTTP API: an optional warm-up, then
//! `repetitions` `/completion` requests with a prompt of exactly `prompt_tokens` token ids
//! (sent as an array of ids, so no tokenizer round trip can change its length), `n_predict =
//! gen_tokens` with `ignore_eos`, no prompt cache, greedy sampling; then, `repetitions` times,
//! every request of the workload's mixes, whole, with the prompt cache as a user's server
//! uses it ([`ServerSession::measure_shape`]). Speeds come from the server's own `timings`.

use super::classify::Failure;
use super::{Metrics, Stat};
use crate::space::Workload;
use serde::Deserialize;
use std::time::Duration;

/// Requests whose repeated speeds differ by more than this (percent) get a warning.
pub const SPREAD_LIMIT_PCT: f64 = 10.0;

/// Fixed, ordinary English text: tokenized once per trial, its ids cycled to any length.
const PROMPT_TEXT: &str =
    "The history of the lighthouse is a history of people who chose to keep a \
light burning for strangers. Before electric lamps, keepers trimmed wicks every few hours, \
polished brass and glass, and wrote the weather into log books that still survive in coastal \
archives. A keeper's family often lived in the tower itself, carrying oil up narrow spiral \
stairs and watching the horizon through long winter nights. Ships learned each light by its \
rhythm: one long flash, two short ones, a steady beam that turned every thirty seconds. When \
fog rolled in, bells and horns took over, and sailors counted the seconds between sounds to \
judge their distance from the rocks. Today most lighthouses run on their own, powered by \
small solar panels and checked by engineers who visit a few times a year, yet the old towers \
remain, painted in bold stripes so that they can be recognised by day as well as by night.";

use crate::engine::answer::CompletionResponse;
pub use crate::engine::answer::RequestTimings;

#[derive(Deserialize)]
struct TokenizeResponse {
    tokens: Vec<serde_json::Value>,
}

/// A measured workload: metrics and caveats.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub metrics: Metrics,
    pub warnings: Vec<String>,
}

/// `len` token ids cycled from `base`, starting at `offset`: each repetition gets a different
/// first token, so nothing can be reused from an earlier request.
pub fn prompt_ids(base: &[u32], len: usize, offset: usize) -> Vec<u32> {
    if base.is_empty() {
        return Vec::new();
    }
    (0..len).map(|i| base[(i + offset) % base.len()]).collect()
}

/// The rotation used for request `k` (0 = warm-up).
fn offset_for(k: usize, base_len: usize) -> usize {
    (k * 17) % base_len.max(1)
}

/// The context a workload needs (tokens): the longest request plus its generation.
pub fn needed_ctx(w: &Workload) -> u64 {
    // A replayed trace sends only its own requests (after a warm-up of a few tokens).
    if let Some(r) = &w.replay {
        return r.plan.longest_tokens;
    }
    let longest = w.prompt_tokens.max(w.context_depth.unwrap_or(0)) as u64;
    let shapes = crate::workloads::distinct_shapes(&w.mixes)
        .iter()
        .map(|s| s.tokens())
        .max()
        .unwrap_or(0);
    (longest + w.gen_tokens as u64).max(shapes)
}

/// The most tokens generated to measure one request of a shape: a request is measured whole
/// (its time to first token and every generated token) up to this, and a longer answer is
/// timed at the speed measured over its first `SHAPE_GEN_MAX` tokens. Whole requests, not
/// short samples: on the GPU machine a 64-token sample moved by 6-8 % between requests of one
/// launch, which no number of rounds makes small (docs/how-it-works.md, "Noise").
pub const SHAPE_GEN_MAX: u32 = 1024;

/// The longest a request waits once the tune's minutes budget has run out (or is about to):
/// long enough for any answering server, short enough that a hung one cannot overrun the
/// budget by more.
pub const AFTER_DEADLINE_WAIT: Duration = Duration::from_secs(30);

/// The order a launch measures the shapes in: fresh contexts first, longest first (each reads
/// the round's token stream and leaves it in the cache), then the held shapes, most held first
/// (the first finds its held tokens there when a document of exactly that length was read:
/// agent after long-doc; the others fill the cache first).
pub fn measuring_order(shapes: &[crate::workloads::Shape]) -> Vec<crate::workloads::Shape> {
    let mut order = shapes.to_vec();
    order.sort_by_key(|s| (s.held > 0, std::cmp::Reverse((s.held, s.new))));
    order
}

/// The most bytes qtune reads of one reply from the server: a `/completion` of
/// [`SHAPE_GEN_MAX`] tokens is a few kilobytes, so this is generous; a larger reply is a
/// failure of the trial, read no further (memory stays bounded whatever the server sends).
pub const MAX_REPLY_BYTES: usize = 16 << 20;

/// The body of `resp`, read chunk by chunk up to [`MAX_REPLY_BYTES`]; a larger one (declared
/// or sent) is a [`Failure::BadResponse`].
pub(super) async fn bounded_body(
    mut resp: reqwest::Response,
    path: &str,
) -> Result<String, Failure> {
    let too_large = || {
        Failure::BadResponse(format!(
            "its reply to {path} is larger than {} MiB, which no llama-server sends: qtune stopped reading it",
            MAX_REPLY_BYTES >> 20
        ))
    };
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_REPLY_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body: Vec<u8> = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Failure::Connection(format!("{e:#}")))?
    {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The speeds a request's timeout follows (tokens per second): the slowest measured so far
/// in this tune or comparison, else the speed model's pessimistic prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    pub gen_tps: f64,
    pub prompt_tps: f64,
}

impl Pace {
    /// How many times the time a request should take it may take: a config ten times slower
    /// than the slowest one measured is no contender, and a server that stops answering
    /// mid-request costs this, not the budget.
    pub const FACTOR: f64 = 10.0;
    /// The shortest timeout a paced request gets, whatever the speeds say.
    pub const FLOOR: Duration = Duration::from_secs(30);

    /// A pace from two speeds, when both are finite and positive.
    pub fn new(gen_tps: f64, prompt_tps: f64) -> Option<Pace> {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        (ok(gen_tps) && ok(prompt_tps)).then_some(Pace {
            gen_tps,
            prompt_tps,
        })
    }

    /// The slowest speeds a trial measured: every sample at depth 0, at depth and of every
    /// request of the mixes.
    pub fn of(m: &super::Metrics) -> Option<Pace> {
        let gen = m
            .gen_tps
            .samples
            .iter()
            .chain(m.gen_tps_at_depth.iter().flat_map(|s| &s.samples))
            .copied()
            .chain(m.shapes.iter().map(|s| s.gen_tps))
            .fold(f64::INFINITY, f64::min);
        let prompt = m
            .prompt_tps
            .samples
            .iter()
            .copied()
            .chain(m.shapes.iter().filter_map(|s| s.prompt_tps()))
            .fold(f64::INFINITY, f64::min);
        Pace::new(gen, prompt)
    }

    /// The slower of two paces, speed by speed.
    pub fn slower(self, other: Pace) -> Pace {
        Pace {
            gen_tps: self.gen_tps.min(other.gen_tps),
            prompt_tps: self.prompt_tps.min(other.prompt_tps),
        }
    }

    /// The timeout of a request that reads `prompt` tokens and generates `gen` at this pace:
    /// [`Self::FACTOR`] times the time it should take, at least [`Self::FLOOR`], at most `max`.
    pub fn timeout(&self, prompt: usize, gen: u32, max: Duration) -> Duration {
        let expected = crate::objective::request_seconds(
            prompt as f64 / self.prompt_tps,
            f64::from(gen),
            self.gen_tps,
        );
        let secs = (expected * Self::FACTOR).clamp(Self::FLOOR.as_secs_f64(), 1.0e7);
        Duration::from_secs_f64(secs).min(max)
    }
}

/// The HTTP side of a trial, bound to one server.
pub struct ServerSession<'a> {
    pub client: &'a reqwest::Client,
    pub base_url: String,
    /// The longest any request waits (the whole request, headers and body).
    pub request_timeout: Duration,
    /// When known, each request's timeout follows it ([`Pace::timeout`]) instead.
    pub pace: Option<Pace>,
    /// No request waits past this (the end of the tune's minutes budget).
    pub deadline: Option<std::time::Instant>,
    /// Says whether the server is gone (it exited, or it hangs in its abort); polled while a
    /// request is in flight.
    pub gone: &'a mut dyn FnMut() -> bool,
    /// Where each request is named as it starts (the tune's heartbeat reads it).
    pub doing: Option<&'a super::phase::PhaseCell>,
}

impl ServerSession<'_> {
    /// Run `fut` while watching the process; a dead server ends the wait at once.
    pub(super) async fn watched<T>(
        &mut self,
        mut timeout: Duration,
        fut: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        // Whether the budget's end, not the request's own timeout, sets the wait.
        let mut budget = false;
        if let Some(d) = self.deadline {
            let now = std::time::Instant::now();
            let cap = d.saturating_duration_since(now).max(AFTER_DEADLINE_WAIT);
            if cap < timeout {
                timeout = cap;
                budget = true;
            }
        }
        let gone = &mut *self.gone;
        let watch = async move {
            loop {
                if gone() || super::cleanup::interrupted().is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            r = tokio::time::timeout(timeout, fut) => match r {
                Ok(r) => r,
                Err(_) => Err(Failure::RequestTimeout {
                    secs: timeout.as_secs_f64(),
                    budget,
                }),
            },
            _ = watch => Err(Failure::Exited),
        }
    }

    /// The timeout of a request reading `prompt` tokens and generating `gen`: paced when a
    /// pace is known, else the session's fixed one. It covers the whole request, so a server
    /// that drips its reply a byte at a time is cut off at the same moment.
    pub(super) fn timeout_for(&self, prompt: usize, gen: u32) -> Duration {
        match self.pace {
            Some(p) => p.timeout(prompt, gen, self.request_timeout),
            None => self.request_timeout,
        }
    }

    pub(super) async fn post_json(
        &mut self,
        path: &str,
        body: serde_json::Value,
        timeout: Duration,
    ) -> Result<String, Failure> {
        let url = format!("{}{}", self.base_url, path);
        let client = self.client;
        self.watched(timeout, async move {
            let resp = client
                .post(&url)
                .json(&body)
                .send()
                .await
                .map_err(|e| Failure::Connection(format!("{e:#}")))?;
            let status = resp.status();
            let text = bounded_body(resp, path).await?;
            if !status.is_success() {
                return Err(Failure::Http {
                    status: status.as_u16(),
                    body: text,
                });
            }
            Ok(text)
        })
        .await
    }

    /// Token ids of the fixed prompt text, as this model tokenizes it.
    pub async fn base_tokens(&mut self) -> Result<Vec<u32>, Failure> {
        let body = serde_json::json!({ "content": PROMPT_TEXT, "add_special": false });
        let timeout = self.timeout_for(0, 0);
        let text = self.post_json("/tokenize", body, timeout).await?;
        let r: TokenizeResponse = serde_json::from_str(&text).map_err(|e| {
            Failure::BadResponse(format!("/tokenize returned unreadable JSON: {e}"))
        })?;
        let ids: Vec<u32> = r
            .tokens
            .iter()
            .filter_map(|v| v.as_u64().map(|n| n as u32))
            .collect();
        if ids.is_empty() {
            return Err(Failure::BadResponse(
                "/tokenize returned no tokens for the prompt text".into(),
            ));
        }
        Ok(ids)
    }

    /// One `/completion` with these prompt ids; checks the server generated every token.
    pub async fn complete(
        &mut self,
        ids: &[u32],
        n_predict: u32,
    ) -> Result<RequestTimings, Failure> {
        self.complete_cached(ids, n_predict, false).await
    }

    /// One `/completion`, reusing the server's prompt cache when `cache_prompt`.
    async fn complete_cached(
        &mut self,
        ids: &[u32],
        n_predict: u32,
        cache_prompt: bool,
    ) -> Result<RequestTimings, Failure> {
        let body = serde_json::json!({
            "prompt": ids,
            "n_predict": n_predict,
            "ignore_eos": true,
            "cache_prompt": cache_prompt,
            "seed": 42,
            "temperature": 0,
            "stream": false,
        });
        let timeout = self.timeout_for(ids.len(), n_predict);
        let text = self.post_json("/completion", body, timeout).await?;
        let r: CompletionResponse = serde_json::from_str(&text).map_err(|e| {
            Failure::BadResponse(format!("/completion returned no readable timings: {e}"))
        })?;
        let t = r.into_timings();
        if t.predicted_n != n_predict as i64 {
            return Err(Failure::BadResponse(format!(
                "it generated {} tokens instead of {n_predict} (context too small for the workload?)",
                t.predicted_n
            )));
        }
        if !(t.predicted_per_second.is_finite() && t.prompt_per_second.is_finite()) {
            return Err(Failure::BadResponse(
                "its timings are not finite numbers".into(),
            ));
        }
        Ok(t)
    }

    /// One request of `shape`, measured as a user meets it: the held tokens come from the
    /// server's prompt cache (as the earlier turns of a conversation left them), the new ones
    /// are read, and the answer is generated; the server's own timings give the time to first
    /// token and the generation speed at that depth.
    ///
    /// The held tokens are the first `held` of `stream`; a fresh context (no held tokens)
    /// reads the first `new` of `stream`, and so leaves them in the cache for a held shape
    /// measured right after it. `cached` is the length of the last request's prompt when that
    /// prompt was `stream`'s first tokens (else 0). A held shape whose held tokens are not
    /// exactly that prompt has them put in the cache first (one unmeasured request): a model
    /// with recurrent layers (Qwen3.5's linear attention) can only resume from the state
    /// saved at the end of a prompt, not from any prefix of what it holds, as a conversation's
    /// next turn always does. New tokens of a held shape come from `own`, which differs from
    /// every other request's, so nothing else can be reused.
    pub async fn measure_shape(
        &mut self,
        base: &[u32],
        shape: &crate::workloads::Shape,
        stream: usize,
        own: usize,
        cached: &mut u32,
    ) -> Result<crate::workloads::ShapeTiming, Failure> {
        let ids = if shape.held == 0 {
            prompt_ids(base, shape.new as usize, stream)
        } else {
            let held = prompt_ids(base, shape.held as usize, stream);
            if *cached != shape.held {
                self.complete_cached(&held, 1, true).await?;
            }
            let mut ids = held;
            ids.extend(prompt_ids(base, shape.new as usize, own));
            ids
        };
        let n = shape.gen.min(SHAPE_GEN_MAX);
        let t = self.complete_cached(&ids, n, true).await?;
        *cached = if shape.held == 0 { shape.new } else { 0 };
        let clamp = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
        Ok(crate::workloads::ShapeTiming {
            shape: shape.clone(),
            cache_n: clamp(t.cache_n),
            prompt_n: clamp(t.prompt_n),
            prompt_ms: t.prompt_ms,
            gen_tps: t.predicted_per_second,
            gen_measured: n,
            draft_n: t.draft_n.map(clamp),
            draft_n_accepted: t.draft_n_accepted.map(clamp),
        })
    }

    /// Name the request now in flight ([`Self::doing`]).
    fn say(&self, what: String) {
        if let Some(d) = self.doing {
            d.set(Some(super::phase::Doing::Measuring { what }));
        }
    }

    /// The whole workload (a trace's replay is measured by `replay_trace::measure` instead).
    pub async fn run(&mut self, w: &Workload) -> Result<Measured, Failure> {
        let base = self.base_tokens().await?;
        let plen = w.prompt_tokens as usize;
        let mut warnings = Vec::new();
        if w.warmup {
            self.say("the warm-up request".to_string());
            let ids = prompt_ids(&base, plen, offset_for(0, base.len()) + 1);
            self.complete(&ids, w.gen_tokens).await?;
        }
        let reps = w.repetitions.max(1) as usize;
        let (mut gen, mut pp, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
        let clamp = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
        let mut drafted = Vec::new();
        let mut prompt_mismatch = None;
        for k in 1..=reps {
            self.say(format!(
                "request {k} of {reps} ({plen} prompt + {} generated tokens)",
                w.gen_tokens
            ));
            let ids = prompt_ids(&base, plen, offset_for(k, base.len()));
            let t = self.complete(&ids, w.gen_tokens).await?;
            if t.prompt_n + t.cache_n != plen as i64 {
                prompt_mismatch = Some(t.prompt_n + t.cache_n);
            }
            gen.push(t.predicted_per_second);
            pp.push(t.prompt_per_second);
            ttft.push(t.prompt_ms);
            drafted.push((t.draft_n.map(clamp), t.draft_n_accepted.map(clamp)));
        }
        if let Some(n) = prompt_mismatch {
            warnings.push(format!(
                "the server processed {n} prompt tokens instead of {plen}"
            ));
        }
        let gen_tps_at_depth = match w.context_depth {
            Some(depth) if depth > 0 => {
                self.say(format!("generation {depth} tokens deep in the context"));
                let ids = prompt_ids(&base, depth as usize, offset_for(reps + 1, base.len()));
                let t = self.complete(&ids, w.gen_tokens).await?;
                Stat::from_samples(&[t.predicted_per_second])
            }
            _ => None,
        };
        let mut shapes = Vec::new();
        let order = measuring_order(&crate::workloads::distinct_shapes(&w.mixes));
        for r in 0..w.shape_repetitions.max(1) as usize {
            // One token stream per round of the shapes: the fresh documents read it, and the
            // held shapes after them find their held tokens in the cache, as a conversation
            // about a document would.
            let stream = offset_for(reps + 2 + r * (order.len() + 1), base.len()) + 7;
            let mut cached = 0;
            for (i, shape) in order.iter().enumerate() {
                self.say(format!(
                    "the {} request ({} tokens held, {} new, {} generated)",
                    crate::escape::terminal(&shape.name),
                    shape.held,
                    shape.new,
                    shape.gen.min(SHAPE_GEN_MAX)
                ));
                let own = offset_for(reps + 3 + r * (order.len() + 1) + i, base.len()) + 3;
                let t = self
                    .measure_shape(&base, shape, stream, own, &mut cached)
                    .await?;
                if shape.held > 0 && u64::from(t.cache_n) + 16 < u64::from(shape.held) {
                    warnings.push(format!(
                        "the server reused {} of the {} held tokens of '{}' from its prompt cache and read the rest again (as it would for you)",
                        t.cache_n, shape.held, shape.name
                    ));
                }
                shapes.push(t);
            }
        }
        let stat = |v: &[f64]| Stat::from_samples(v).expect("at least one repetition");
        let (gen_tps, prompt_tps) = (stat(&gen), stat(&pp));
        let request_s = match w.objective_mix() {
            Some(mix) => mix.request_s(&shapes),
            None => w.single_request_s(gen_tps.median, prompt_tps.median),
        };
        let metrics = Metrics {
            gen_tps,
            prompt_tps,
            ttft_ms: stat(&ttft),
            gen_tps_at_depth,
            shapes,
            request_s,
            replay: None,
            drafts: super::acceptance::Acceptance::of(drafted),
        };
        for (name, s) in [
            ("generation tok/s", &metrics.gen_tps),
            ("prompt tok/s", &metrics.prompt_tps),
        ] {
            if let Some(wn) = super::classify::spread_warning(name, s, SPREAD_LIMIT_PCT) {
                warnings.push(wn);
            }
        }
        Ok(Measured { metrics, warnings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_timeout_follows_the_speed_with_a_floor_and_a_cap() {
        let max = Duration::from_secs(900);
        let p = Pace::new(10.0, 100.0).unwrap();
        // 1000 / 100 + 100 / 10 = 20 s expected: 200 s.
        assert_eq!(p.timeout(1000, 100, max), Duration::from_secs(200));
        assert_eq!(p.timeout(10, 1, max), Pace::FLOOR);
        assert_eq!(p.timeout(100_000, 100, max), max);
        assert!(Pace::new(0.0, 1.0).is_none() && Pace::new(f64::NAN, 1.0).is_none());
        let q = p.slower(Pace::new(20.0, 50.0).unwrap());
        assert_eq!((q.gen_tps, q.prompt_tps), (10.0, 50.0));
    }

    #[test]
    fn prompt_ids_have_exact_length_and_rotate() {
        let base = [10, 11, 12, 13, 14];
        assert_eq!(prompt_ids(&base, 7, 0), [10, 11, 12, 13, 14, 10, 11]);
        assert_eq!(prompt_ids(&base, 3, 2), [12, 13, 14]);
        assert_ne!(
            prompt_ids(&base, 32, offset_for(1, 5)),
            prompt_ids(&base, 32, offset_for(2, 5))
        );
        assert!(prompt_ids(&[], 3, 0).is_empty());
    }

    #[test]
    fn needed_context_covers_the_longest_request() {
        let w = Workload {
            prompt_tokens: 512,
            gen_tokens: 128,
            repetitions: 3,
            warmup: true,
            context_depth: Some(4096),
            ..Workload::default()
        };
        assert_eq!(needed_ctx(&w), 4096 + 128);
        let w = Workload {
            context_depth: None,
            ..w
        };
        assert_eq!(needed_ctx(&w), 640);
    }
}
