//! The recording proxy behind `qtune record`: an HTTP/1.1 server (hyper) that forwards every
//! request to the upstream llama-server unchanged and streams every answer back chunk by chunk
//! as it comes, and writes one trace line ([`super::trace::Request`]) per generation request.
//!
//! What it holds in memory is bounded: a request body of at most [`MAX_BODY`] bytes (else
//! 413), at most [`MAX_HELD`] bytes of request bodies for all connections together (room
//! taken as a body arrives, with a read deadline: see [`super::intake`]; a generation
//! request's body is kept until its prompt is tokenized, and parsed then, one at a time), at
//! most [`MAX_CONNECTIONS`] connections at once, the last [`intake::RESERVED`] of them only
//! for an address holding fewer than [`intake::LIGHT`], and [`intake::Limits::per_client`]
//! from one address (more are answered 503 at once), an answer kept for
//! reading its timings up to [`MAX_KEPT`] bytes and all answers together up to
//! [`MAX_KEPT_ALL`] (a stream's events are read as they pass, one event at a time), and at
//! most [`CHANNEL_CHUNKS`] chunks queued towards a slow client (the upstream waits for it).

use super::answer::{self, Observed, MAX_KEPT, MAX_KEPT_ALL};
use super::intake::{self, BodyError};
use super::trace::{self, Header, Line, Outcome, Request};
pub use super::trace_file::create_trace_file;
use super::trace_file::TraceWriter;
use super::upstream;
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::{header, HeaderMap, Response, StatusCode};
use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

/// The largest request body forwarded (a 100k-token agent prompt is well under 1 MiB of
/// JSON; images in base64 are larger).
pub const MAX_BODY: usize = 64 << 20;
/// The most JSON values a generation request's body may hold for the proxy to read it
/// (counted by their separators, an upper bound). Each value costs tens of bytes once parsed:
/// a 60 MiB prompt of 30 million token ids took 1 GiB. A body past this is forwarded as it
/// came and recorded without its prompt; a real prompt (a million tokens at most) is under it.
pub const MAX_BODY_VALUES: usize = 1 << 21;
/// The most request-body bytes held at once, all connections together (sixteen bodies of the
/// largest size; thousands of agent prompts).
pub const MAX_HELD: usize = 1 << 30;
/// The most client connections served at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Chunks queued towards one client before the upstream is made to wait.
pub const CHANNEL_CHUNKS: usize = 16;
/// How long a stop waits for requests in flight to finish.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The paths whose requests generate tokens, and are recorded.
const GENERATION_PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/completion",
    // Claude Code's (the Anthropic Messages API) and the OpenAI Responses API: the server
    // renders both through its chat template.
    "/v1/messages",
    "/v1/responses",
    "/responses",
];

/// The last path segments of requests that look like generation (`POST .../completions`,
/// `.../messages`, ...): one of these on a path not in [`GENERATION_PATHS`] is forwarded
/// unrecorded, and the recorder says so.
const GENERATION_LIKE: &[&str] = &[
    "completions",
    "completion",
    "messages",
    "responses",
    "generate",
    "infill",
    "chat",
];

/// Whether a POST to `path` looks like a generation request that is not recorded.
fn generation_like(path: &str) -> bool {
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    GENERATION_LIKE.contains(&last) && !GENERATION_PATHS.contains(&path)
}

/// Headers that belong to one hop (RFC 9110 §7.6.1) and are not forwarded, plus `host` (the
/// upstream's is set from its URL) and `content-length` (set from the body forwarded).
const HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

type ProxyBody = BoxBody<Bytes, std::io::Error>;

/// What `qtune record` was asked to do.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The upstream llama-server, e.g. `http://127.0.0.1:8081` (no trailing slash).
    pub upstream: String,
    pub listen: std::net::SocketAddr,
    pub out: std::path::PathBuf,
    /// The most request-body bytes held at once ([`MAX_HELD`] for `qtune record`).
    pub held_bytes: usize,
    /// Deadlines and the per-client cap (the defaults for `qtune record`).
    pub limits: intake::Limits,
}

/// What a finished recording did.
#[derive(Debug, Clone)]
pub struct RecordSummary {
    pub requests: u64,
    pub interrupted: u64,
    pub other_requests: u64,
    /// Of the other requests, those that looked like generation ([`generation_like`]) and
    /// were forwarded unrecorded: how many, and their paths (the first [`MAX_NAMED`]).
    pub unrecorded: u64,
    pub unrecorded_paths: Vec<String>,
}

