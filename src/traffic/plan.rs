//! A trace as a tune's workload (`--workload FILE.jsonl`): which of its requests a launch
//! replays ([`ReplayPlan`], sampled to the launch budget), the checks that refuse a trace
//! before anything is launched ([`load`]), and what the run directory keeps of it
//! ([`ReplayWorkload`]: the file's path and SHA-256, the plan, counts; never a prompt).
//!
//! The measurement itself is the trial stage's (`trial::replay_trace`); it takes a [`Trace`]
//! in memory, so a trace built at run time replays the same way as one read from a file.

use super::trace::{Request, Trace, TraceError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What one launch replays at most: requests, and tokens the recording read or generated
/// (its `prompt_n` plus `n_generated`). A longer trace is sampled ([`plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayBudget {
    pub requests: usize,
    pub tokens: u64,
}

/// The default per-launch budget: 64 requests and 65,536 tokens read or generated.
pub const DEFAULT_BUDGET: ReplayBudget = ReplayBudget {
    requests: 64,
    tokens: 65_536,
};

/// Which requests of a trace one launch replays, in arrival order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayPlan {
    /// The replayed requests' ids (arrival order).
    pub ids: Vec<u64>,
    /// Requests in the trace.
    pub in_trace: usize,
    /// Of these, the replayable ones (ok, with prompt tokens and at least one generated token).
    pub replayable: usize,
    /// Sessions among the replayable requests.
    pub sessions: usize,
    /// When sampled: the first this many requests of each session were kept (`None`: the whole
    /// trace is replayed).
    pub per_session: Option<usize>,
    /// Sessions dropped whole when even one request each did not fit (0 otherwise).
    pub sessions_dropped: usize,
    /// Tokens the recording read (`prompt_n`) and generated for the replayed requests.
    pub read_tokens: u64,
    pub gen_tokens: u64,
    /// The longest replayed request: its prompt plus its generated tokens.
    #[serde(default)]
    pub longest_tokens: u64,
    /// The trace has no end line (the recorder was killed): what is there is replayed.
    #[serde(default)]
    pub cut_short: bool,
}

impl ReplayPlan {
    /// One line for people: "replayed 40 of 212 requests (the first 5 of each of 8 sessions)".
    pub fn describe(&self) -> String {
        let mut s = format!("replays {} of {} requests", self.ids.len(), self.in_trace);
        match self.per_session {
            None if self.ids.len() == self.in_trace => s.push_str(" (all)"),
            None => {}
            Some(k) => {
                s.push_str(&format!(
                    ", sampled to the launch budget: the first {k} of each of {} sessions",
                    self.sessions - self.sessions_dropped
                ));
                if self.sessions_dropped > 0 {
                    s.push_str(&format!(
                        " (the {} sessions that started last left out)",
                        self.sessions_dropped
                    ));
                }
            }
        }
        if self.replayable < self.in_trace {
            s.push_str(&format!(
                "; {} not replayable (not ok, no prompt tokens or nothing generated)",
                self.in_trace - self.replayable
            ));
        }
        s.push_str(&format!(
            "; {} tokens read, {} generated",
            crate::util::fmt_thousands(self.read_tokens as f64),
            crate::util::fmt_thousands(self.gen_tokens as f64)
        ));
        if self.cut_short {
            s.push_str(
                "; the trace has no end line (recording cut short): replaying what is there",
            );
        }
        s
    }

    /// Mean tokens read and generated per replayed request (what a speed prediction turns
    /// into time per request).
    pub fn mean_tokens(&self) -> (f64, f64) {
        let n = self.ids.len().max(1) as f64;
        (self.read_tokens as f64 / n, self.gen_tokens as f64 / n)
    }
}

/// Whether a recorded request can be replayed: it ended `ok`, its prompt tokens are known and
/// it generated at least one token.
pub fn replayable(r: &Request) -> bool {
    r.outcome == super::trace::Outcome::Ok
        && r.prompt_tokens.as_ref().is_some_and(|t| !t.is_empty())
        && r.n_generated.is_some_and(|n| n >= 1)
}

