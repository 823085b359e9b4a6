use super::*;

fn stdlib() -> Vec<StdlibFile> {
    let dir = stdlib_dir().expect("python3 is needed by the built-in session's tests");
    load_sources(&dir).unwrap()
}

/// True when request `b`'s messages start with all of request `a`'s (its prompt extends a's).
fn extends(a: &ChatRequest, b: &ChatRequest) -> bool {
    b.messages.len() >= a.messages.len() && b.messages[..a.messages.len()] == a.messages[..]
}

fn contents(r: &ChatRequest) -> String {
    r.messages
        .iter()
        .map(|m| {
            let calls: String = m["tool_calls"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .map(|c| {
                            format!("{}({})", c["function"]["name"], c["function"]["arguments"])
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!("{}{calls}\n", m["content"].as_str().unwrap_or(""))
        })
        .collect()
}

#[test]
fn the_agent_session_holds_what_an_agent_sends() {
    let src = stdlib();
    for budget in [12_000, 100_000, 300_000] {
        let s = build(Kind::Agent, budget, &src);
        let r = &s.requests;
        let deepest = r.iter().map(ChatRequest::chars).max().unwrap();
        assert!(deepest <= budget, "{budget}: {deepest}");
        assert!(deepest * 100 >= budget * 85, "{budget}: only {deepest}");
        assert_eq!(
            r.last().unwrap().chars(),
            deepest,
            "{budget}: the last is the deepest"
        );
        // Groups go in order; one fan-out: two groups of 2-4 sub-agent requests.
        assert!(r.windows(2).all(|w| w[0].group <= w[1].group));
        let mut sizes = std::collections::BTreeMap::new();
        for q in r {
            *sizes.entry(q.group).or_insert(0) += 1;
        }
        let fan: Vec<usize> = sizes.values().copied().filter(|&n| n > 1).collect();
        assert_eq!(fan.len(), 2, "{budget}: {sizes:?}");
        assert!(
            fan.iter().all(|&n| (2..=4).contains(&n)),
            "{budget}: {sizes:?}"
        );
        // Tools, file reads, edits, test logs, thinking.
        assert!(r.iter().all(|q| q.tools.len() >= 2));
        let all: String = r.iter().map(contents).collect();
        for needle in [
            "read_file",
            "edit_file",
            "run_tests",
            "test session starts",
            "<think>",
            "@@ -",
        ] {
            assert!(all.contains(needle), "{budget}: no {needle}");
        }
        // Real text: a whole line of a standard-library file, numbered as a read shows it.
        let lines = src[0].text.lines().filter(|l| l.len() > 30);
        let found = lines.filter(|l| all.contains(&format!("\t{l}\n"))).count();
        assert!(found >= 5, "{budget}: {found} lines of {}", src[0].path);
        // A later turn drops its predecessors' thinking: it does not extend the request before.
        let main: Vec<&ChatRequest> = r.iter().filter(|q| sizes[&q.group] == 1).collect();
        let diverged = main.windows(2).filter(|w| !extends(w[0], w[1])).count();
        assert!(diverged >= 1, "{budget}: every turn extends the one before");
        let gen: Vec<u32> = r.iter().map(|q| q.max_tokens).collect();
        assert!(gen.iter().all(|&n| (16..=4096).contains(&n)), "{gen:?}");
        // Same inputs, same session.
        assert_eq!(build(Kind::Agent, budget, &src), s);
    }
    // A large context holds several cycles, a whole-file rewrite and the cleared results.
    let big = build(Kind::Agent, 300_000, &src);
    let all: String = big.requests.iter().map(contents).collect();
    let last = contents(big.requests.last().unwrap());
    let rewrites = last.matches("\"write_file\"(").count();
    assert_eq!(rewrites, 1, "one whole-file rewrite");
    assert!(all.contains(agent::CLEARED));
    assert!(all.matches("test session starts").count() >= 6);
}

#[test]
fn the_chat_is_real_code_in_turns_that_grow() {
    let src = stdlib();
    for budget in [12_000, 100_000, 300_000] {
        let s = build(Kind::Chat, budget, &src);
        let r = &s.requests;
        // Deeper chats paste more a turn: about as many turns at any depth.
        assert!((3..=60).contains(&r.len()), "{budget}: {} turns", r.len());
        assert!(r.iter().all(|q| q.tools.is_empty()));
        assert!(
            r.windows(2).all(|w| extends(&w[0], &w[1])),
            "a chat only grows"
        );
        let deepest = r.last().unwrap().chars();
        assert!(
            deepest <= budget && deepest * 100 >= budget * 85,
            "{budget}: {deepest}"
        );
        let line = src[0]
            .text
            .lines()
            .find(|l| l.trim_start().starts_with("def "))
            .unwrap();
        assert!(contents(&r[r.len() - 1]).contains(line));
        assert_eq!(build(Kind::Chat, budget, &src), s);
    }
}

#[test]
fn three_sub_agents_send_every_turn_at_once() {
    let src = stdlib();
    for budget in [6_000, 12_000, 100_000] {
        let s = build(Kind::Subagents, budget, &src);
        let r = &s.requests;
        // Groups of three, in order, one per turn.
        let mut sizes = std::collections::BTreeMap::new();
        for q in r {
            *sizes.entry(q.group).or_insert(0) += 1;
        }
        assert!(sizes.len() >= 3, "{budget}: {sizes:?}");
        assert!(sizes.values().all(|&n| n == SUBAGENTS), "{sizes:?}");
        assert!(r.windows(2).all(|w| w[0].group <= w[1].group));
        // Each of a later group extends exactly one of the group before (its own sub-agent).
        let groups: Vec<Vec<&ChatRequest>> = sizes
            .keys()
            .map(|g| r.iter().filter(|q| q.group == *g).collect())
            .collect();
        for w in groups.windows(2) {
            for q in &w[1] {
                let parents = w[0].iter().filter(|p| extends(p, q)).count();
                assert_eq!(parents, 1, "{budget}: a turn of no single sub-agent");
            }
        }
        // The last request is the deepest, near the budget (the renderer sizes by it).
        let deepest = r.iter().map(ChatRequest::chars).max().unwrap();
        assert_eq!(r.last().unwrap().chars(), deepest);
        assert!(
            deepest <= budget && deepest * 100 >= budget * 70,
            "{budget}: {deepest}"
        );
        // Real text, read in pieces; answers long enough to measure generation.
        let all: String = r.iter().map(contents).collect();
        assert!(all.contains("read_file") && all.contains("<think>"));
        let lines = src[0].text.lines().filter(|l| l.len() > 30);
        assert!(lines.filter(|l| all.contains(&format!("\t{l}\n"))).count() >= 3);
        assert!(r.iter().all(|q| (16..=4096).contains(&q.max_tokens)));
        assert_eq!(build(Kind::Subagents, budget, &src), s);
    }
}

#[test]
fn thinking_stays_while_a_task_runs_and_goes_when_the_user_speaks() {
    let mut s = Script::new("sys", Vec::new());
    s.user("u1");
    s.ask();
    s.close("t1".into(), "a1");
    s.ask();
    let kept = s.messages();
    assert_eq!(kept[2]["content"], "<think>\nt1\n</think>\n\na1");
    s.user("u2");
    let dropped = s.messages();
    assert_eq!(dropped[2]["content"], "a1");
    assert_eq!(s.requests[0].max_tokens, 16);
}

#[test]
fn a_missing_python_is_named() {
    let e = stdlib_dir_with("/nonexistent/python3".as_ref())
        .unwrap_err()
        .to_string();
    assert!(e.contains("install Python 3"), "{e}");
    assert!(e.contains("QTUNE_PYTHON"), "{e}");
}

#[test]
fn too_few_sources_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("textwrap.py"), "x = 1\n".repeat(30)).unwrap();
    let e = load_sources(dir.path()).unwrap_err().to_string();
    assert!(e.contains("only 1 readable source files"), "{e}");
}
