//! The trace format: what `qtune record` writes and `qtune trace show` (and replay) reads.
//! Documented for users in `docs/trace-format.md`; this file and that page change together.
//!
//! A trace is JSON Lines. The first line is a [`Header`], then one [`Request`] per generation
//! request in the order they ended, then an [`End`] line when the recorder stopped cleanly.
//! Every line carries `"type"`. Session and prefix information (which earlier request a
//! prompt extends or diverges from) is not stored: it is derived from the prompt tokens by
//! [`prefix_links`], so it can never disagree with them.

use serde::{Deserialize, Serialize};

/// The `format` of a trace's header.
pub const FORMAT: &str = "qtune-trace";
/// The format version this qtune writes and reads.
pub const VERSION: u32 = 1;
/// The largest trace `trace show` reads (bytes).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// The most requests a trace may hold.
pub const MAX_REQUESTS: usize = 100_000;
/// The most tokens any one count of a trace may say (a context, a prompt, a generation): no
/// llama-server context holds more than `u32` tokens. With [`MAX_REQUESTS`] requests, sums of
/// counts stay far below `u64::MAX`.
pub const MAX_COUNT: u64 = u32::MAX as u64;
/// The text whose token ids fingerprint the upstream's tokenizer (`tokenizer_sha256`): plain
/// words, code, digits, non-Latin text and a chat-template marker.
pub const TOKENIZER_PROBE: &str = "qtune tokenizer probe: Hello, world! def f(x):\n    return x ** 2  # 12345 67.89\n\u{4e2d}\u{6587} \u{00e9}t\u{00e9} <|im_start|>user <think> </s> [INST]";

/// The `tokenizer_sha256` of a server that gives these token ids for [`TOKENIZER_PROBE`]
/// (tokenized with `add_special` and `parse_special` on): SHA-256 of the ids in decimal,
/// comma-separated. The recorder and a replay compute it alike.
pub fn tokenizer_sha256(ids: &[serde_json::Value]) -> String {
    use sha2::Digest;
    let ids: Vec<String> = ids.iter().map(|x| x.to_string()).collect();
    format!("{:x}", sha2::Sha256::digest(ids.join(",").as_bytes()))
}

/// One line of a trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    Header(Box<Header>),
    Request(Box<Request>),
    End(End),
}

/// The first line: what recorded the trace, and what it recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    pub qtune_version: String,
    /// When the recorder started (RFC 3339, UTC); every `*_ms` is counted from here.
    pub started_at: String,
    /// The upstream server's URL.
    pub upstream: String,
    #[serde(default)]
    pub server: ServerInfo,
    #[serde(default)]
    pub model: ModelInfo,
    /// SHA-256 of the upstream's token ids for [`TOKENIZER_PROBE`] (decimal, comma-separated):
    /// two servers with the same value tokenize alike.
    #[serde(default)]
    pub tokenizer_sha256: Option<String>,
    /// Set when qtune scripted the requests instead of recording them (`qtune trace
    /// session`): what the session is, e.g. "the built-in agent session (Python 3.11's
    /// standard library, 8,192 tokens deep)". Absent in recorded traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scripted: Option<String>,
}

/// What the upstream server said about itself (`GET /props`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerInfo {
    pub build_info: Option<String>,
    /// The model file's name (not its folder).
    pub model_file: Option<String>,
    /// Parallel slots (`-np`).
    pub slots: Option<u64>,
    /// SHA-256 of the chat template the server renders chat requests with.
    pub chat_template_sha256: Option<String>,
    /// The message delimiters the server gives its chat requests, where qtune can tell from
    /// its chat template ([`chat_message_delimiters`]): a replay sends them with each chat
    /// request, so the server keeps the context checkpoints it kept live. Absent: none known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_delimiters: Option<serde_json::Value>,
}

/// Was a request a chat request (its prompt rendered by the server's chat template)?
pub fn is_chat_endpoint(endpoint: &str) -> bool {
    matches!(
        endpoint,
        "/v1/chat/completions"
            | "/chat/completions"
            | "/v1/messages"
            | "/v1/responses"
            | "/responses"
    )
}