/// What replaying `r` costs in tokens: those the recording read (its `prompt_n`, else the whole
/// prompt) plus those generated.
fn cost(r: &Request) -> u64 {
    let read = match &r.timings {
        Some(t) => t.prompt_n,
        None => r.prompt_tokens.as_ref().map_or(0, |t| t.len() as u64),
    };
    read + r.n_generated.unwrap_or(0)
}

/// The requests a launch replays. Sampling keeps whole prefixes of sessions (a request's cache
/// hit depends on the one before it): the first `k` requests of every session, `k` the largest
/// that fits `budget`; when even one request of each session does not fit, the first requests
/// of the sessions that started first, as many as fit (at least one). Errors when no request
/// is replayable.
pub fn plan(trace: &Trace, budget: ReplayBudget) -> Result<ReplayPlan, TraceError> {
    let shown = super::show::analyse(trace);
    // Per session (numbered by first request), its replayable requests' indices in order.
    let mut by_session: Vec<Vec<usize>> = Vec::new();
    let mut session_index: std::collections::HashMap<usize, usize> = Default::default();
    for (i, r) in trace.requests.iter().enumerate() {
        if !replayable(r) {
            continue;
        }
        let s = shown.requests[i].session;
        let k = *session_index.entry(s).or_insert_with(|| {
            by_session.push(Vec::new());
            by_session.len() - 1
        });
        by_session[k].push(i);
    }
    let replayable_n: usize = by_session.iter().map(Vec::len).sum();
    if replayable_n == 0 {
        return Err(TraceError(format!(
            "none of its {} requests can be replayed (each needs outcome ok, its prompt tokens \
             and at least one generated token): record a session where the server answered",
            trace.requests.len()
        )));
    }
    let fits = |chosen: &[usize]| {
        chosen.len() <= budget.requests
            && chosen
                .iter()
                .map(|&i| cost(&trace.requests[i]))
                .sum::<u64>()
                <= budget.tokens
    };
    let first_k = |k: usize| -> Vec<usize> {
        let mut v: Vec<usize> = by_session
            .iter()
            .flat_map(|s| s.iter().take(k).copied())
            .collect();
        v.sort_unstable();
        v
    };
    let longest = by_session.iter().map(Vec::len).max().unwrap_or(0);
    let all = first_k(longest);
    let (chosen, per_session, dropped) = if fits(&all) {
        (all, None, 0)
    } else {
        let mut k = 1;
        while k < longest && fits(&first_k(k + 1)) {
            k += 1;
        }
        if fits(&first_k(k)) {
            (first_k(k), Some(k), 0)
        } else {
            // Not even one request per session fits: the sessions that started first.
            let mut v: Vec<usize> = Vec::new();
            for s in &by_session {
                let mut next = v.clone();
                next.push(s[0]);
                if !v.is_empty() && !fits(&next) {
                    break;
                }
                v = next;
            }
            v.sort_unstable();
            let kept = v.len();
            (v, Some(1), by_session.len() - kept)
        }
    };
    let req = |i: &usize| &trace.requests[*i];
    Ok(ReplayPlan {
        ids: chosen.iter().map(|i| req(i).id).collect(),
        in_trace: trace.requests.len(),
        replayable: replayable_n,
        sessions: by_session.len(),
        per_session,
        sessions_dropped: dropped,
        read_tokens: chosen
            .iter()
            .map(|i| cost(req(i)) - req(i).n_generated.unwrap_or(0))
            .sum(),
        gen_tokens: chosen.iter().map(|i| req(i).n_generated.unwrap_or(0)).sum(),
        longest_tokens: chosen
            .iter()
            .map(|i| {
                req(i).prompt_tokens.as_ref().map_or(0, |t| t.len() as u64)
                    + req(i).n_generated.unwrap_or(0)
            })
            .max()
            .unwrap_or(0),
        cut_short: trace.end.is_none(),
    })
}

