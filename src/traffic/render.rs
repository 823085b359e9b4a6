//! Render a built-in [`Session`](super::session::Session) through a running llama-server into a
//! [`Trace`]: each request's messages go through the server's own chat template
//! (`/apply-template`) and tokenizer (`/tokenize`, special tokens on), exactly as `qtune record`
//! obtains a recorded prompt ([`super::upstream::prompt_tokens`]), so a replay measures the
//! session like a recorded one.
//!
//! The session's depth is set in characters and measured in tokens: the renderer builds it,
//! renders its deepest (last) request, and rebuilds with a corrected characters-per-token until
//! that request and its answer end within the last tenth below the context (below a quarter of
//! it for the sub-agents' session, [`Kind::share`]).

use super::session::{self, ChatRequest, Kind, Session, StdlibFile};
use super::trace::{End, Header, Line, Outcome, Request, Trace};
use super::upstream;
use anyhow::{bail, Result};
use serde_json::{json, Value};

/// The deepest request and its answer end in `[NEAR * ctx, ctx]`.
pub const NEAR: f64 = 0.9;
/// Builds tried before the depth is given up on.
const TRIES: usize = 12;

/// The endpoint a scripted chat request is sent to.
pub const ENDPOINT: &str = "/v1/chat/completions";

/// What the server's chat template can show (`/props`, `chat_template_caps`).
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub tools: bool,
    pub tool_calls: bool,
}

/// A request as the server's template can take it. A template that cannot render tool
/// definitions or tool calls (ChatML, as in SmolLM2 and qtune's tiny models) would drop them
/// without a word, and with them the edited files an agent re-emits: they are written into the
/// text instead, as Hermes- and Qwen-style templates render them (`<tools>` in the system
/// prompt, `<tool_call>` in the assistant's content).
pub fn for_template(r: &ChatRequest, caps: Caps) -> Value {
    let mut b = r.body();
    let Some(msgs) = b["messages"].as_array_mut() else {
        return b;
    };
    if !caps.tool_calls {
        for m in msgs.iter_mut() {
            let Some(calls) = m.get("tool_calls").and_then(Value::as_array).cloned() else {
                continue;
            };
            let mut content = m["content"].as_str().unwrap_or("").to_string();
            for c in calls {
                let args: Value = c["function"]["arguments"]
                    .as_str()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or(Value::Null);
                let call = json!({"name": c["function"]["name"], "arguments": args});
                content.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
            }
            m["content"] = Value::String(content.trim_start().to_string());
            if let Some(o) = m.as_object_mut() {
                o.remove("tool_calls");
            }
        }
    }
    if !caps.tools && !r.tools.is_empty() {
        let defs: String = r
            .tools
            .iter()
            .map(|t| format!("{}\n", t["function"]))
            .collect();
        let text = format!(
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n\
             <tools>\n{defs}</tools>\n\nFor each function call, return a json object with \
             function name and arguments within <tool_call></tool_call> XML tags."
        );
        if let Some(sys) = msgs.iter_mut().find(|m| m["role"] == "system") {
            let s = sys["content"].as_str().unwrap_or("").to_string() + &text;
            sys["content"] = Value::String(s);
        }
        if let Some(o) = b.as_object_mut() {
            o.remove("tools");
        }
    }
    b
}

/// The server's template capabilities; both false when it does not say.
async fn caps(client: &reqwest::Client, url: &str) -> Caps {
    let props = upstream::props(client, url).await.unwrap_or_default();
    let c = &props["chat_template_caps"];
    Caps {
        tools: c["supports_tools"].as_bool().unwrap_or(false),
        tool_calls: c["supports_tool_calls"].as_bool().unwrap_or(false),
    }
}

async fn tokens(client: &reqwest::Client, url: &str, body: &Value) -> Result<Vec<u32>> {
    upstream::prompt_tokens(client, url, ENDPOINT, &super::ordered::J::from(body))
        .await
        .map_err(|e| anyhow::anyhow!("cannot render the session through {url}: {e}"))
}

