//! Asking a running llama-server what it serves and how it renders a prompt: shared by the
//! recording proxy ([`super::proxy`]) and the built-in session's renderer
//! ([`super::render`]), so a recorded prompt and a rendered one are tokenized alike.

use super::ordered::J;
use super::trace::{self, Header, ModelInfo, ServerInfo};
use anyhow::{Context, Result};
use std::time::Duration;

/// The largest answer read from `/apply-template` or `/tokenize`.
const MAX_ANSWER: usize = 256 << 20;

/// The most token ids read from one `/tokenize` answer: past any context a server loads (a
/// real prompt is a million tokens at most). Read straight into ids, never into JSON values
/// (60 million ids parsed as values took 2.1 GB).
pub const MAX_TOKENS: usize = 1 << 21;

/// The largest `/tokenize` answer read: [`MAX_TOKENS`] ids of ten digits and a separator.
const MAX_TOKENIZE_ANSWER: usize = MAX_TOKENS * 12 + (1 << 16);

/// `url` as it may be printed or stored: without the `user:password@` it may hold (the
/// requests still send them: reqwest turns them into basic authentication).
pub fn without_credentials(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if scheme.is_empty() {
        format!("{host}{tail}")
    } else {
        format!("{scheme}://{host}{tail}")
    }
}

/// The largest answer read from `/props`, `/v1/models` or the tokenizer probe (a chat
/// template is a few KiB; its whole `/props` well under 1 MiB).
const MAX_PROPS: usize = 16 << 20;

/// How long `qtune record` waits for an upstream that is still loading its model (503).
pub const LOADING_WAIT: Duration = Duration::from_secs(600);

/// The JSON of an answer read chunk by chunk up to `max` bytes: a larger one is an error,
/// read no further (memory stays bounded whatever the upstream sends).
async fn bounded_json(
    r: reqwest::Response,
    max: usize,
) -> std::result::Result<serde_json::Value, String> {
    let bytes = bounded_bytes(r, max).await?;
    serde_json::from_slice(&bytes).map_err(|e| format!("its answer is not JSON: {e}"))
}

/// An answer's bytes, read chunk by chunk up to `max`.
async fn bounded_bytes(
    mut r: reqwest::Response,
    max: usize,
) -> std::result::Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(c) = r.chunk().await.map_err(|e| format!("it broke off: {e}"))? {
        if bytes.len() + c.len() > max {
            return Err(format!(
                "its answer is larger than {} MiB, which no llama-server sends",
                max >> 20
            ));
        }
        bytes.extend_from_slice(&c);
    }
    Ok(bytes)
}