/// Refuse a plan whose request does not fit a launch's context (`-c`): its prompt and its
/// generated tokens must fit one slot.
pub fn check_context(trace: &Trace, plan: &ReplayPlan, ctx: u32) -> Result<(), TraceError> {
    for r in trace.requests.iter().filter(|r| plan.ids.contains(&r.id)) {
        let p = r.prompt_tokens.as_ref().map_or(0, |t| t.len() as u64);
        let g = r.n_generated.unwrap_or(0);
        if p + g > u64::from(ctx) {
            return Err(TraceError(format!(
                "request {} needs {} tokens ({} prompt + {} generated), more than the launch's \
                 context ({} {ctx}): tune with --ctx {} or more",
                r.id,
                crate::util::fmt_thousands((p + g) as f64),
                crate::util::fmt_thousands(p as f64),
                crate::util::fmt_thousands(g as f64),
                crate::engine::Flag::Ctx,
                p + g
            )));
        }
    }
    Ok(())
}

/// A trace as a tune's workload: what the run directory keeps (the file, its SHA-256 and the
/// plan; counts only) and, in memory, the trace itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayWorkload {
    /// The name people read: the trace's file name.
    pub name: String,
    /// The trace file (absolute), when it came from one; `None` for a trace built at run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// SHA-256 of the file's bytes: a resume checks it is the same file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub plan: ReplayPlan,
    /// The trace (never serialized: it holds the user's prompts).
    #[serde(skip)]
    pub trace: Option<Arc<Trace>>,
}

impl PartialEq for ReplayWorkload {
    fn eq(&self, o: &Self) -> bool {
        (&self.name, &self.file, &self.sha256, &self.plan) == (&o.name, &o.file, &o.sha256, &o.plan)
    }
}

impl ReplayWorkload {
    /// A trace in memory as a workload for a launch of context `ctx`, sampled to `budget`.
    pub fn from_trace(
        name: &str,
        trace: Trace,
        ctx: u32,
        budget: ReplayBudget,
    ) -> Result<ReplayWorkload, TraceError> {
        let plan = plan(&trace, budget)?;
        check_context(&trace, &plan, ctx)?;
        Ok(ReplayWorkload {
            name: name.to_string(),
            file: None,
            sha256: None,
            plan,
            trace: Some(Arc::new(trace)),
        })
    }

