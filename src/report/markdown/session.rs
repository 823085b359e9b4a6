//! A replayed trace's requests, one row each (issue 41's timeline): how deep each prompt was,
//! what the server took from its cache and what it read again, what it generated, how many
//! requests were in flight beside it, and its time for the reference and the recommendation.

use super::text;
use crate::report::summary::{aggregate_fact, reread_fact, typical_replay as typical};
use crate::run::TuneResult;
use std::fmt::Write as _;

/// The section, when the tune's workload is a replayed trace.
pub fn section(m: &mut String, r: &TuneResult) {
    let Some(w) = r.winner.as_ref() else {
        return;
    };
    let Some(mine) = typical(r, &w.config) else {
        return;
    };
    let reference = w
        .reference
        .as_ref()
        .filter(|rf| rf.config != w.config)
        .and_then(|rf| typical(r, &rf.config));
    let _ = writeln!(m, "## The replayed session, request by request\n");
    let _ = writeln!(
        m,
        "{}: {} of its {} requests replayed in every launch, in arrival order. From the \
         recommendation's typical launch (its median replay): the prompt's length, what the \
         server took from its prompt cache and what it read again, what it generated, the \
         requests in flight beside it; then each request's time, the client's wall clock.\n",
        text(&mine.workload),
        mine.requests.len(),
        mine.in_trace
    );
    // Speculative decoding: the server's drafted and accepted tokens, request by request.
    let drafts = mine.requests.iter().any(|q| q.draft_n.is_some());
    let _ = writeln!(
        m,
        "| request | prompt tokens | from the cache | read again | generated | {}in flight | {}recommendation, s |",
        if drafts { "accepted of drafted | " } else { "" },
        if reference.is_some() { "reference, s | " } else { "" }
    );
    let _ = writeln!(
        m,
        "|---|---|---|---|---|---|{}{}---|",
        if drafts { "---|" } else { "" },
        if reference.is_some() { "---|" } else { "" }
    );
    for q in &mine.requests {
        let theirs = reference.and_then(|t| t.requests.iter().find(|x| x.id == q.id));
        let drafted = match (drafts, q.draft_n) {
            (false, _) => String::new(),
            (true, Some(n)) => format!("{} of {n} | ", q.draft_n_accepted.unwrap_or(0)),
            (true, None) => "- | ".to_string(),
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {drafted}{} | {}{:.2} |",
            q.id,
            q.prompt_tokens,
            q.cache_n,
            q.prompt_n,
            q.generated,
            q.in_flight,
            match (reference.is_some(), theirs) {
                (true, Some(t)) => format!("{:.2} | ", t.request_s),
                (true, None) => "- | ".to_string(),
                (false, _) => String::new(),
            },
            q.request_s
        );
    }
    let _ = writeln!(m);
    if let Some(f) = crate::report::summary::speculation_fact(r) {
        let _ = writeln!(
            m,
            "Speculative {}. The answers compared are the first {} requests that ran alone, \
             replayed greedily (temperature 0) by both configs.\n",
            f.trim_start_matches("speculative "),
            crate::trial::lossless::CHECKED_REQUESTS
        );
    }
    if let Some(f) = reread_fact(r) {
        let _ = writeln!(m, "In all, {f}.\n");
    }
    if let Some(f) = aggregate_fact(r) {
        let _ = writeln!(m, "Aggregate {f}.\n");
    }
}
