//! What parallel slots mean for a server's clients: one sentence the summary, the report and
//! launch.sh all print.

/// What a config with parallel slots (`-np` N > 1) means for its clients, one plain sentence:
/// the server answers N requests at once and queues the rest. `None` with one slot.
pub fn note(c: &crate::config::LaunchConfig) -> Option<String> {
    let n = c.parallel;
    if n <= 1 {
        return None;
    }
    let ctx = crate::util::fmt_thousands(f64::from(c.ctx));
    let each = if c.kv_unified == Some(true) {
        format!("the {n} slots share the {ctx} tokens of context")
    } else {
        format!(
            "each slot holds {} of the {ctx} tokens of context",
            crate::util::fmt_thousands(f64::from(c.ctx / n))
        )
    };
    Some(format!(
        "this server answers {n} requests at once ({} {n}; {each}); a client that sends more \
         at once waits in the server's queue until a slot is free, so let your agent run at \
         most {n} requests (sub-agents) in parallel",
        crate::engine::Flag::Parallel
    ))
}