/// The server's `/props`, read as [`upstream_header`] reads it (30 s, at most
/// [`MAX_PROPS`] bytes); None when it does not answer so.
pub async fn props(client: &reqwest::Client, url: &str) -> Option<serde_json::Value> {
    let r = client
        .get(format!("{url}/props"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .ok()?;
    bounded_json(r, MAX_PROPS).await.ok()
}

/// Ask the upstream what it serves, for the trace's header. Fails when it does not answer
/// like a llama-server.
pub async fn upstream_header(client: &reqwest::Client, upstream: &str) -> Result<Header> {
    let shown = without_credentials(upstream);
    let get = |path: &str| {
        let url = format!("{upstream}{path}");
        let c = client.clone();
        async move {
            let r = c
                .get(&url)
                .timeout(Duration::from_secs(30))
                .send()
                .await
                .and_then(|r| r.error_for_status());
            match r {
                Ok(r) => bounded_json(r, MAX_PROPS).await.ok(),
                Err(_) => None,
            }
        }
    };
    // A server still loading its model answers 503: wait for it, as launch.sh does.
    let deadline = std::time::Instant::now() + LOADING_WAIT;
    let mut waiting = false;
    let props = loop {
        let r = client
            .get(format!("{upstream}/props"))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .with_context(|| {
                format!(
                    "cannot reach the llama-server at {shown}: start it first \
                     (e.g. llama-server -m MODEL --port 8081), or check its address"
                )
            })?;
        if r.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE
            || std::time::Instant::now() >= deadline
        {
            break r;
        }
        if !waiting {
            eprintln!(
                "qtune: {shown} is loading its model (503): waiting for it (up to {} s)",
                LOADING_WAIT.as_secs()
            );
            waiting = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if props.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
        anyhow::bail!(
            "{shown} still answers 503 (loading) after {} s: check its log",
            LOADING_WAIT.as_secs()
        );
    }
    if !props.status().is_success() {
        anyhow::bail!(
            "{shown}/props answered {}: is this a llama-server?",
            props.status()
        );
    }
    let props: serde_json::Value = bounded_json(props, MAX_PROPS)
        .await
        .map_err(|e| anyhow::anyhow!("{shown}/props: {e}: is this a llama-server?"))?;
    let models = get("/v1/models").await.unwrap_or_default();
    let meta = &models["data"][0]["meta"];
    let sha = |s: &str| {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(s.as_bytes()))
    };
    let probe = client
        .post(format!("{upstream}/tokenize"))
        .json(&serde_json::json!({"content": trace::TOKENIZER_PROBE, "add_special": true, "parse_special": true}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .ok();
    let tokenizer_sha256 = match probe {
        Some(r) if r.status().is_success() => bounded_bytes(r, MAX_PROPS)
            .await
            .ok()
            .and_then(|b| token_ids(&b).ok())
            .map(|t| {
                let t: Vec<serde_json::Value> = t.into_iter().map(Into::into).collect();
                trace::tokenizer_sha256(&t)
            }),
        _ => None,
    };
    Ok(Header {
        format: trace::FORMAT.into(),
        version: trace::VERSION,
        qtune_version: env!("CARGO_PKG_VERSION").into(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        upstream: shown,
        server: ServerInfo {
            build_info: props["build_info"].as_str().map(String::from),
            model_file: props["model_path"].as_str().and_then(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            }),
            slots: props["total_slots"].as_u64(),
            chat_template_sha256: props["chat_template"].as_str().map(sha),
            message_delimiters: props["chat_template"]
                .as_str()
                .and_then(trace::chat_message_delimiters),
        },
        model: ModelInfo {
            n_vocab: meta["n_vocab"].as_u64(),
            n_ctx: meta["n_ctx"]
                .as_u64()
                .or_else(|| props["default_generation_settings"]["n_ctx"].as_u64()),
            n_ctx_train: meta["n_ctx_train"].as_u64(),
            n_params: meta["n_params"].as_u64(),
            size_bytes: meta["size"].as_u64(),
        },
        tokenizer_sha256,
        scripted: None,
    })
}

/// The HTTP client the proxy forwards with: no system proxy (the upstream is local), no
/// overall timeout (a generation may take minutes), idle connections kept for 2 s (llama-server
/// closes one idle for 5 s).
pub fn client() -> Result<reqwest::Client> {
    client_with_pool(64)
}

/// `client()` with at most `idle` kept-alive connections (0: a fresh connection per request).
pub fn client_with_pool(idle: usize) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(idle)
        .build()
        .context("cannot set up the HTTP client")
}

/// The prompt as the server tokenized it: a chat request's messages rendered by the server's
/// own template (`/apply-template`, the same code path as the chat endpoint), then
/// `/tokenize` with the special tokens the completion endpoints add (`add_special`,
/// `parse_special`).
pub async fn prompt_tokens(
    client: &reqwest::Client,
    upstream: &str,
    endpoint: &str,
    body: &J,
) -> std::result::Result<Vec<u32>, String> {
    let chat = endpoint.ends_with("chat/completions");
    // Claude Code's Messages API and OpenAI's Responses API: the server renders them as the
    // chat request they convert to.
    let converted = if endpoint.ends_with("/messages") {
        Some(super::convert::anthropic_to_chat(body)?)
    } else if endpoint.ends_with("/responses") {
        Some(super::convert::responses_to_chat(body)?)
    } else {
        None
    };
    let prompt = if let Some(c) = &converted {
        let v = post_json(client, upstream, "/apply-template", c).await?;
        v.get("prompt")
            .cloned()
            .ok_or("the server's /apply-template answered no prompt")?
    } else if chat {
        let v = post_json(client, upstream, "/apply-template", body).await?;
        v.get("prompt")
            .cloned()
            .ok_or("the server's /apply-template answered no prompt")?
    } else {
        if !body.has("prompt") {
            return Err("the request has no prompt".into());
        }
        let p = body.at("prompt");
        let several = p.as_array().is_some_and(|items| {
            items.iter().any(|i| matches!(i, J::Arr(_) | J::Obj(_)))
                || (items.len() > 1 && items.iter().all(|i| matches!(i, J::Str(_))))
        });
        if several {
            return Err("several prompts in one request: not recorded".into());
        }
        serde_json::to_value(p).map_err(|e| e.to_string())?
    };
    let answer = post(
        client,
        upstream,
        "/tokenize",
        &serde_json::json!({"content": prompt, "add_special": true, "parse_special": true}),
        MAX_TOKENIZE_ANSWER,
    )
    .await?;
    token_ids(&answer)
}

/// The ids of a `/tokenize` answer, read straight into a `Vec<u32>` of at most
/// [`MAX_TOKENS`] (its other fields are skipped unread).
pub fn token_ids(answer: &[u8]) -> std::result::Result<Vec<u32>, String> {
    struct Ids(Vec<u32>);
    impl<'de> serde::Deserialize<'de> for Ids {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Ids;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a list of token ids")
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> std::result::Result<Ids, A::Error> {
                    use serde::de::Error;
                    let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                    while let Some(id) = seq.next_element::<u32>()? {
                        if ids.len() == MAX_TOKENS {
                            return Err(A::Error::custom(format!(
                                "more than {} tokens, past any context",
                                crate::util::fmt_thousands(MAX_TOKENS as f64)
                            )));
                        }
                        ids.push(id);
                    }
                    Ok(Ids(ids))
                }
            }
            d.deserialize_seq(Visit)
        }
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        tokens: Option<Ids>,
    }
    let a: Answer = serde_json::from_slice(answer)
        .map_err(|e| format!("the server's /tokenize answer: {e}"))?;
    a.tokens
        .map(|t| t.0)
        .ok_or_else(|| "the server's /tokenize answered no tokens".into())
}

pub async fn post_json<B: serde::Serialize + ?Sized>(
    client: &reqwest::Client,
    upstream: &str,
    path: &str,
    body: &B,
) -> std::result::Result<serde_json::Value, String> {
    let bytes = post(client, upstream, path, body, MAX_ANSWER).await?;
    serde_json::from_slice(&bytes).map_err(|e| format!("the server's {path} answer: {e}"))
}

/// POST `body` to `upstream` + `path`: the answer's bytes, at most `max` of them.
async fn post<B: serde::Serialize + ?Sized>(
    client: &reqwest::Client,
    upstream: &str,
    path: &str,
    body: &B,
    max: usize,
) -> std::result::Result<Vec<u8>, String> {
    // Twice at most: these calls change nothing, and one may meet a connection the server is
    // just closing.
    let send = || {
        client
            .post(format!("{upstream}{path}"))
            .json(body)
            .timeout(Duration::from_secs(120))
            .send()
    };
    let mut r = match send().await {
        Ok(r) => r,
        Err(_) => send()
            .await
            .map_err(|e| format!("the server's {path} did not answer: {e}"))?,
    };
    if !r.status().is_success() {
        return Err(format!("the server's {path} answered {}", r.status()));
    }
    let mut bytes = Vec::new();
    while let Some(c) = r
        .chunk()
        .await
        .map_err(|e| format!("the server's {path} broke off: {e}"))?
    {
        if bytes.len() + c.len() > max {
            return Err(format!(
                "the server's {path} answer is larger than {} MiB",
                max >> 20
            ));
        }
        bytes.extend_from_slice(&c);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_leave_the_url_shown() {
        let u = "http://user:p%40ss@127.0.0.1:8081";
        assert_eq!(without_credentials(u), "http://127.0.0.1:8081");
        assert_eq!(
            without_credentials("http://a:b@h:1/props?x=@"),
            "http://h:1/props?x=@"
        );
        assert_eq!(without_credentials("http://[::1]:80"), "http://[::1]:80");
        assert_eq!(without_credentials("u:p@host:1"), "host:1");
    }

    #[test]
    fn a_tokenize_answer_is_read_as_ids_up_to_a_bound_in_tokens() {
        let ok = token_ids(br#"{"tokens":[1,2,3],"other":{"x":[1,2]}}"#).unwrap();
        assert_eq!(ok, vec![1, 2, 3]);
        assert!(token_ids(br#"{"tokens":[1,-2]}"#).is_err());
        assert!(token_ids(br#"{"tokens":[4294967296]}"#).is_err());
        assert!(token_ids(br#"{"nothing":1}"#)
            .unwrap_err()
            .contains("no tokens"));
        // One id past the bound, under the byte bound: refused, never held as JSON values.
        let mut big = b"{\"tokens\":[".to_vec();
        for _ in 0..MAX_TOKENS {
            big.extend_from_slice(b"7,");
        }
        big.extend_from_slice(b"7]}");
        assert!(big.len() < MAX_TOKENIZE_ANSWER);
        let e = token_ids(&big).unwrap_err();
        assert!(e.contains("more than 2,097,152 tokens"), "{e}");
        big.truncate(big.len() - 4);
        big.extend_from_slice(b"]}");
        assert_eq!(token_ids(&big).unwrap().len(), MAX_TOKENS);
    }
}
