//! `qtune trace show`: what a recorded session did to the server. Requests, sessions (chains
//! of prompts that extend or diverge from an earlier one), where each prompt diverged from
//! the longest earlier one, cached vs re-read tokens (the server's own timings), overlap and
//! generated tokens. Derived from the trace alone; prompts' text and tokens are never printed.

use super::trace::{prefix_links, Outcome, Trace};
use serde::Serialize;

/// A prompt joins the session of the earlier prompt it shares the longest prefix with when
/// they share at least this fraction of the shorter one (a shared system prompt alone, short
/// next to both, does not make one session).
pub const SESSION_SHARE: f64 = 0.5;

/// One request, as `trace show` sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RequestView {
    pub id: u64,
    pub endpoint: String,
    pub stream: bool,
    pub outcome: Outcome,
    /// 1, 2, ...: sessions numbered by their first request.
    pub session: usize,
    /// The request's place in its session's chain: 1 for the first.
    pub turn: usize,
    pub arrived_ms: f64,
    pub duration_ms: f64,
    /// Prompt tokens (the context depth the request runs at); None when not recorded.
    pub prompt_tokens: Option<usize>,
    /// The earlier request sharing the longest prefix with this one, and that length.
    pub parent: Option<u64>,
    pub common_prefix: Option<usize>,
    /// True when the prompt holds all of its parent's prompt (the cache can be reused whole).
    pub extends_parent: bool,
    /// From the server's timings.
    pub cached: Option<u64>,
    pub reread: Option<u64>,
    /// Tokens re-read beyond those after the common prefix (a checkpoint rollback, an evicted
    /// cache or another slot).
    pub reread_beyond_divergence: Option<u64>,
    pub generated: Option<u64>,
    /// The ids of the requests in flight with it.
    pub overlapped: Vec<u64>,
}

/// The whole trace, summed up.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub requests: usize,
    pub ok: usize,
    pub not_ok: usize,
    pub sessions: usize,
    pub span_ms: f64,
    pub max_concurrent: usize,
    /// The mean number of requests in flight while at least one was.
    pub mean_concurrent: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub reread_tokens: u64,
    pub reread_beyond_divergence: u64,
    pub generated_tokens: u64,
    /// Requests whose prompt tokens were not recorded.
    pub without_tokens: usize,
    /// True when the trace has its end line (the recorder stopped cleanly).
    pub complete: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Shown {
    pub summary: Summary,
    pub requests: Vec<RequestView>,
}