/// The most distinct unrecorded paths a recording names.
const MAX_NAMED: usize = 8;

/// A request between its arrival and its trace line.
struct InFlight {
    line: Request,
    overlapped: BTreeSet<u64>,
    /// Set when its answer ended (later arrivals no longer overlap it).
    ended: bool,
}

struct State {
    upstream: String,
    /// The upstream as printed: without credentials.
    shown: String,
    client: reqwest::Client,
    /// The second try of a request whose kept-alive connection failed: a fresh connection.
    fresh: reqwest::Client,
    started: Instant,
    next_id: AtomicU64,
    other_requests: AtomicU64,
    /// Generation-looking requests forwarded unrecorded: their count and first paths.
    unrecorded: Mutex<(u64, Vec<String>)>,
    inflight: Mutex<BTreeMap<u64, InFlight>>,
    out: Mutex<TraceWriter>,
    /// Room for request bodies (see [`MAX_HELD`]).
    room: intake::Room,
    limits: intake::Limits,
    /// Room for answers kept to read their timings (see [`MAX_KEPT_ALL`]).
    kept: answer::Room,
    /// Prompts are parsed and tokenized one at a time (a parsed body costs more than its bytes).
    tokenizing: tokio::sync::Mutex<()>,
}

impl State {
    fn now_ms(&self) -> f64 {
        // Microsecond resolution is plenty, and keeps the trace short.
        (self.started.elapsed().as_secs_f64() * 1e6).round() / 1000.0
    }
}

/// Run the proxy until `stop` resolves (a first SIGINT/SIGTERM), then finish the requests in
/// flight (up to [`DRAIN`], or until `stop_now` resolves), mark the rest interrupted, write the
/// end line and return. `on_ready` is called once the port is bound.
pub async fn run(
    opts: &RecordOptions,
    file: std::fs::File,
    header: Header,
    client: reqwest::Client,
    stop: impl std::future::Future<Output = ()>,
    stop_now: impl std::future::Future<Output = ()>,
    on_ready: impl FnOnce(std::net::SocketAddr),
) -> Result<RecordSummary> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another server using that port? choose another --listen",
                opts.listen
            )
        })?;
    let mut writer = TraceWriter {
        file,
        path: opts.out.clone(),
        requests: 0,
        interrupted: 0,
        failed: None,
    };
    writer.write(&Line::Header(Box::new(header)));
    if let Some(e) = &writer.failed {
        anyhow::bail!("cannot write the trace {}: {e}", opts.out.display());
    }
    let state = Arc::new(State {
        upstream: opts.upstream.clone(),
        shown: upstream::without_credentials(&opts.upstream),
        client,
        fresh: upstream::client_with_pool(0)?,
        started: Instant::now(),
        next_id: AtomicU64::new(1),
        other_requests: AtomicU64::new(0),
        unrecorded: Mutex::new((0, Vec::new())),
        inflight: Mutex::new(BTreeMap::new()),
        out: Mutex::new(writer),
        room: intake::Room::new(opts.held_bytes),
        limits: opts.limits,
        kept: answer::Room::new(MAX_KEPT_ALL),
        tokenizing: tokio::sync::Mutex::new(()),
    });
    on_ready(listener.local_addr().unwrap_or(opts.listen));
    let clients = intake::Clients::default();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            a = listener.accept() => a,
        };
        let (stream, from) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait and go on.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let counted = match clients.admit(from.ip(), state.limits.per_client, MAX_CONNECTIONS) {
            Ok(c) => c,
            Err(why) => {
                tokio::spawn(intake::refuse(stream, why));
                continue;
            }
        };
        let st = state.clone();
        tokio::spawn(async move {
            let idle = st.limits.header_idle;
            let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(idle)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            drop(counted);
        });
    }
    drop(listener);
    // Finish what is in flight, up to DRAIN or a second signal.
    let drain = async {
        let deadline = Instant::now() + DRAIN;
        while Instant::now() < deadline && !state.inflight.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        _ = drain => {},
        _ = stop_now => {},
    }
    let now = state.now_ms();
    let left: Vec<InFlight> = std::mem::take(&mut *state.inflight.lock().unwrap())
        .into_values()
        .collect();
    let mut w = state.out.lock().unwrap();
    for mut f in left {
        if f.ended {
            f.line.note = Some("the recorder stopped before the prompt was tokenized".into());
        } else {
            f.line.outcome = Outcome::Interrupted;
            f.line.ended_ms = now;
            f.line.note = Some("the recorder stopped before the answer ended".into());
        }
        f.line.overlapped = f.overlapped.into_iter().collect();
        w.write(&Line::Request(Box::new(f.line)));
    }
    let other = state.other_requests.load(Ordering::Relaxed);
    let end = trace::End {
        ended_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        requests: w.requests,
        interrupted: w.interrupted,
        other_requests: other,
    };
    w.write(&Line::End(end));
    let _ = w.file.sync_all();
    if let Some(e) = &w.failed {
        anyhow::bail!("the trace {} is incomplete: {e}", w.path.display());
    }
    let (unrecorded, unrecorded_paths) = state.unrecorded.lock().unwrap().clone();
    Ok(RecordSummary {
        requests: w.requests,
        interrupted: w.interrupted,
        other_requests: other,
        unrecorded,
        unrecorded_paths,
    })
}