/// A header's `message_delimiters` as a replay may send them: at most 16 objects, each a
/// `role` and a `delimiter`, strings of at most 64 characters.
fn delimiters_ok(d: &serde_json::Value) -> bool {
    let short = |v: &serde_json::Value| v.as_str().is_some_and(|s| s.chars().count() <= 64);
    d.as_array().is_some_and(|a| {
        a.len() <= 16
            && a.iter().all(|o| {
                o.as_object()
                    .is_some_and(|o| o.len() == 2 && short(&o["role"]) && short(&o["delimiter"]))
            })
    })
}

/// The message delimiters the pinned llama.cpp gives a chat request rendered by `template`,
/// where qtune can tell: the Qwen3.5 family's (its `qwen3-coder` chat parser, chosen for a
/// template with `<tool_call>`, `<function=` and `<parameter=`: Qwen3.5, Qwen3-Coder, Nemotron
/// Nano 3; common/chat.cpp and common/parsers/qwen3-coder.cpp). Every other template: `None`
/// (llama.cpp derives them by analysing the template, which qtune does not reproduce).
pub fn chat_message_delimiters(template: &str) -> Option<serde_json::Value> {
    let qwen3_coder = template.contains("<tool_call>")
        && template.contains("<function=")
        && template.contains("<parameter=")
        && !template.contains("'<tool_call><function=' ~ tool_call.name ~ '>'")
        && template.contains("<|im_start|>");
    qwen3_coder.then(|| {
        serde_json::json!([
            {"role": "assistant", "delimiter": "<|im_start|>assistant"},
            {"role": "tool", "delimiter": "<|im_start|>user\n<tool_response>"},
            {"role": "tool", "delimiter": "<|im_start|>tool_response"},
            {"role": "user", "delimiter": "<|im_start|>user"},
            {"role": "system", "delimiter": "<|im_start|>system"},
        ])
    })
}

/// The upstream's model (`GET /v1/models`, `meta`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModelInfo {
    pub n_vocab: Option<u64>,
    /// The context of one slot: no request can be longer.
    pub n_ctx: Option<u64>,
    pub n_ctx_train: Option<u64>,
    pub n_params: Option<u64>,
    pub size_bytes: Option<u64>,
}

/// How a recorded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The server answered 2xx and the whole answer reached the client.
    Ok,
    /// The server answered with an error status (see `status`).
    HttpError,
    /// The upstream could not be reached, or broke off mid-answer.
    UpstreamFailed,
    /// The client went away before the answer ended (the proxy then stopped reading).
    ClientGone,
    /// The recorder stopped (SIGINT/SIGTERM) before the answer ended.
    Interrupted,
}

/// The server's own timings (its `timings` object).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Prompt tokens reused from the cache.
    pub cache_n: u64,
    /// Prompt tokens the server read (processed).
    pub prompt_n: u64,
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_n: u64,
    pub predicted_ms: f64,
}

/// `overlapped` as the recorder writes it: distinct ids, at most [`MAX_REQUESTS`]. A list that
/// repeats an id or is longer is refused as it is read, so a file cannot make it cost more
/// memory than a trace's requests can (a million repeats of one id took 1 GiB per 128 MB).
fn distinct_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    struct Ids;
    impl<'de> serde::de::Visitor<'de> for Ids {
        type Value = Vec<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of distinct request ids")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut ids = Vec::new();
            while let Some(id) = seq.next_element::<u64>()? {
                if !seen.insert(id) {
                    return Err(serde::de::Error::custom(format!(
                        "overlapped lists request {id} twice"
                    )));
                }
                if seen.len() > MAX_REQUESTS {
                    return Err(serde::de::Error::custom(format!(
                        "overlapped lists more than {} requests",
                        crate::util::fmt_thousands(MAX_REQUESTS as f64)
                    )));
                }
                ids.push(id);
            }
            Ok(ids)
        }
    }
    d.deserialize_seq(Ids)
}

