//! A request's answer as tokens (issue 54): what [`super::speculate`] predicts speculative
//! decoding's acceptance from.
//!
//! - The recorder reads the generated text as the answer passes ([`text_of`]: the content,
//!   reasoning and tool-call arguments of every endpoint it records, streamed or not), and
//!   after the answer has ended asks the same server to tokenize it ([`tokenize`]).
//! - `qtune trace session --answers` asks the server for each scripted request's greedy
//!   answer, as a replay generates it ([`greedy`]), and keeps its token ids.

use super::trace::Trace;
use super::upstream;
use serde_json::Value;

/// The most answer text kept per request (bytes); past it the answer is not tokenized.
pub const MAX_TEXT: usize = 4 << 20;

/// The generated text in one answer (non-streamed) or one stream event of any recorded
/// endpoint: llama.cpp's `/completion` (`content`), text completions (`choices[].text`), chat
/// (`message` or `delta`: `reasoning_content`, `content`, tool calls' `arguments`), Anthropic
/// messages (`content` blocks, `content_block_delta`) and Responses (`output`, `*.delta`).
pub fn text_of(v: &Value) -> String {
    let mut out = String::new();
    let mut push = |s: &Value| {
        if let Some(s) = s.as_str() {
            out.push_str(s);
        }
    };
    push(&v["content"]);
    if let Some(choices) = v["choices"].as_array() {
        for c in choices.iter().take(1) {
            push(&c["text"]);
            for m in [&c["message"], &c["delta"]] {
                push(&m["reasoning_content"]);
                push(&m["content"]);
                for t in m["tool_calls"].as_array().into_iter().flatten() {
                    push(&t["function"]["arguments"]);
                }
            }
        }
    }
    // Anthropic: a message's blocks, or a stream's deltas.
    for b in v["content"].as_array().into_iter().flatten() {
        push(&b["thinking"]);
        push(&b["text"]);
        if b["type"] == "tool_use" {
            push(&Value::String(b["input"].to_string()));
        }
    }
    if v["type"] == "content_block_delta" {
        push(&v["delta"]["thinking"]);
        push(&v["delta"]["text"]);
        push(&v["delta"]["partial_json"]);
    }
    // Responses: the output items, or a stream's text deltas.
    for o in v["output"].as_array().into_iter().flatten() {
        for c in o["content"].as_array().into_iter().flatten() {
            push(&c["text"]);
        }
        push(&o["arguments"]);
    }
    if v["type"]
        .as_str()
        .is_some_and(|t| t.starts_with("response.") && t.ends_with(".delta"))
    {
        push(&v["delta"]);
    }
    out
}

/// The answer's text as the server tokenizes it (no BOS; special tokens parsed, as the model
/// emitted them).
pub async fn tokenize(client: &reqwest::Client, url: &str, text: &str) -> Result<Vec<u32>, String> {
    let v = upstream::post_json(
        client,
        url,
        "/tokenize",
        &serde_json::json!({"content": text, "add_special": false, "parse_special": true}),
    )
    .await?;
    let ids = v["tokens"]
        .as_array()
        .ok_or("the server's /tokenize answered no tokens")?;
    ids.iter()
        .map(|t| {
            t.as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(|| "the server's /tokenize answered a token that is not an id".into())
        })
        .collect()
}

/// Fill each request's `answer_tokens` with the server's greedy answer of its recorded length
/// (`/completion` as a replay sends it: `ignore_eos`, temperature 0, `return_tokens`).
/// Requests go one at a time, in id order.
pub async fn greedy(client: &reqwest::Client, url: &str, t: &mut Trace) -> anyhow::Result<()> {
    let n = t.requests.len();
    for (i, r) in t.requests.iter_mut().enumerate() {
        let (Some(p), Some(g)) = (&r.prompt_tokens, r.n_generated) else {
            continue;
        };
        if g == 0 {
            continue;
        }
        let body = serde_json::json!({
            "prompt": p,
            "n_predict": g,
            "ignore_eos": true,
            "cache_prompt": true,
            "seed": 42,
            "temperature": 0,
            "return_tokens": true,
        });
        let v = upstream::post_json(client, url, "/completion", &body)
            .await
            .map_err(|e| anyhow::anyhow!("request {} of {n}: {e}", i + 1))?;
        let ids: Option<Vec<u32>> = v["tokens"].as_array().and_then(|a| {
            a.iter()
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect()
        });
        let Some(ids) = ids else {
            anyhow::bail!(
                "request {} of {n}: the server's /completion answered no token ids \
                 (return_tokens)",
                i + 1
            );
        };
        r.answer_tokens = Some(ids);
        tracing::debug!("answer {} of {n}: {} tokens", i + 1, g);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_of_each_endpoints_answer_and_events() {
        assert_eq!(text_of(&json!({"content": "ab", "timings": {}})), "ab");
        assert_eq!(text_of(&json!({"choices": [{"text": "x"}]})), "x");
        let chat = json!({"choices": [{"message": {"reasoning_content": "r", "content": "c",
            "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\":1}"}}]}}]});
        assert_eq!(text_of(&chat), "rc{\"a\":1}");
        assert_eq!(
            text_of(&json!({"choices": [{"delta": {"content": "d"}}]})),
            "d"
        );
        let msg = json!({"content": [{"type": "thinking", "thinking": "t"},
            {"type": "text", "text": "x"}, {"type": "tool_use", "input": {"p": 2}}]});
        assert_eq!(text_of(&msg), "tx{\"p\":2}");
        assert_eq!(
            text_of(&json!({"type": "content_block_delta", "delta": {"text": "y"}})),
            "y"
        );
        assert_eq!(
            text_of(&json!({"type": "response.output_text.delta", "delta": "z"})),
            "z"
        );
        let resp = json!({"output": [{"content": [{"type": "output_text", "text": "o"}]}]});
        assert_eq!(text_of(&resp), "o");
        assert_eq!(text_of(&json!({"usage": {"prompt_tokens": 3}})), "");
    }
}
