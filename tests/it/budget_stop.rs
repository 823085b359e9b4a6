//! Stops are said (issue 43): a tune its budget ends before the race decides says which
//! budget, after how many launches, what the race got and the command to go on; and
//! `--resume DIR --budget-trials N` gives a stopped tune that budget and finishes it. On the
//! replayed landscape of tests/fixtures/replay-tiny-moe (no llama-server, milliseconds).

use crate::support;
use support::output_text as text;
use support::qtune_without_server as qtune;

use std::path::PathBuf;

fn journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

/// The stop's words (wrapped to 100 columns: joined again), and the command on its own lines
/// after them (broken with `\` at 100 columns: joined as the shell reads it).
fn stop(out: &str) -> Option<(String, String)> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.starts_with("qtune: stopped: "));
    let mut words = vec![lines.next()?.to_string()];
    while let Some(l) = lines.next() {
        if let Some(c) = l.strip_prefix("  qtune tune ") {
            let mut command = format!("qtune tune {c}");
            while let Some(head) = command.strip_suffix(" \\") {
                command = format!("{head} {}", lines.next()?.trim());
            }
            return Some((words.join(" "), command));
        }
        words.push(l.trim().to_string());
    }
    None
}

fn stop_line(out: &str) -> Option<String> {
    stop(out).map(|(words, command)| format!("{words} {command}"))
}

/// Run a printed `qtune tune ...` command word by word (the test's paths have no spaces).
fn run_printed(command: &str) -> std::process::Output {
    let words: Vec<&str> = command.split(' ').collect();
    assert_eq!(words[0], "qtune", "{command}");
    qtune().args(&words[1..]).output().unwrap()
}

fn results(run: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap()
}

/// The race decided: no budget stop, and a winner or a reason that is not a budget's.
fn assert_decided(run: &std::path::Path, out: &str) {
    let r = results(run);
    assert!(stop_line(out).is_none(), "{out}");
    assert!(r.get("budget_stop").is_none(), "{:#}", r["budget_stop"]);
    let reason = r["race"]["outcome"]["reason"].as_str().unwrap_or_default();
    assert!(
        r["race"]["outcome"]["winner"].is_number()
            || !(reason.contains("not over")
                || reason.starts_with("no race ran")
                || reason.starts_with("the budget of ")),
        "the race did not decide: {reason}\n{out}"
    );
}

/// Issue 52: a race whose launches ran out before a claim ("the budget of 3 launches is spent")
/// said nothing, and the stop's `--resume` offered twice the budget whatever the race needed.
/// Every budget that leaves the race undecided prints the command, on its own line, with the
/// launches the race's rounds need; run as printed, it decides.
#[test]
fn every_undecided_race_prints_the_resume_that_decides_it() {
    let tmp = tempfile::tempdir().unwrap();
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    // 12: the budget reserved the race no launch; 13: the race's 3 launches were spent.
    for budget in ["12", "13"] {
        let run = tmp.path().join(format!("run-{budget}"));
        let o = qtune()
            .arg("tune")
            .arg("--model")
            .arg(&model)
            .arg("--replay")
            .arg(journal())
            .args(["--space", "quick", "--budget-trials", budget, "--out"])
            .arg(&run)
            .output()
            .unwrap();
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        let (words, command) = stop(&out).unwrap_or_else(|| panic!("{budget}: no stop:\n{out}"));
        assert!(words.contains("the launch budget "), "{words}");
        assert!(
            words.ends_with("to give the race the rounds it needs to decide:"),
            "{words}"
        );
        let start = format!(
            "qtune tune --replay {} --resume {} --budget-trials ",
            journal().display(),
            run.display()
        );
        assert!(command.starts_with(&start), "{command}\nwanted: {start}N");
        let o = run_printed(&command);
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        assert_decided(&run, &out);
    }
}

#[test]
fn a_budget_too_small_for_the_race_is_said_and_resume_with_more_finishes_the_tune() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    let o = qtune()
        .arg("tune")
        .arg("--model")
        .arg(&model)
        .arg("--replay")
        .arg(journal())
        .args(["--space", "quick", "--budget-trials", "10", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let line = stop_line(&out).unwrap_or_else(|| panic!("no stop line:\n{out}"));
    assert!(
        line.contains("the launch budget ended the tune after 10 of 10 launches"),
        "{line}"
    );
    assert!(line.contains("the race got no paired round"), "{line}");
    let (_, command) = stop(&out).unwrap();
    let start = format!(
        "qtune tune --replay {} --resume {} --budget-trials ",
        journal().display(),
        run.display()
    );
    assert!(command.starts_with(&start), "{command}\nwanted: {start}N");
    let n: u32 = command[start.len()..].parse().unwrap();
    let r = results(&run);
    assert_eq!(r["budget_stop"]["by"], "launches", "{r:#}");
    assert_eq!(r["budget_stop"]["launches"], 10);

    // The command it printed: the tune goes on with the larger budget and its race decides.
    let o = run_printed(&command);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "launch budget 10 -> {n} (a new total, launches already made included)"
        )),
        "{out}"
    );
    assert_decided(&run, &out);
    let trials = results(&run)["trials"].as_array().unwrap().len();
    assert!(trials > 10 && trials <= n as usize, "{trials} trials");
    assert!(
        results(&run)["race"]["outcome"]["winner"].is_number(),
        "the race decided: {:#}",
        results(&run)["race"]["outcome"]["reason"]
    );
}