/// One generation request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// 1, 2, ... in the order the requests arrived.
    pub id: u64,
    /// The path it was sent to, e.g. `/v1/chat/completions`.
    pub endpoint: String,
    pub stream: bool,
    /// When it arrived, its first answer byte came back, and its answer ended (ms since
    /// `started_at`).
    pub arrived_ms: f64,
    pub first_byte_ms: Option<f64>,
    pub ended_ms: f64,
    /// The ids of every request in flight at some time between this one's arrival and end.
    #[serde(default, deserialize_with = "distinct_ids")]
    pub overlapped: Vec<u64>,
    /// The upstream's HTTP status.
    pub status: Option<u16>,
    pub outcome: Outcome,
    /// The prompt exactly as the server saw it: token ids after the chat template, with the
    /// special tokens the server adds (`null` when it could not be obtained; see `note`).
    pub prompt_tokens: Option<Vec<u32>>,
    /// Tokens generated (the server's `predicted_n`, else the response's usage).
    pub n_generated: Option<u64>,
    /// The limit the client asked for (`max_tokens`, `max_completion_tokens` or `n_predict`).
    pub max_tokens: Option<i64>,
    /// The sampling the client asked for (`temperature`, `top_p`); absent where it sent none
    /// (the server's defaults applied) and in traces recorded before they were kept. A replay
    /// is greedy whatever they say (`trial::replay_trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    pub timings: Option<Timings>,
    /// The answer as the server tokenizes it (issue 54): the generated text tokenized after the
    /// answer ended, or (`trace session --answers`) the greedy answer's own token ids. What
    /// `trace show` predicts speculative decoding's acceptance from. Absent in older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_tokens: Option<Vec<u32>>,
    /// Why something is missing, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The sampling a trace's clients asked for: "temperature 0.7, top_p 0.95, on 10 of 12
/// requests" (a range where they differ); None where no request sent either.
pub fn client_sampling(t: &Trace) -> Option<String> {
    let range = |v: Vec<f64>| -> Option<String> {
        let lo = v.iter().copied().reduce(f64::min)?;
        let hi = v.iter().copied().reduce(f64::max)?;
        Some(if hi - lo < 1e-9 {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        })
    };
    let temps = range(t.requests.iter().filter_map(|r| r.temperature).collect());
    let top_ps = range(t.requests.iter().filter_map(|r| r.top_p).collect());
    let sent = t
        .requests
        .iter()
        .filter(|r| r.temperature.is_some() || r.top_p.is_some())
        .count();
    if sent == 0 {
        return None;
    }
    let parts: Vec<String> = [("temperature", temps), ("top_p", top_ps)]
        .into_iter()
        .filter_map(|(k, v)| Some(format!("{k} {}", v?)))
        .collect();
    Some(format!(
        "{}, on {sent} of {} requests",
        parts.join(", "),
        t.requests.len()
    ))
}

/// One line where the trace's clients sampled (a temperature above 0): a replay is greedy,
/// and why. None where every request that sent a temperature sent 0, or none sent one.
pub fn greedy_replay_note(t: &Trace) -> Option<String> {
    t.requests
        .iter()
        .any(|r| r.temperature.is_some_and(|x| x > 0.0))
        .then(|| {
            format!(
                "the replay is greedy (temperature 0) while the client sampled ({}): greedy answers are the same in every launch, so launches compare like for like and speculation's answers can be checked token for token; its acceptance at the client's sampling is usually lower than measured here",
                client_sampling(t).unwrap_or_default()
            )
        })
}

/// The last line, written when the recorder stopped cleanly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct End {
    pub ended_at: String,
    /// Generation requests recorded (lines above).
    pub requests: u64,
    /// Of these, how many the stop interrupted.
    pub interrupted: u64,
    /// Other requests forwarded and not recorded (`/v1/models`, `/tokenize`, ...).
    pub other_requests: u64,
}

/// A whole trace, read and checked.
#[derive(Debug, Clone)]
pub struct Trace {
    pub header: Header,
    /// In arrival order (by id).
    pub requests: Vec<Request>,
    pub end: Option<End>,
}

/// The earlier request a prompt shares the longest prefix with: `(its index, the common
/// length)`; `None` for the first prompt, a request without tokens, or no common token.
pub type Link = Option<(usize, usize)>;

/// For each prompt (in arrival order), the earlier prompt it shares the longest common prefix
/// with. The longest common prefix with any prompt of a set is the longer one with its two
/// neighbours in sorted order, so this is O(n log n) comparisons.
pub fn prefix_links(prompts: &[Option<&[u32]>]) -> Vec<Link> {
    use std::collections::BTreeSet;
    let mut seen: BTreeSet<(&[u32], usize)> = BTreeSet::new();
    let mut out = Vec::with_capacity(prompts.len());
    for (i, p) in prompts.iter().enumerate() {
        let Some(p) = *p else {
            out.push(None);
            continue;
        };
        let below = seen.range(..(p, i)).next_back();
        let above = seen.range((p, i)..).next();
        let mut best: Link = None;
        for (q, j) in below.into_iter().chain(above) {
            let n = common_prefix(p, q);
            if n > 0 && best.is_none_or(|(bj, bn)| n > bn || (n == bn && *j > bj)) {
                best = Some((*j, n));
            }
        }
        out.push(best);
        seen.insert((p, i));
    }
    out
}