    /// The trace's replayed requests, in arrival order (empty when the trace is not loaded).
    pub fn requests(&self) -> Vec<&Request> {
        match &self.trace {
            Some(t) => t
                .requests
                .iter()
                .filter(|r| self.plan.ids.contains(&r.id))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Refuse a trace this model cannot replay, before anything is launched: one recorded
    /// with a vocabulary of another size (another tokenizer: its ids mean other text here),
    /// or holding a token id outside this model's `n_vocab` tokens (the GGUF's tokenizer;
    /// the server would fail every request, and every trial would read as a crash). 0: the
    /// model's vocabulary is unknown, nothing to check.
    pub fn check_vocab(&self, n_vocab: u32) -> Result<(), TraceError> {
        let Some(t) = &self.trace else {
            return Ok(());
        };
        if n_vocab == 0 {
            return Ok(());
        }
        let redo =
            "record the session again with this model, or tune the model it was recorded with";
        if let Some(v) = t.header.model.n_vocab.filter(|&v| v != u64::from(n_vocab)) {
            return Err(TraceError(format!(
                "it was recorded with another tokenizer (a vocabulary of {} tokens; this model's \
                 has {}): its token ids mean other text here; {redo}",
                crate::util::fmt_thousands(v as f64),
                crate::util::fmt_thousands(f64::from(n_vocab))
            )));
        }
        for r in &t.requests {
            let ids = r.prompt_tokens.as_deref().unwrap_or_default();
            if let Some(bad) = ids.iter().find(|&&id| id >= n_vocab) {
                return Err(TraceError(format!(
                    "request {} holds token id {bad}, outside this model's vocabulary ({} \
                     tokens): it was recorded with another tokenizer; {redo}",
                    r.id,
                    crate::util::fmt_thousands(f64::from(n_vocab))
                )));
            }
        }
        Ok(())
    }

    /// Read the trace file again for a resumed tune: refused when its bytes changed.
    pub fn reload(&mut self) -> anyhow::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let (trace, sha) = read_file(file)?;
        if self.sha256.as_deref().is_some_and(|want| want != sha) {
            anyhow::bail!(
                "the trace {} changed since the tune started (SHA-256 {}, now {sha}): restore it, or start a new tune",
                file.display(),
                self.sha256.as_deref().unwrap_or("")
            );
        }
        self.trace = Some(Arc::new(trace));
        Ok(())
    }
}

/// Whether a `--workload` value names a trace: a path ending in `.jsonl`, or a file whose
/// first line is a qtune-trace header.
pub fn is_trace(name_or_path: &str) -> bool {
    if name_or_path.ends_with(".jsonl") {
        return true;
    }
    let path = Path::new(name_or_path);
    if !path.is_file() {
        return false;
    }
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    use std::io::Read;
    let mut head = Vec::new();
    if f.take(4096).read_to_end(&mut head).is_err() {
        return false;
    }
    let first = head.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let text = String::from_utf8_lossy(first);
    text.contains("\"type\":\"header\"") && text.contains(super::trace::FORMAT)
}

fn read_file(path: &Path) -> anyhow::Result<(Trace, String)> {
    use sha2::Digest;
    let bytes = crate::util::read_bounded(path, super::trace::MAX_TRACE_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read the trace {}: {e}", path.display()))?;
    let trace = super::trace::parse(&bytes)
        .map_err(|e| anyhow::anyhow!("the trace {}: {e}", path.display()))?;
    Ok((trace, format!("{:x}", sha2::Sha256::digest(&bytes))))
}

/// Read, check and plan a trace file as the workload of launches of context `ctx`: every
/// refusal is one line naming the file, before anything is launched.
pub fn load(path: &Path, ctx: u32, budget: ReplayBudget) -> anyhow::Result<ReplayWorkload> {
    let (trace, sha) = read_file(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let mut w = ReplayWorkload::from_trace(&name, trace, ctx, budget)
        .map_err(|e| anyhow::anyhow!("the trace {}: {e}", path.display()))?;
    w.file = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    w.sha256 = Some(sha);
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::trace::{Header, Outcome, Timings};

    fn req(id: u64, prompt: Vec<u32>, gen: u64, read: u64) -> Request {
        Request {
            id,
            endpoint: "/completion".into(),
            stream: false,
            arrived_ms: id as f64 * 10.0,
            first_byte_ms: None,
            ended_ms: id as f64 * 10.0 + 5.0,
            overlapped: Vec::new(),
            status: Some(200),
            outcome: Outcome::Ok,
            prompt_tokens: Some(prompt),
            n_generated: Some(gen),
            max_tokens: None,
            temperature: None,
            top_p: None,
            timings: Some(Timings {
                cache_n: 0,
                prompt_n: read,
                prompt_ms: 1.0,
                predicted_n: gen,
                predicted_ms: 1.0,
            }),
            answer_tokens: None,
            note: None,
        }
    }

    fn trace(requests: Vec<Request>) -> Trace {
        let header: Header = serde_json::from_str(
            r#"{"format":"qtune-trace","version":1,"qtune_version":"0","started_at":"x","upstream":"u"}"#,
        )
        .unwrap();
        Trace {
            header,
            requests,
            end: None,
        }
    }

    /// Two sessions of three turns each (a: 1.., b: 9..), interleaved.
    fn two_sessions() -> Trace {
        let a = |n: usize| (1..=(10 * n) as u32).collect::<Vec<u32>>();
        let b = |n: usize| (1000..1000 + (10 * n) as u32).collect::<Vec<u32>>();
        trace(vec![
            req(1, a(1), 5, 10),
            req(2, b(1), 5, 10),
            req(3, a(2), 5, 10),
            req(4, b(2), 5, 10),
            req(5, a(3), 5, 10),
            req(6, b(3), 5, 10),
        ])
    }

    #[test]
    fn a_trace_within_budget_is_replayed_whole() {
        let p = plan(&two_sessions(), DEFAULT_BUDGET).unwrap();
        assert_eq!(p.ids, [1, 2, 3, 4, 5, 6]);
        assert_eq!((p.sessions, p.per_session), (2, None));
        assert_eq!((p.read_tokens, p.gen_tokens), (60, 30));
        assert!(
            p.describe().contains("replays 6 of 6 requests (all)"),
            "{}",
            p.describe()
        );
        assert!(p.describe().contains("no end line"));
    }

    #[test]
    fn sampling_keeps_the_first_turns_of_every_session() {
        let b = ReplayBudget {
            requests: 5,
            tokens: 1000,
        };
        let p = plan(&two_sessions(), b).unwrap();
        assert_eq!(
            p.ids,
            [1, 2, 3, 4],
            "the first 2 of each session, not 5 of them"
        );
        assert_eq!(p.per_session, Some(2));
        assert!(
            p.describe().contains("the first 2 of each of 2 sessions"),
            "{}",
            p.describe()
        );
        // Token budget: 15 per request; 31 tokens allow 2 requests: one per session.
        let b = ReplayBudget {
            requests: 64,
            tokens: 31,
        };
        assert_eq!(plan(&two_sessions(), b).unwrap().ids, [1, 2]);
        // Not even one per session: the session that started first.
        let b = ReplayBudget {
            requests: 1,
            tokens: 1000,
        };
        let p = plan(&two_sessions(), b).unwrap();
        assert_eq!((p.ids.clone(), p.sessions_dropped), (vec![1], 1));
        assert!(p.describe().contains("left out"), "{}", p.describe());
    }

    #[test]
    fn a_trace_file_is_found_by_its_header_and_a_changed_one_is_refused_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("session.txt");
        let header = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"x","upstream":"u"}"#;
        let line = serde_json::to_string(&crate::traffic::trace::Line::Request(Box::new(req(
            1,
            vec![1, 2, 3],
            2,
            3,
        ))))
        .unwrap();
        std::fs::write(&p, format!("{header}\n{line}\n")).unwrap();
        assert!(is_trace(p.to_str().unwrap()));
        assert!(is_trace("missing.jsonl") && !is_trace("chat") && !is_trace("w.yaml"));
        let mut w = load(&p, 4096, DEFAULT_BUDGET).unwrap();
        assert_eq!(w.name, "session.txt");
        assert_eq!(w.plan.ids, [1]);
        // What the run directory keeps: no token.
        let kept = serde_json::to_string(&w).unwrap();
        assert!(!kept.contains("[1,2,3]"), "{kept}");
        w.reload().unwrap();
        let end =
            r#"{"type":"end","ended_at":"y","requests":1,"interrupted":0,"other_requests":0}"#;
        std::fs::write(&p, format!("{header}\n{line}\n{end}\n")).unwrap();
        let e = w.reload().unwrap_err().to_string();
        assert!(e.contains("changed since the tune started"), "{e}");
    }

    #[test]
    fn nothing_replayable_and_too_long_requests_are_refused() {
        let mut t = two_sessions();
        for r in &mut t.requests {
            r.outcome = Outcome::ClientGone;
        }
        let e = plan(&t, DEFAULT_BUDGET).unwrap_err().to_string();
        assert!(e.contains("none of its 6 requests can be replayed"), "{e}");
        t.requests[0].outcome = Outcome::Ok;
        let d = plan(&t, DEFAULT_BUDGET).unwrap().describe();
        assert!(
            d.starts_with("replays 1 of 6 requests; 5 not replayable"),
            "{d}"
        );
        let t = two_sessions();
        let p = plan(&t, DEFAULT_BUDGET).unwrap();
        let e = check_context(&t, &p, 30).unwrap_err().to_string();
        assert!(
            e.contains("request 5 needs 35 tokens") && e.contains("-c 30"),
            "{e}"
        );
        assert!(check_context(&t, &p, 35).is_ok());
    }
}