/// Build the session `kind` for a context of `ctx` tokens (the server's own per-slot context
/// when `None`) and render it through the server at `url` into a trace. `what` describes the
/// sources for the header (e.g. "Python 3.11's standard library").
pub async fn render(
    client: &reqwest::Client,
    url: &str,
    kind: Kind,
    ctx: Option<u64>,
    sources: &[StdlibFile],
    what: &str,
) -> Result<Trace> {
    let mut header: Header = upstream::upstream_header(client, url).await?;
    let n_ctx = header.model.n_ctx;
    let target = match (ctx, n_ctx) {
        (Some(c), Some(n)) if c > n => bail!(
            "--ctx {c} is more than the server's context per slot ({n} tokens): no request that \
             deep fits; give --ctx {n} or less, or start the server with a larger {} (or fewer \
             {})",
            crate::engine::Flag::Ctx,
            crate::engine::Flag::Parallel
        ),
        (Some(c), _) => c,
        (None, Some(n)) => n,
        (None, None) => {
            bail!("the server at {url} does not say its context size: give the depth with --ctx N")
        }
    };
    // The sub-agents' session gives each its share of the context.
    let whole = target;
    let target = whole / kind.share();
    if target < 2048 {
        let least = 2048 * kind.share();
        bail!("a context of {whole} tokens is too short for the built-in {} session: give --ctx {least} or more", kind.name());
    }
    let caps = caps(client, url).await;
    // Search the budget (characters) whose deepest request ends in the band: scale by the
    // tokens seen until the band is bracketed, then bisect (the ratio of characters to tokens
    // changes with what fits, so a plain scaling may oscillate).
    let aim = (1.0 + NEAR) / 2.0 * target as f64;
    let mut budget = (target as f64 * session::CHARS_PER_TOKEN) as usize;
    let (mut lo, mut hi): (Option<(usize, Session)>, Option<usize>) = (None, None);
    let mut last = (0usize, 0u32);
    let mut found: Option<Session> = None;
    for _ in 0..TRIES {
        let s = session::build(kind, budget, sources);
        let deepest = s.requests.last().expect("a session has requests");
        let n = tokens(client, url, &for_template(deepest, caps))
            .await?
            .len();
        let total = n as u64 + u64::from(deepest.max_tokens);
        last = (n, deepest.max_tokens);
        tracing::debug!(
            "session at {budget} chars: {n} + {} tokens",
            deepest.max_tokens
        );
        if total <= target && total as f64 >= NEAR * target as f64 {
            found = Some(s);
            break;
        }
        if total > target {
            hi = Some(budget);
        } else if lo.as_ref().is_none_or(|(b, _)| budget > *b) {
            lo = Some((budget, s));
        }
        let scaled = (budget as f64 * aim / total.max(1) as f64) as usize;
        budget = match (&lo, hi) {
            (Some((l, _)), Some(h)) => (l + h) / 2,
            _ => scaled,
        };
    }
    // Else the deepest session that fits, if any.
    let Some(s) = found.or(lo.map(|(_, s)| s)) else {
        bail!(
            "cannot fit the built-in {} session to {target} tokens: its deepest request came to \
             {} prompt and {} generated tokens after {TRIES} tries; try another --ctx",
            kind.name(),
            last.0,
            last.1
        );
    };
    let mut prompts = Vec::with_capacity(s.requests.len());
    for r in &s.requests {
        prompts.push(tokens(client, url, &for_template(r, caps)).await?);
    }
    header.scripted = Some(match kind {
        Kind::Subagents => format!(
            "the built-in subagents session ({what}, {} sub-agents at once, each {} tokens deep)",
            session::SUBAGENTS,
            crate::util::fmt_thousands(target as f64)
        ),
        _ => format!(
            "the built-in {} session ({what}, {} tokens deep)",
            kind.name(),
            crate::util::fmt_thousands(target as f64)
        ),
    });
    let requests = requests(&s, prompts, n_ctx.unwrap_or(target));
    let end = End {
        ended_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        requests: requests.len() as u64,
        interrupted: 0,
        other_requests: 0,
    };
    Ok(Trace {
        header,
        requests,
        end: Some(end),
    })
}