fn plain(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({"error": {"code": status.as_u16(), "message": message, "type": "qtune_record_error"}});
    let mut r = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn forwarded_headers(from: &HeaderMap) -> HeaderMap {
    // Also drop the headers the `connection` header names as hop-by-hop.
    let named: Vec<String> = from
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::new();
    for (k, v) in from {
        let name = k.as_str();
        if HOP_HEADERS.contains(&name) || named.iter().any(|n| n == name) {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// What a generation request asked for, read from its body.
struct Asked {
    endpoint: String,
    /// The body as it came, parsed only when its prompt is tokenized; it holds its room in
    /// [`State::room`] until then.
    body: Bytes,
    _held: intake::Held,
    stream: bool,
    max_tokens: Option<i64>,
    /// The sampling it asked for (`temperature`, `top_p`), where it sent a number.
    temperature: Option<f64>,
    top_p: Option<f64>,
    /// Why its body was not read, when it was not (see [`MAX_BODY_VALUES`]).
    unread: Option<String>,
}

/// The fields of a generation request read on its way (any type: a wrong one reads as absent).
#[derive(Default, serde::Deserialize)]
struct Head {
    stream: Option<serde_json::Value>,
    max_tokens: Option<serde_json::Value>,
    max_completion_tokens: Option<serde_json::Value>,
    /// The Responses API's limit.
    max_output_tokens: Option<serde_json::Value>,
    n_predict: Option<serde_json::Value>,
    temperature: Option<serde_json::Value>,
    top_p: Option<serde_json::Value>,
}

/// An upper bound of the JSON values in `body`: its separators and openings. Counted only
/// for a body over 1 MiB (a smaller one parses into tens of MiB at most).
fn too_many_values(body: &[u8]) -> bool {
    body.len() > 1 << 20
        && body
            .iter()
            .filter(|b| matches!(b, b',' | b':' | b'[' | b'{'))
            .count()
            > MAX_BODY_VALUES
}

async fn handle(
    state: Arc<State>,
    req: hyper::Request<Incoming>,
) -> std::result::Result<Response<ProxyBody>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let too_large = || {
        plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("qtune record: the request body is over {MAX_BODY} bytes"),
        )
    };
    // A body declared too large is refused before any of it is read.
    let hint = body.size_hint();
    if hint.lower() > MAX_BODY as u64 {
        return Ok(too_large());
    }
    // Room for the body is taken as it arrives, within its read deadline.
    let (body, held) =
        match intake::read_body(body, &state.room, &state.limits, MAX_BODY).await {
            Ok(b) => b,
            Err(BodyError::TooLarge) => return Ok(too_large()),
            Err(BodyError::TimedOut) => {
                return Ok(plain(
                    StatusCode::REQUEST_TIMEOUT,
                    "qtune record: the request body stopped coming",
                ))
            }
            Err(BodyError::NoRoom) => return Ok(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "qtune record: no room for the request body now (other bodies fill it); try again",
            )),
            Err(BodyError::Broken(e)) => {
                return Ok(plain(
                    StatusCode::BAD_REQUEST,
                    &format!("qtune record: cannot read the request body: {e}"),
                ))
            }
        };
    // A generation request's room goes with its body to its trace line; another's is given
    // back when this returns (its body sent on).
    let mut held = Some(held);
    let path = parts.uri.path().to_string();
    let path_q = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| path.clone());
    let asked = (parts.method == hyper::Method::POST && GENERATION_PATHS.contains(&path.as_str()))
        .then(|| {
            let unread = too_many_values(&body).then(|| {
                format!(
                    "its body holds more than {} JSON values: qtune did not read it (its prompt is not recorded)",
                    crate::util::fmt_thousands(MAX_BODY_VALUES as f64)
                )
            });
            // The few fields read now; the rest is skipped (never parsed into memory).
            let v: Head = serde_json::from_slice(&body).unwrap_or_default();
            let int = |f: &Option<serde_json::Value>| f.as_ref().and_then(|v| v.as_i64());
            // A finite number as sent (a string or an absurd value reads as absent).
            let number = |f: &Option<serde_json::Value>| {
                f.as_ref()
                    .and_then(|v| v.as_f64())
                    .filter(|x| x.is_finite() && (0.0..=1e6).contains(x))
            };
            Asked {
                unread,
                endpoint: path.clone(),
                stream: v.stream.and_then(|s| s.as_bool()).unwrap_or(false),
                max_tokens: int(&v.max_tokens)
                    .or_else(|| int(&v.max_completion_tokens))
                    .or_else(|| int(&v.max_output_tokens))
                    .or_else(|| int(&v.n_predict)),
                temperature: number(&v.temperature),
                top_p: number(&v.top_p),
                body: body.clone(),
                _held: held.take().expect("taken once"),
            }
        });
    let id = match &asked {
        Some(a) => Some(register(&state, a)),
        None => {
            state.other_requests.fetch_add(1, Ordering::Relaxed);
            if parts.method == hyper::Method::POST && generation_like(&path) {
                note_unrecorded(&state, &path);
            }
            None
        }
    };
    let mut headers = forwarded_headers(&parts.headers);
    // Answers are read on the way through: ask for them uncompressed.
    headers.remove(header::ACCEPT_ENCODING);
    let send = |client: &reqwest::Client| {
        client
            .request(parts.method.clone(), format!("{}{path_q}", state.upstream))
            .headers(headers.clone())
            .body(body.clone())
            .send()
    };
    // llama-server may close a kept-alive connection (when idle, when the thread that served
    // it ends) just as a request is sent on it; the request then fails with no answer, and
    // the server, which lost the connection, has not generated for it. One more try, on a
    // fresh connection, so the client never sees a 502 the server did not cause.
    let sent = match send(&state.client).await {
        Err(e) if !e.is_timeout() => {
            tracing::debug!(
                "upstream request failed ({e}); trying once more on a fresh connection"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            send(&state.fresh).await
        }
        r => r,
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            let msg = format!(
                "qtune record: the upstream {} did not answer: {e}",
                state.shown
            );
            if let (Some(id), Some(a)) = (id, asked) {
                let st = state.clone();
                tokio::spawn(async move {
                    finish(
                        &st,
                        id,
                        a,
                        None,
                        Observed::within(&st.kept),
                        Outcome::UpstreamFailed,
                    )
                    .await
                });
            }
            return Ok(plain(StatusCode::BAD_GATEWAY, &msg));
        }
    };
    let status = resp.status();
    let mut out = Response::builder().status(status);
    if let Some(h) = out.headers_mut() {
        *h = forwarded_headers(resp.headers());
        if let Some(len) = resp.headers().get(header::CONTENT_LENGTH) {
            h.insert(header::CONTENT_LENGTH, len.clone());
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_CHUNKS);
    let st = state.clone();
    tokio::spawn(pump(st, resp, tx, id.zip(asked)));
    let body = ChannelBody { rx }.boxed();
    Ok(out
        .body(body)
        .unwrap_or_else(|_| plain(StatusCode::BAD_GATEWAY, "qtune record: bad upstream header")))
}

/// Count a generation-looking request forwarded unrecorded; the first of each path (up to
/// [`MAX_NAMED`]) is said at once.
fn note_unrecorded(state: &State, path: &str) {
    let mut u = state.unrecorded.lock().unwrap();
    u.0 += 1;
    if u.1.len() < MAX_NAMED && !u.1.iter().any(|p| p == path) {
        u.1.push(path.to_string());
        eprintln!(
            "qtune: warning: POST {} looks like generation: forwarded, not recorded",
            crate::escape::terminal(path)
        );
    }
}

/// Register a generation request as in flight: its id, and the overlaps both ways.
fn register(state: &State, a: &Asked) -> u64 {
    let mut map = state.inflight.lock().unwrap();
    // Under the lock: ids are given in arrival order.
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    let arrived_ms = state.now_ms();
    let mut overlapped = BTreeSet::new();
    for (other, f) in map.iter_mut() {
        if !f.ended {
            f.overlapped.insert(id);
            overlapped.insert(*other);
        }
    }
    map.insert(
        id,
        InFlight {
            line: Request {
                id,
                endpoint: a.endpoint.clone(),
                stream: a.stream,
                arrived_ms,
                first_byte_ms: None,
                ended_ms: arrived_ms,
                overlapped: Vec::new(),
                status: None,
                outcome: Outcome::Interrupted,
                prompt_tokens: None,
                n_generated: None,
                max_tokens: a.max_tokens,
                temperature: a.temperature,
                top_p: a.top_p,
                timings: None,
                answer_tokens: None,
                note: None,
            },
            overlapped,
            ended: false,
        },
    );
    id
}

/// Copy the upstream's answer to the client chunk by chunk, reading it on the way; then
/// finish the trace line.
async fn pump(
    state: Arc<State>,
    mut resp: reqwest::Response,
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    rec: Option<(u64, Asked)>,
) {
    let stream = rec.as_ref().is_some_and(|(_, a)| a.stream);
    let mut seen = Observed::within(&state.kept);
    seen.status = Some(resp.status().as_u16());
    let ok = resp.status().is_success();
    let outcome = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if rec.is_some() {
                    if seen.first_byte_ms.is_none() {
                        seen.first_byte_ms = Some(state.now_ms());
                    }
                    seen.feed(stream, &chunk);
                }
                if tx.send(Ok(chunk)).await.is_err() {
                    break Outcome::ClientGone;
                }
            }
            Ok(None) => break if ok { Outcome::Ok } else { Outcome::HttpError },
            Err(e) => {
                let _ = tx
                    .send(Err(std::io::Error::other(format!("upstream: {e}"))))
                    .await;
                break Outcome::UpstreamFailed;
            }
        }
    };
    drop(resp);
    drop(tx);
    if let Some((id, asked)) = rec {
        seen.end(stream);
        finish(&state, id, asked, seen.status, seen, outcome).await;
    }
}