/// The number of leading tokens two prompts share.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Why a trace cannot be read: one line for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TraceError(pub String);

fn err(msg: impl Into<String>) -> TraceError {
    TraceError(msg.into())
}

/// Parse and check a trace's bytes (see [`read`]).
pub fn parse(bytes: &[u8]) -> Result<Trace, TraceError> {
    if bytes.is_empty() {
        return Err(err(
            "the file is empty: a trace starts with its header line (record one with 'qtune record')",
        ));
    }
    let lines = bytes.split(|b| *b == b'\n').count();
    if lines > MAX_REQUESTS + 3 {
        return Err(err(format!(
            "it has {} lines; a trace holds at most {} requests",
            crate::util::fmt_thousands(lines as f64),
            crate::util::fmt_thousands(MAX_REQUESTS as f64)
        )));
    }
    let ends_cut = !bytes.ends_with(b"\n");
    let mut header: Option<Header> = None;
    let mut requests: Vec<Request> = Vec::new();
    let mut end: Option<End> = None;
    let raw: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let last = raw.len();
    for (i, line) in raw.into_iter().enumerate() {
        let n = i + 1;
        if line.is_empty() {
            continue;
        }
        if line.contains(&0) {
            return Err(err(format!(
                "line {n} holds NUL bytes: this is a binary file, not a trace"
            )));
        }
        let Ok(text) = std::str::from_utf8(line) else {
            return Err(err(format!(
                "line {n} is not UTF-8 text: this is not a trace (a binary file?)"
            )));
        };
        if end.is_some() {
            return Err(err(format!(
                "line {n} follows the trace's end line: two traces joined, or a damaged file"
            )));
        }
        let parsed: Line = match serde_json::from_str(text) {
            Ok(l) => l,
            Err(e) if n == last && ends_cut && e.is_eof() => {
                return Err(err(format!(
                    "line {n} is cut off (the file ends mid-line): the recorder was killed \
                     while writing, or the file was truncated; remove that line to read the rest"
                )))
            }
            Err(e) => {
                let what = if n == 1 {
                    "is not a trace header"
                } else {
                    "is not a trace line"
                };
                return Err(err(format!("line {n} {what}: {e}")));
            }
        };
        match parsed {
            Line::Header(h) => {
                if n != 1 || header.is_some() {
                    return Err(err(format!(
                        "line {n} is a second header: two traces joined, or a damaged file"
                    )));
                }
                if h.format != FORMAT {
                    return Err(err(format!(
                        "line 1 says format '{}', not '{FORMAT}'",
                        crate::escape::terminal(&h.format)
                    )));
                }
                if h.version != VERSION {
                    return Err(err(format!(
                        "the trace is format version {}; this qtune reads version {VERSION} \
                         (use the qtune that recorded it)",
                        h.version
                    )));
                }
                if let Some(d) = &h.server.message_delimiters {
                    if !delimiters_ok(d) {
                        return Err(err(
                            "line 1's server.message_delimiters is not a list of at most 16 \
                             {\"role\", \"delimiter\"} strings of at most 64 characters",
                        ));
                    }
                }
                header = Some(*h);
            }
            _ if header.is_none() => {
                return Err(err(
                    "line 1 is not a trace header: a trace starts with {\"type\":\"header\",...}",
                ))
            }
            Line::Request(r) => {
                if requests.len() >= MAX_REQUESTS {
                    return Err(err(format!(
                        "more than {} requests; a trace holds at most that many",
                        crate::util::fmt_thousands(MAX_REQUESTS as f64)
                    )));
                }
                requests.push(*r);
            }
            Line::End(e) => end = Some(e),
        }
    }
    let Some(header) = header else {
        return Err(err("the file has no header line: not a trace"));
    };
    requests.sort_by_key(|r| r.id);
    if end.is_none() {
        drop_unfinished_overlaps(&mut requests);
    }
    check(&header, &requests)?;
    Ok(Trace {
        header,
        requests,
        end,
    })
}