#[test]
fn a_resumed_budget_of_zero_minutes_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    let o = qtune()
        .arg("tune")
        .arg("--model")
        .arg(&model)
        .arg("--replay")
        .arg(journal())
        .args(["--space", "quick", "--budget-trials", "4", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = qtune()
        .args(["tune", "--replay"])
        .arg(journal())
        .arg("--resume")
        .arg(&run)
        .args(["--budget-minutes", "0"])
        .output()
        .unwrap();
    let out = text(&o);
    // Refused as it is read (issue 53: by its class), before the run directory is touched.
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("'0' is not a budget"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

#[test]
fn a_minutes_budget_cut_off_prints_the_command_and_resume_with_more_minutes_goes_on() {
    // The replayed launches take 20 s each on the tune's clock: 2 minutes end it early.
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    let o = qtune()
        .arg("tune")
        .arg("--model")
        .arg(&model)
        .arg("--replay")
        .arg(journal())
        .args(["--space", "quick", "--budget-trials", "20"])
        .args(["--budget-minutes", "2", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let line = stop_line(&out).unwrap_or_else(|| panic!("no stop line:\n{out}"));
    assert!(
        line.contains("the minutes budget (2 minutes) ended the tune after "),
        "{line}"
    );
    // The budget cut the race's first round after the reference's launch: nothing is paired,
    // and the candidate was not raced to any end.
    assert!(line.contains("the race got no paired round"), "{line}");
    assert!(
        out.contains("(still racing when the budget ended the tune)"),
        "{out}"
    );
    assert!(!out.contains("raced to the end"), "{out}");
    // The race's launch says which round it is, as the other phases are named.
    assert!(
        out.lines()
            .any(|l| l.starts_with("launch ") && l.contains(" · confirm, round 1 of at most ")),
        "{out}"
    );
    // The command: the launches the race needs, and the minutes they take at the mean launch.
    let (_, command) = stop(&out).unwrap();
    let start = format!(
        "qtune tune --replay {} --resume {} --budget-trials ",
        journal().display(),
        run.display()
    );
    assert!(
        command.starts_with(&start),
        "{command}\nwanted: {start}N --budget-minutes M"
    );
    let (n, m) = command[start.len()..]
        .split_once(" --budget-minutes ")
        .unwrap_or_else(|| panic!("{command}"));
    let (n, m): (u32, f64) = (n.parse().unwrap(), m.parse().unwrap());
    assert!(n > 20 && m > 2.0, "{command}");
    let first = results(&run);
    assert_eq!(first["budget_stop"]["by"], "minutes", "{first:#}");
    let launched = first["trials"].as_array().unwrap().len();

    // The command it printed: both budgets grow, the tune launches more and its race decides.
    let o = run_printed(&command);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "minutes budget 2 -> {m} (a new total, minutes already spent included)"
        )),
        "{out}"
    );
    let second = results(&run);
    let now = second["trials"].as_array().unwrap().len();
    assert!(now > launched, "{launched} then {now} launches:\n{out}");
    assert_eq!(second["space"]["budget"]["minutes"], m, "{second:#}");
    assert!(
        second["minutes_used"].as_f64().unwrap() <= m,
        "the new total holds: {second:#}"
    );
    assert_decided(&run, &out);
}

/// Issue 53: `--budget-minutes` is refused by its class, before anything else is read: not a
/// number, not finite, not above 0, past a week. One error, no panic, exit 2 (a usage error).
#[test]
fn a_budget_in_minutes_that_is_not_one_is_refused_by_its_class() {
    for v in ["inf", "nan", "-1", "0", "1e9", "10081", "abc", "1e-400"] {
        let o = qtune()
            .args([
                "tune",
                "--model",
                "/nonexistent.gguf",
                "--budget-minutes",
                v,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{v}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: invalid value")
                && (first.contains("is not a budget") || first.contains("not a number")),
            "{v}: {err}"
        );
        assert!(!err.contains("panicked"), "{v}: {err}");
    }
}