/// Close a request's trace line: its end, what was observed, and its prompt tokens (asked of
/// the upstream after the answer, so the recording never delays it).
async fn finish(
    state: &State,
    id: u64,
    asked: Asked,
    status: Option<u16>,
    seen: Observed,
    outcome: Outcome,
) {
    let counted = seen.prompt_counted;
    let answer_text = seen.text.clone().filter(|t| !t.is_empty());
    {
        let mut map = state.inflight.lock().unwrap();
        let Some(f) = map.get_mut(&id) else {
            return;
        };
        f.ended = true;
        f.line.ended_ms = state.now_ms();
        f.line.first_byte_ms = seen.first_byte_ms;
        f.line.status = status;
        f.line.outcome = outcome;
        f.line.timings = seen.timings;
        f.line.n_generated = seen.n_generated;
        if seen.overflow {
            f.line.note = Some(format!(
                "the answer (or one of its events) was over {MAX_KEPT} bytes: its timings were not read"
            ));
        }
    }
    let tokens = match status {
        _ if asked.unread.is_some() => Err(asked.unread.clone().unwrap_or_default()),
        Some(s) if (200..300).contains(&s) => {
            let _one_at_a_time = state.tokenizing.lock().await;
            // Read with its keys in their order: the body the server rendered.
            // A body the server read but serde does not (nested past its 128 levels, say)
            // is named as such, not as a body without messages.
            match serde_json::from_slice::<super::ordered::J>(&asked.body) {
                Err(e) => Err(format!(
                    "qtune cannot read its body as JSON ({e}): its prompt is not recorded"
                )),
                Ok(body) => {
                    upstream::prompt_tokens(&state.client, &state.upstream, &asked.endpoint, &body)
                        .await
                }
            }
            .and_then(|t| match counted {
                // The server's own count of the prompt it read: a rendering that differs
                // is not this request's prompt.
                Some(n) if n != t.len() as u64 => Err(format!(
                    "the server read a prompt of {n} tokens, qtune rendered {}: its prompt \
                         is not recorded",
                    t.len()
                )),
                _ => Ok(t),
            })
        }
        Some(s) => Err(format!(
            "the server answered {s}: its prompt was not tokenized"
        )),
        None => Err("the upstream did not answer: its prompt was not tokenized".into()),
    };
    // The answer's tokens (issue 54), asked after the answer ended, where its prompt's are.
    let answer = match (&tokens, outcome, answer_text) {
        (Ok(_), Outcome::Ok, Some(text)) => {
            let _one_at_a_time = state.tokenizing.lock().await;
            Some(super::answers::tokenize(&state.client, &state.upstream, &text).await)
        }
        _ => None,
    };
    let mut map = state.inflight.lock().unwrap();
    let Some(mut f) = map.remove(&id) else {
        return;
    };
    drop(map);
    if let Some(Err(why)) = &answer {
        f.line.note = Some(format!("its answer was not tokenized: {why}"));
    }
    f.line.answer_tokens = answer.and_then(Result::ok);
    match tokens {
        Ok(t) => f.line.prompt_tokens = Some(t),
        Err(why) => {
            f.line.note = Some(match f.line.note.take() {
                Some(n) => format!("{n}; {why}"),
                None => why,
            })
        }
    }
    f.line.overlapped = f.overlapped.into_iter().collect();
    state
        .out
        .lock()
        .unwrap()
        .write(&Line::Request(Box::new(f.line)));
}