/// A trace cut short (no end line: the recorder was killed) lists, in its requests'
/// `overlapped`, requests that were still in flight and never got a line: those ids are
/// dropped (they never ended, so nothing waits for them). A complete trace keeps them, and
/// [`check`] refuses one that names a request it does not hold.
fn drop_unfinished_overlaps(requests: &mut [Request]) {
    let ids: std::collections::HashSet<u64> = requests.iter().map(|r| r.id).collect();
    for r in requests {
        r.overlapped.retain(|o| ids.contains(o));
    }
}

/// The checks a replay relies on: unique ids, times that go forward, counts a server could
/// have produced (each at most [`MAX_COUNT`], their sums checked).
fn check(h: &Header, requests: &[Request]) -> Result<(), TraceError> {
    let ids: std::collections::HashSet<u64> = requests.iter().map(|r| r.id).collect();
    let mut prev: Option<&Request> = None;
    let ctx = h.model.n_ctx;
    for (name, v) in [("n_ctx", ctx), ("n_ctx_train", h.model.n_ctx_train)] {
        if let Some(v) = v.filter(|&v| v > MAX_COUNT) {
            return Err(err(format!(
                "line 1's model.{name} is {v}: no llama-server context holds more than {MAX_COUNT} tokens"
            )));
        }
    }
    for r in requests {
        let at = |what: String| err(format!("request {}: {what}", r.id));
        let timings = r.timings.as_ref();
        for (name, v) in [
            ("n_generated", r.n_generated),
            ("timings.cache_n", timings.map(|t| t.cache_n)),
            ("timings.prompt_n", timings.map(|t| t.prompt_n)),
            ("timings.predicted_n", timings.map(|t| t.predicted_n)),
        ] {
            if let Some(v) = v.filter(|&v| v > MAX_COUNT) {
                return Err(at(format!(
                    "{name} is {v}: no request holds more than {MAX_COUNT} tokens"
                )));
            }
        }
        if let Some(p) = prev {
            if p.id == r.id {
                return Err(at("its id appears twice".into()));
            }
            if r.arrived_ms < p.arrived_ms {
                return Err(at(format!(
                    "it arrived at {:.1} ms, before request {} ({:.1} ms): a negative gap \
                     (ids count arrivals)",
                    r.arrived_ms, p.id, p.arrived_ms
                )));
            }
        }
        for (name, v) in [
            ("arrived_ms", Some(r.arrived_ms)),
            ("ended_ms", Some(r.ended_ms)),
            ("first_byte_ms", r.first_byte_ms),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Err(at(format!("{name} is {v}: times are ms since the start")));
                }
            }
        }
        if r.ended_ms < r.arrived_ms {
            return Err(at(format!(
                "it ended ({:.1} ms) before it arrived ({:.1} ms)",
                r.ended_ms, r.arrived_ms
            )));
        }
        if let Some(o) = r
            .overlapped
            .iter()
            .find(|o| !ids.contains(o) || **o == r.id)
        {
            return Err(at(format!(
                "it overlaps request {o}, which is not in the trace"
            )));
        }
        let n_prompt = r.prompt_tokens.as_ref().map_or(0, |t| t.len() as u64);
        let n_gen = r.n_generated.unwrap_or(0);
        if let Some(c) = ctx {
            if n_prompt.checked_add(n_gen).is_none_or(|n| n > c) {
                return Err(at(format!(
                    "{} prompt and {} generated tokens are longer than the server's context \
                     ({} tokens per slot): no server could have run it",
                    crate::util::fmt_thousands(n_prompt as f64),
                    crate::util::fmt_thousands(n_gen as f64),
                    crate::util::fmt_thousands(c as f64)
                )));
            }
        }
        if let Some(v) = h.model.n_vocab {
            let tokens = r.prompt_tokens.iter().chain(&r.answer_tokens).flatten();
            if let Some(bad) = tokens.into_iter().find(|&&t| u64::from(t) >= v) {
                return Err(at(format!(
                    "token id {bad} is outside the model's vocabulary ({v} tokens)"
                )));
            }
        }
        if let Some(t) = &r.timings {
            if t.cache_n
                .checked_add(t.prompt_n)
                .is_none_or(|n| n > ctx.unwrap_or(u64::MAX))
                || t.predicted_n > ctx.unwrap_or(u64::MAX)
                || !(t.prompt_ms.is_finite() && t.prompt_ms >= 0.0)
                || !(t.predicted_ms.is_finite() && t.predicted_ms >= 0.0)
            {
                return Err(at(
                    "its timings are impossible (more tokens than the context, or negative times)"
                        .into(),
                ));
            }
        }
        prev = Some(r);
    }
    Ok(())
}

