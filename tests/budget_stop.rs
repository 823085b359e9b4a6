//! Stops are said (issue 43): a tune its budget ends before the race decides says which
//! budget, after how many launches, what the race got and the command to go on; and
//! `--resume DIR --budget-trials N` gives a stopped tune that budget and finishes it. On the
//! replayed landscape of tests/fixtures/replay-tiny-moe (no llama-server, milliseconds).

mod support;
use support::output_text as text;
use support::qtune_without_server as qtune;

use std::path::PathBuf;

fn journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn stop_line(out: &str) -> Option<&str> {
    out.lines().find(|l| l.starts_with("qtune: stopped: "))
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
    let command = format!(
        "qtune tune --replay {} --resume {} --budget-trials 20",
        journal().display(),
        run.display()
    );
    assert!(line.ends_with(&command), "{line}\nwanted: {command}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["budget_stop"]["by"], "launches", "{results:#}");
    assert_eq!(results["budget_stop"]["launches"], 10);

    // The command it printed: the tune goes on with the larger budget and its race decides.
    let o = qtune()
        .args(["tune", "--replay"])
        .arg(journal())
        .arg("--resume")
        .arg(&run)
        .args(["--budget-trials", "20"])
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("launch budget 10 -> 20 (a new total, launches already made included)"),
        "{out}"
    );
    assert!(stop_line(&out).is_none(), "{out}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert!(results.get("budget_stop").is_none(), "{results:#}");
    let trials = results["trials"].as_array().unwrap().len();
    assert!(trials > 10 && trials <= 20, "{trials} trials");
    assert!(
        results["race"]["outcome"]["winner"].is_number(),
        "the race decided: {:#}",
        results["race"]["outcome"]["reason"]
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
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("qtune: error: "), "{out}");
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
    let command = format!(
        "qtune tune --replay {} --resume {} --budget-minutes 4",
        journal().display(),
        run.display()
    );
    assert!(line.ends_with(&command), "{line}\nwanted: {command}");
    let read = |run: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap()
    };
    let first = read(&run);
    assert_eq!(first["budget_stop"]["by"], "minutes", "{first:#}");
    let launched = first["trials"].as_array().unwrap().len();

    // The command it printed: the minutes budget becomes 4 and the tune launches more.
    let o = qtune()
        .args(["tune", "--replay"])
        .arg(journal())
        .arg("--resume")
        .arg(&run)
        .args(["--budget-minutes", "4"])
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("minutes budget 2 -> 4 (a new total, minutes already spent included)"),
        "{out}"
    );
    let second = read(&run);
    let now = second["trials"].as_array().unwrap().len();
    assert!(now > launched, "{launched} then {now} launches:\n{out}");
    assert_eq!(second["space"]["budget"]["minutes"], 4.0, "{second:#}");
    assert!(
        second["minutes_used"].as_f64().unwrap() <= 4.0,
        "the new total holds: {second:#}"
    );
}