/// The trace's requests: ids in order; each group arrives at once, one second after the one
/// before, and lasts that second (the times give only order and overlap: nothing ran).
pub fn requests(s: &Session, prompts: Vec<Vec<u32>>, n_ctx: u64) -> Vec<Request> {
    let mut out: Vec<Request> = Vec::with_capacity(prompts.len());
    let groups: Vec<u32> = s.requests.iter().map(|r| r.group).collect();
    let mut slot = 0u32;
    for (i, (r, p)) in s.requests.iter().zip(prompts).enumerate() {
        if i > 0 && groups[i] != groups[i - 1] {
            slot += 1;
        }
        let at = f64::from(slot) * 1000.0;
        let overlapped = (0..groups.len())
            .filter(|&j| j != i && groups[j] == r.group)
            .map(|j| j as u64 + 1)
            .collect();
        // The answer fits in the context (an early, long edit at a shallow depth always does;
        // this only guards the trace's own check).
        let room = n_ctx.saturating_sub(p.len() as u64).max(1);
        let gen = u64::from(r.max_tokens).min(room);
        out.push(Request {
            id: i as u64 + 1,
            endpoint: ENDPOINT.into(),
            stream: false,
            arrived_ms: at,
            first_byte_ms: None,
            ended_ms: at + 1000.0,
            overlapped,
            status: None,
            outcome: Outcome::Ok,
            prompt_tokens: Some(p),
            n_generated: Some(gen),
            max_tokens: Some(gen as i64),
            temperature: None,
            top_p: None,
            timings: None,
            answer_tokens: None,
            note: Some(
                "scripted by qtune, not run: no timings; the times give only order and overlap"
                    .into(),
            ),
        });
    }
    out
}

/// The trace as JSON Lines: the header, the requests, the end line.
pub fn to_jsonl(t: &Trace) -> Result<String> {
    let mut s = serde_json::to_string(&Line::Header(Box::new(t.header.clone())))? + "\n";
    for r in &t.requests {
        s.push_str(&serde_json::to_string(&Line::Request(Box::new(r.clone())))?);
        s.push('\n');
    }
    if let Some(e) = &t.end {
        s.push_str(&serde_json::to_string(&Line::End(e.clone()))?);
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(group: u32) -> ChatRequest {
        ChatRequest {
            messages: vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": "u"}),
                json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "read_file",
                    "arguments": "{\"path\":\"Lib/a.py\"}"}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "x = 1"}),
            ],
            tools: vec![json!({"type": "function", "function": {"name": "read_file"}})],
            max_tokens: 50,
            group,
        }
    }

    #[test]
    fn a_template_without_tools_gets_them_in_the_text() {
        let r = request(0);
        let native = for_template(
            &r,
            Caps {
                tools: true,
                tool_calls: true,
            },
        );
        assert_eq!(native, r.body());
        let b = for_template(
            &r,
            Caps {
                tools: false,
                tool_calls: false,
            },
        );
        assert!(b.get("tools").is_none());
        let sys = b["messages"][0]["content"].as_str().unwrap();
        assert!(sys.starts_with("sys\n\n# Tools"), "{sys}");
        assert!(
            sys.contains("<tools>\n{\"name\":\"read_file\"}\n</tools>"),
            "{sys}"
        );
        let a = &b["messages"][2];
        assert!(a.get("tool_calls").is_none());
        assert_eq!(
            a["content"],
            "<tool_call>\n{\"arguments\":{\"path\":\"Lib/a.py\"},\"name\":\"read_file\"}\n</tool_call>"
        );
    }

    #[test]
    fn a_group_arrives_at_once_and_overlaps_itself_only() {
        let s = Session {
            kind: Kind::Agent,
            requests: vec![request(0), request(1), request(1), request(1), request(2)],
        };
        let prompts = vec![vec![1u32; 10]; 5];
        let t = requests(&s, prompts, 55);
        let at: Vec<f64> = t.iter().map(|r| r.arrived_ms).collect();
        assert_eq!(at, [0.0, 1000.0, 1000.0, 1000.0, 2000.0]);
        assert_eq!(t[1].overlapped, [3, 4]);
        assert_eq!(t[3].overlapped, [2, 3]);
        assert!(t[0].overlapped.is_empty() && t[4].overlapped.is_empty());
        // The answer is cut to what the context leaves.
        assert_eq!(t[0].n_generated, Some(45));
        assert!(t.iter().all(|r| r.timings.is_none() && r.note.is_some()));
    }
}