/// Analyse a checked trace.
pub fn analyse(t: &Trace) -> Shown {
    let prompts: Vec<Option<&[u32]>> = t
        .requests
        .iter()
        .map(|r| r.prompt_tokens.as_deref())
        .collect();
    let links = prefix_links(&prompts);
    let mut session_of: Vec<usize> = Vec::with_capacity(t.requests.len());
    let mut turn_of: Vec<usize> = Vec::with_capacity(t.requests.len());
    let mut sessions = 0usize;
    let mut views = Vec::with_capacity(t.requests.len());
    for (i, r) in t.requests.iter().enumerate() {
        let len = prompts[i].map(|p| p.len());
        let joined = links[i].filter(|&(j, n)| {
            let shorter = len
                .unwrap_or(0)
                .min(prompts[j].map_or(0, |p| p.len()))
                .max(1);
            n as f64 >= SESSION_SHARE * shorter as f64
        });
        let (session, turn) = match joined {
            Some((j, _)) => (session_of[j], turn_of[j] + 1),
            None => {
                sessions += 1;
                (sessions, 1)
            }
        };
        session_of.push(session);
        turn_of.push(turn);
        let link = links[i];
        let parent_len = link.and_then(|(j, _)| prompts[j].map(|p| p.len()));
        let beyond = match (&r.timings, len) {
            (Some(tm), Some(l)) => {
                let needed = (l - link.map_or(0, |(_, n)| n)) as u64;
                Some(tm.prompt_n.saturating_sub(needed))
            }
            _ => None,
        };
        views.push(RequestView {
            id: r.id,
            endpoint: r.endpoint.clone(),
            stream: r.stream,
            outcome: r.outcome,
            session,
            turn,
            arrived_ms: r.arrived_ms,
            duration_ms: r.ended_ms - r.arrived_ms,
            prompt_tokens: len,
            parent: link.map(|(j, _)| t.requests[j].id),
            common_prefix: link.map(|(_, n)| n),
            extends_parent: matches!((link, parent_len), (Some((_, n)), Some(pl)) if n == pl),
            cached: r.timings.map(|t| t.cache_n),
            reread: r.timings.map(|t| t.prompt_n),
            reread_beyond_divergence: beyond,
            generated: r.n_generated,
            overlapped: r.overlapped.clone(),
        });
    }
    let (max_c, mean_c) = concurrency(t);
    let span = match (
        t.requests.first(),
        t.requests.iter().map(|r| r.ended_ms).reduce(f64::max),
    ) {
        (Some(f), Some(e)) => e - f.arrived_ms,
        _ => 0.0,
    };
    let sum = |f: &dyn Fn(&RequestView) -> Option<u64>| views.iter().filter_map(f).sum::<u64>();
    let summary = Summary {
        requests: views.len(),
        ok: views.iter().filter(|v| v.outcome == Outcome::Ok).count(),
        not_ok: views.iter().filter(|v| v.outcome != Outcome::Ok).count(),
        sessions,
        span_ms: span,
        max_concurrent: max_c,
        mean_concurrent: mean_c,
        prompt_tokens: sum(&|v| v.prompt_tokens.map(|n| n as u64)),
        cached_tokens: sum(&|v| v.cached),
        reread_tokens: sum(&|v| v.reread),
        reread_beyond_divergence: sum(&|v| v.reread_beyond_divergence),
        generated_tokens: sum(&|v| v.generated),
        without_tokens: views.iter().filter(|v| v.prompt_tokens.is_none()).count(),
        complete: t.end.is_some(),
    };
    Shown {
        summary,
        requests: views,
    }
}

/// (most requests in flight at once, their mean while any was): a sweep over arrivals and
/// ends.
fn concurrency(t: &Trace) -> (usize, f64) {
    let mut events: Vec<(f64, i32)> = Vec::with_capacity(2 * t.requests.len());
    for r in &t.requests {
        events.push((r.arrived_ms, 1));
        events.push((r.ended_ms, -1));
    }
    // Ends before arrivals at the same instant: back-to-back requests do not overlap.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max, mut busy, mut area) = (0i32, 0i32, 0.0f64, 0.0f64);
    let mut last = 0.0f64;
    for (at, d) in events {
        if now > 0 {
            busy += at - last;
            area += (at - last) * f64::from(now);
        }
        now += d;
        max = max.max(now);
        last = at;
    }
    let mean = if busy > 0.0 {
        area / busy
    } else {
        f64::from(max.min(1))
    };
    (max.max(0) as usize, mean)
}

fn n(v: u64) -> String {
    crate::util::fmt_thousands(v as f64)
}

fn opt(v: Option<u64>) -> String {
    v.map(n).unwrap_or_else(|| "-".into())
}