/// Read and check a trace file: bounded ([`MAX_TRACE_BYTES`]), a regular file; every error is
/// one line naming the file.
pub fn read(path: &std::path::Path) -> anyhow::Result<Trace> {
    let bytes = crate::util::read_bounded(path, MAX_TRACE_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read the trace {}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| anyhow::anyhow!("the trace {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_delimiters_come_from_a_qwen3_5_template_only_and_are_checked() {
        let qwen = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/templates/Qwen3.5-4B.jinja"
        ))
        .unwrap();
        let d = chat_message_delimiters(&qwen).expect("Qwen3.5's template");
        assert!(delimiters_ok(&d));
        assert_eq!(d[3]["delimiter"], "<|im_start|>user");
        let chatml = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n'}}{% endfor %}";
        assert!(chat_message_delimiters(chatml).is_none());
        let long = "x".repeat(65);
        assert!(!delimiters_ok(
            &serde_json::json!([{"role": "user", "delimiter": long}])
        ));
        assert!(!delimiters_ok(&serde_json::json!("<|im_start|>user")));
        assert!(!delimiters_ok(
            &serde_json::json!([{"role": "user", "delimiter": "a", "x": 1}])
        ));
    }

    #[test]
    fn a_trace_that_sampled_says_its_replay_is_greedy_in_one_line() {
        let line = |id: u64, sampling: &str| {
            format!(
                r#"{{"type":"request","id":{id},"endpoint":"/completion","stream":false,"arrived_ms":0,"first_byte_ms":null,"ended_ms":1,"status":200,"outcome":"ok","prompt_tokens":[1],"n_generated":1,"max_tokens":null,"timings":null{sampling}}}"#
            )
        };
        let trace = |sampling: [&str; 3]| {
            let mut body = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"x","upstream":"u"}"#.to_string();
            for (i, s) in sampling.iter().enumerate() {
                body.push('\n');
                body.push_str(&line(i as u64 + 1, s));
            }
            parse(body.as_bytes()).unwrap()
        };
        // Old traces (no sampling fields) read, and say nothing.
        let old = trace(["", "", ""]);
        assert_eq!(old.requests[0].temperature, None);
        assert_eq!(
            (client_sampling(&old), greedy_replay_note(&old)),
            (None, None)
        );
        // A greedy client: the sampling is shown, no note.
        let greedy = trace([r#","temperature":0"#, "", ""]);
        assert_eq!(
            client_sampling(&greedy).as_deref(),
            Some("temperature 0, on 1 of 3 requests")
        );
        assert_eq!(greedy_replay_note(&greedy), None);
        let sampled = trace([
            r#","temperature":0"#,
            r#","temperature":0.7,"top_p":0.95"#,
            r#","top_p":0.9"#,
        ]);
        assert_eq!(
            client_sampling(&sampled).as_deref(),
            Some("temperature 0-0.7, top_p 0.9-0.95, on 3 of 3 requests")
        );
        let note = greedy_replay_note(&sampled).unwrap();
        assert!(
            note.starts_with(
                "the replay is greedy (temperature 0) while the client sampled (temperature 0-0.7"
            ),
            "{note}"
        );
        assert!(!note.contains('\n'));
    }

    #[test]
    fn links_find_the_longest_earlier_prefix() {
        let a: Vec<u32> = vec![1, 2, 3, 4];
        let b: Vec<u32> = vec![1, 2, 3, 4, 5, 6]; // extends a
        let c: Vec<u32> = vec![9, 9]; // unrelated
        let d: Vec<u32> = vec![1, 2, 3, 7, 8]; // diverges from b at 3
        let e: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 7]; // extends b
        let p: Vec<Option<&[u32]>> = vec![Some(&a), Some(&b), Some(&c), None, Some(&d), Some(&e)];
        assert_eq!(
            prefix_links(&p),
            vec![None, Some((0, 4)), None, None, Some((1, 3)), Some((1, 6))]
        );
    }
}