/// A response body fed chunk by chunk from the pump task: each chunk goes to the client as it
/// comes (no buffering to the end).
struct ChannelBody {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_headers_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, x-hop".parse().unwrap());
        h.insert("x-hop", "1".parse().unwrap());
        h.insert("authorization", "Bearer k".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        let f = forwarded_headers(&h);
        assert_eq!(f.len(), 1);
        assert!(f.contains_key("authorization"));
    }

    /// Read one HTTP request (head and a Content-Length body) from `s`; false at end of stream.
    fn read_request(s: &mut std::net::TcpStream) -> bool {
        use std::io::Read;
        let mut buf = Vec::new();
        let mut b = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(1) => buf.push(b[0]),
                _ => return false,
            }
        }
        let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).is_ok()
    }

    type Proxy = std::thread::JoinHandle<std::result::Result<(), String>>;

    /// A proxy towards `up_port` with room for `held_bytes` of request bodies, writing its trace
    /// in `dir`: its address, its stop, and its thread.
    fn start(
        dir: &std::path::Path,
        up_port: u16,
        held_bytes: usize,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        Proxy,
    ) {
        start_with(dir, up_port, held_bytes, intake::Limits::default())
    }

    /// `start` with `limits`.
    fn start_with(
        dir: &std::path::Path,
        up_port: u16,
        held_bytes: usize,
        limits: intake::Limits,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        Proxy,
    ) {
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let opts = RecordOptions {
            upstream: format!("http://127.0.0.1:{up_port}"),
            listen,
            out: dir.join("t.jsonl"),
            held_bytes,
            limits,
        };
        let header = Header {
            format: crate::traffic::trace::FORMAT.to_string(),
            version: crate::traffic::trace::VERSION,
            qtune_version: "test".into(),
            started_at: "2026-11-26T00:00:00Z".into(),
            upstream: opts.upstream.clone(),
            server: Default::default(),
            model: Default::default(),
            tokenizer_sha256: None,
            scripted: None,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let file = std::fs::File::create(&opts.out).unwrap();
        let proxy = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(
                &opts,
                file,
                header,
                upstream::client().unwrap(),
                async {
                    stop_rx.await.ok();
                },
                std::future::pending(),
                move |a| ready_tx.send(a).unwrap(),
            ))
            .map(|_| ())
            .map_err(|e| e.to_string())
        });
        let addr = ready_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        (addr, stop_tx, proxy)
    }

    #[test]
    fn a_request_on_a_connection_the_server_drops_is_sent_again_on_a_fresh_one() {
        use std::io::{Read, Write};
        // The upstream answers the first request on a kept-alive connection, then reads the
        // second request on it and closes it unanswered (as llama-server may when the thread
        // serving that connection ends). Every later connection is answered.
        let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up_port = up.local_addr().unwrap().port();
        let upstream = std::thread::spawn(move || {
            let ok =
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
            let (mut first, _) = up.accept().unwrap();
            assert!(read_request(&mut first));
            first.write_all(ok).unwrap();
            assert!(read_request(&mut first));
            drop(first);
            let (mut second, _) = up.accept().unwrap();
            assert!(read_request(&mut second));
            second.write_all(ok).unwrap();
        });
        let dir = tempfile::tempdir().unwrap();
        let (addr, stop_tx, proxy) = start(dir.path(), up_port, MAX_HELD);
        let get = |path: &str| {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            write!(
                c,
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut answer = String::new();
            c.read_to_string(&mut answer).unwrap();
            answer
        };
        let a = get("/v1/models");
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        let b = get("/v1/models");
        assert!(b.starts_with("HTTP/1.1 200"), "the second request: {b}");
        upstream.join().unwrap();
        stop_tx.send(()).unwrap();
        proxy.join().unwrap().unwrap();
    }

    /// Request bodies are bounded for all connections together: with room for 64 KiB, a second
    /// 40 KiB generation request waits (unread, not sent on) until the first one's trace line
    /// is done, then goes through.
    #[test]
    fn bodies_past_the_room_for_all_connections_wait_their_turn() {
        use std::io::{Read, Write};
        use std::sync::mpsc;
        let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up_port = up.local_addr().unwrap().port();
        let (arrived_tx, arrived) = mpsc::channel::<()>();
        let (release, released) = mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(released));
        std::thread::spawn(move || {
            for (n, conn) in up.incoming().enumerate() {
                let (arrived_tx, released) = (arrived_tx.clone(), released.clone());
                std::thread::spawn(move || {
                    let mut c = conn.unwrap();
                    if !read_request(&mut c) {
                        return;
                    }
                    arrived_tx.send(()).unwrap();
                    if n == 0 {
                        released.lock().unwrap().recv().unwrap();
                    }
                    let _ = c.write_all(
                        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                    );
                });
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let (addr, stop_tx, proxy) = start(dir.path(), up_port, 64 << 10);
        let post = move || {
            let body = format!("{{\"prompt\":\"{}\"}}", "a".repeat(40 << 10));
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            write!(
                c,
                "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut answer = String::new();
            c.read_to_string(&mut answer).unwrap();
            answer
        };
        let wait = std::time::Duration::from_secs(30);
        let first = std::thread::spawn(post);
        arrived
            .recv_timeout(wait)
            .expect("the first request reaches the upstream");
        let second = std::thread::spawn(post);
        assert!(
            arrived
                .recv_timeout(std::time::Duration::from_millis(1500))
                .is_err(),
            "the second body was taken in while the first held the room"
        );
        release.send(()).unwrap();
        assert!(first.join().unwrap().starts_with("HTTP/1.1 500"));
        arrived
            .recv_timeout(wait)
            .expect("the second goes through once there is room");
        assert!(second.join().unwrap().starts_with("HTTP/1.1 500"));
        stop_tx.send(()).unwrap();
        proxy.join().unwrap().unwrap();
    }

    /// Issue 53: a body that stops coming is answered 408 once its idle time is over (it
    /// waited forever at 8dab55a), while other requests are answered meanwhile.
    #[test]
    fn a_body_that_stops_coming_is_answered_408() {
        use std::io::{Read, Write};
        let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up_port = up.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in up.incoming() {
                std::thread::spawn(move || {
                    let mut c = conn.unwrap();
                    while read_request(&mut c) {
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
                    }
                });
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let limits = intake::Limits {
            body_idle: Duration::from_secs(1),
            ..Default::default()
        };
        let (addr, stop_tx, proxy) = start_with(dir.path(), up_port, MAX_HELD, limits);
        let t0 = Instant::now();
        let mut stalled = std::net::TcpStream::connect(addr).unwrap();
        write!(
            stalled,
            "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{{",
            64 << 20
        )
        .unwrap();
        let mut other = std::net::TcpStream::connect(addr).unwrap();
        write!(
            other,
            "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        other.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        stalled
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut head = [0u8; 12];
        stalled.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 408", "after {:?}", t0.elapsed());
        assert!(t0.elapsed() >= Duration::from_secs(1));
        stop_tx.send(()).unwrap();
        proxy.join().unwrap().unwrap();
    }
}