/// The text `trace show` prints.
pub fn render(t: &Trace, s: &Shown, name: &str) -> String {
    use std::fmt::Write as _;
    let h = &t.header;
    let m = &s.summary;
    let mut o = String::new();
    let name = crate::escape::terminal(name);
    match &h.scripted {
        Some(what) => writeln!(
            o,
            "trace {name}: {}, rendered {} by qtune {} through {} (scripted, not run: no \
             timings)",
            crate::escape::terminal(what),
            crate::escape::terminal(&h.started_at),
            crate::escape::terminal(&h.qtune_version),
            crate::escape::terminal(&h.upstream)
        ),
        None => writeln!(
            o,
            "trace {name}: recorded {} by qtune {} from {}",
            crate::escape::terminal(&h.started_at),
            crate::escape::terminal(&h.qtune_version),
            crate::escape::terminal(&h.upstream)
        ),
    }
    .ok();
    let _ = writeln!(
        o,
        "model: {} (context {} tokens per slot, {})",
        crate::escape::terminal(h.server.model_file.as_deref().unwrap_or("unknown")),
        opt(h.model.n_ctx),
        match h.server.slots {
            Some(1) => "1 slot".to_string(),
            v => format!("{} slots", opt(v)),
        }
    );
    let _ = writeln!(
        o,
        "{} requests ({} ok{}) over {}, in {} session{}{}",
        m.requests,
        m.ok,
        if m.not_ok > 0 {
            format!(", {} not", m.not_ok)
        } else {
            String::new()
        },
        if m.span_ms < 60_000.0 {
            format!("{:.1}s", m.span_ms / 1000.0)
        } else {
            crate::util::duration_text(m.span_ms / 1000.0)
        },
        m.sessions,
        if m.sessions == 1 { "" } else { "s" },
        if m.complete {
            ""
        } else {
            " (no end line: the recorder did not stop cleanly; the trace holds what it finished)"
        }
    );
    let _ = writeln!(
        o,
        "concurrency: at most {} at once, {:.2} on average while any ran",
        m.max_concurrent, m.mean_concurrent
    );
    let pct = |a: u64, b: u64| {
        if b == 0 {
            "0 %".to_string()
        } else {
            format!("{:.0} %", 100.0 * a as f64 / b as f64)
        }
    };
    if h.scripted.is_some() {
        let _ = writeln!(
            o,
            "prompt tokens: {} in all (not run: what the cache reuses shows when it is replayed)",
            n(m.prompt_tokens)
        );
    } else {
        let _ = writeln!(
            o,
            "prompt tokens: {} in all; the server reused {} from its cache ({}) and read {}",
            n(m.prompt_tokens),
            n(m.cached_tokens),
            pct(m.cached_tokens, m.cached_tokens + m.reread_tokens),
            n(m.reread_tokens)
        );
    }
    if m.reread_beyond_divergence > 0 {
        let _ = writeln!(
            o,
            "re-read beyond the divergence: {} tokens the common prefix did not need \
             (a checkpoint rollback, an evicted cache or another slot)",
            n(m.reread_beyond_divergence)
        );
    }
    let _ = writeln!(o, "generated tokens: {}", n(m.generated_tokens));
    if let Some(sampling) = crate::traffic::trace::client_sampling(t) {
        let _ = writeln!(
            o,
            "{}",
            crate::util::wrap(
                &format!("client sampling: {sampling} (a replay is greedy: temperature 0)"),
                crate::util::COLUMNS,
                "  "
            )
        );
    }
    if m.without_tokens > 0 {
        let _ = writeln!(
            o,
            "{} request{} without prompt tokens (see their notes in the trace)",
            m.without_tokens,
            if m.without_tokens == 1 { "" } else { "s" }
        );
    }
    let header = [
        "ID", "SESSION", "TURN", "AT", "TIME", "PROMPT", "PREFIX", "CACHED", "READ", "GEN", "WITH",
        "OUTCOME",
    ];
    let rows: Vec<Vec<String>> = s
        .requests
        .iter()
        .map(|v| {
            let prefix = match (v.parent, v.common_prefix) {
                (Some(p), Some(_)) if v.extends_parent => format!("extends #{p}"),
                (Some(p), Some(c)) => format!("{} of #{p}", n(c as u64)),
                _ => "new".into(),
            };
            let with = if v.overlapped.is_empty() {
                "-".to_string()
            } else if v.overlapped.len() <= 3 {
                v.overlapped
                    .iter()
                    .map(|i| format!("#{i}"))
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                format!("{} others", v.overlapped.len())
            };
            vec![
                format!("#{}", v.id),
                v.session.to_string(),
                v.turn.to_string(),
                format!("{:.1}s", v.arrived_ms / 1000.0),
                format!("{:.2}s", v.duration_ms / 1000.0),
                opt(v.prompt_tokens.map(|p| p as u64)),
                prefix,
                opt(v.cached),
                opt(v.reread),
                opt(v.generated),
                with,
                serde_json::to_value(v.outcome)
                    .ok()
                    .and_then(|x| x.as_str().map(|s| s.replace('_', " ")))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    o.push('\n');
    o.push_str(&crate::util::text_table(
        &header,
        &rows,
        &[1, 2, 3, 4, 5, 7, 8, 9],
    ));
    o.push_str(
        "\nPREFIX: the earlier request whose prompt shares the longest prefix with this one: \
         extends it,\nor how many tokens match before it diverges. CACHED and READ: the \
         server's own count of\nprompt tokens reused from its cache and read. WITH: the \
         requests in flight at the same time.\n",
    );
    o
}
