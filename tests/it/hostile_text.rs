//! Issue 48, "what a model's name can carry": text from outside (a model's `general.name`, file
//! names and paths, workload names, the free-text fields of `results.json`) is data. On a
//! terminal it is shown with its control and invisible characters as escapes (`\x1b`, `\n`),
//! in `report.md` with no live HTML, link, code span, table cell or line of its own; and it
//! is never a reason for `report`, `script` or `profile export` to refuse the run qtune wrote.
//! With it: workload names with control characters are refused in one line, `compare -m`
//! is checked as `tune --model` is, and `tune --from-profile` takes the names `plan --profile`
//! takes. A fuzz property (proptest, bounded) covers the renderers.

use crate::support;
use support::output_text as text;

use proptest::prelude::*;
use qtune::model::synth::SynthFtype;
use qtune::run::TuneResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A `general.name` that tries everything: a window title and a cleared screen, a forged line
/// (`MODEL=/etc/shadow`), a carriage return, live HTML, a javascript link, a table cell, a code
/// span, a bidi override and a C1 control.
const EVIL: &str =
    "Evil\u{1b}]0;PWNED TITLE\u{7}\u{1b}[2J\nMODEL=/etc/shadow\r<script>alert(1)</script>\
<img src=x onerror=alert(1)> [click](javascript:alert(1)) | cell ` code \u{202e}txt.exe\u{85}";

fn fixture_journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn qtune(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.env_remove("QTUNE_LOG")
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
        .env("QTUNE_DATA_DIR", data);
    c
}

fn one_line_failure(o: &Output) -> String {
    assert!(!o.status.success(), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "{}", text(o));
    assert!(err.starts_with("qtune: error: "), "{}", text(o));
    assert!(!err.contains("panicked"), "{err}");
    assert_terminal_safe("the error", &err);
    err
}

/// A tiny synthetic MoE model named [`EVIL`], in a folder whose name holds a tab.
fn evil_model(tmp: &Path) -> PathBuf {
    let dir = tmp.join("models\tand a tab");
    std::fs::create_dir(&dir).unwrap();
    let mut shape = qtune::model::synth::shape_by_name("tiny-qwen35moe").unwrap();
    shape.model_name = Box::leak(EVIL.to_string().into_boxed_str());
    let p = dir.join("evil.gguf");
    qtune::model::synth::write_synthetic(&p, &shape, SynthFtype::parse("q4_k_m").unwrap()).unwrap();
    p
}

/// A character no terminal line or report may hold raw (the test's own list, not qtune's):
/// a control character (C0, DEL, C1), a zero-width or bidi control, a line or paragraph
/// separator, a BOM.
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}')
        || matches!(c, '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Terminal text: no control character but line breaks, no invisible character, no line of
/// its own made by a name.
fn assert_terminal_safe(what: &str, s: &str) {
    if let Some(c) = s.chars().find(|&c| c != '\n' && is_hidden(c)) {
        panic!("{what}: the raw character {c:?} reached the terminal:\n{s}");
    }
    assert!(
        !s.lines().any(|l| l.trim_start().starts_with("MODEL=")),
        "{what}: a name forged a line:\n{s}"
    );
}

fn assert_output_safe(o: &Output) {
    assert_terminal_safe("stdout", &String::from_utf8_lossy(&o.stdout));
    assert_terminal_safe("stderr", &String::from_utf8_lossy(&o.stderr));
}

/// What is live in a Markdown text, as a CommonMark (GitHub) reader sees it: outside fenced
/// code blocks and code spans, with backslash escapes taken, each HTML tag, comment or autolink
/// start (`<` then a letter, `/`, `!` or `?`) and each link or image destination; and each
/// table row's count of cell separators (GitHub splits cells at an unescaped `|` even inside a
/// code span).
fn live_markdown(md: &str) -> Vec<String> {
    let run = |cs: &[char], at: usize| cs[at..].iter().take_while(|&&c| c == '`').count();
    let mut out = Vec::new();
    let mut fence: Option<usize> = None;
    for line in md.split('\n') {
        let t = line.trim_start();
        let ticks = t.chars().take_while(|&c| c == '`').count();
        if let Some(n) = fence {
            if ticks >= n && t[ticks..].trim().is_empty() {
                fence = None;
            }
            continue;
        }
        if ticks >= 3 {
            fence = Some(ticks);
            continue;
        }
        let cs: Vec<char> = line.chars().collect();
        let row = line.starts_with('|');
        let mut cells = 0;
        let mut i = 0;
        while i < cs.len() {
            match cs[i] {
                '\\' if cs.get(i + 1).is_some_and(|c| c.is_ascii_punctuation()) => {
                    i += 2;
                    continue;
                }
                '`' => {
                    let n = run(&cs, i);
                    let mut j = i + n;
                    let mut end = None;
                    while j < cs.len() {
                        if cs[j] == '`' {
                            let m = run(&cs, j);
                            if m == n {
                                end = Some(j);
                                break;
                            }
                            j += m;
                        } else {
                            j += 1;
                        }
                    }
                    match end {
                        Some(e) => {
                            cells += (i + n..e)
                                .filter(|&k| cs[k] == '|' && cs[k - 1] != '\\')
                                .count();
                            i = e + n;
                        }
                        None => i += n,
                    }
                    continue;
                }
                '<' if cs
                    .get(i + 1)
                    .is_some_and(|&c| c.is_ascii_alphabetic() || "/!?".contains(c)) =>
                {
                    let word: String = cs[i + 1..]
                        .iter()
                        .take_while(|&&c| c.is_ascii_alphanumeric() || c == '/' || c == ':')
                        .collect();
                    out.push(format!("<{word}"));
                }
                ']' if cs.get(i + 1) == Some(&'(') => {
                    let dest: String = cs[i + 2..]
                        .iter()
                        .take_while(|&&c| c != ')' && c != ' ')
                        .collect();
                    out.push(format!("]({dest}"));
                }
                '|' => cells += 1,
                _ => {}
            }
            i += 1;
        }
        if row {
            out.push(format!("a row of {cells} separators"));
        }
    }
    out
}

/// `report.md` of a run of the [`EVIL`] model: the name shown as text, nothing live.
fn assert_report_safe(md: &str) {
    assert_report_inert(md);
    assert!(
        md.contains(r"&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the name is shown as text:\n{md}"
    );
}

/// `report.md` with no control character, no tag and no link but qtune's own.
fn assert_report_inert(md: &str) {
    assert_terminal_safe("report.md", md);
    // The link syntax stays, escaped (`\[click\](javascript:...)`): [`live_markdown`] checks
    // that no link forms.
    for bad in ["<script", "<img", "\nMODEL="] {
        assert!(!md.contains(bad), "report.md holds {bad:?}:\n{md}");
    }
    for l in live_markdown(md) {
        assert!(
            l == "<sub"
                || l == "</sub"
                || l.starts_with("a row of")
                || [
                    "](results.json",
                    "](journal.jsonl",
                    "](logs/",
                    "](launch.sh"
                ]
                .contains(&l.as_str())
                || (l.starts_with("](") && l.ends_with(".png") || l.ends_with(".svg")),
            "report.md: {l:?} is live:\n{md}"
        );
    }
}

/// A replayed tune (no server) of the [`EVIL`] model, in a folder with a tab, then `report`,
/// `script`, `profile export` and `inspect` of it: every terminal line and report.md keep the
/// name as data, and qtune accepts its own run (today's main refuses it: "was it edited?").
/// A results.json edited to hold a NUL in the model path is still refused in one line.
#[test]
fn a_hostile_model_name_and_a_tab_in_its_path_are_data_and_the_run_is_accepted() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let model = evil_model(tmp.path());
    let run = tmp.path().join("run");
    let o = qtune(&data)
        .arg("tune")
        .arg("--replay")
        .arg(fixture_journal())
        .args(["--space", "quick", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_output_safe(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(r"Evil\x1b]0;PWNED TITLE\x07\x1b[2J\nMODEL=/etc/shadow\r<script>"),
        "the name is shown escaped: {}",
        text(&o)
    );
    // The command, the last line, names the model exactly (bash's $'...' for the tab).
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.trim_end().lines().last().unwrap();
    let words = qtune::config::split_shell_line(last).unwrap();
    assert!(
        words.iter().any(|w| Path::new(w) == model),
        "{last} names {}",
        model.display()
    );
    // Stored raw: JSON is data.
    let stored: TuneResult =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(stored.model.name.as_deref(), Some(EVIL));
    assert_report_safe(&std::fs::read_to_string(run.join("report.md")).unwrap());

    // qtune accepts the run it wrote.
    std::fs::remove_file(run.join("report.md")).unwrap();
    let o = qtune(&data).arg("report").arg(&run).output().unwrap();
    assert!(o.status.success(), "report: {}", text(&o));
    assert_output_safe(&o);
    assert_report_safe(&std::fs::read_to_string(run.join("report.md")).unwrap());
    let script = tmp.path().join("launch.sh");
    let o = qtune(&data)
        .args(["script", "--systemd", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "script: {}", text(&o));
    assert_output_safe(&o);
    let n = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(n.status.success(), "{}", text(&n));
    let profile = tmp.path().join("p.yaml");
    let o = qtune(&data)
        .args(["profile", "export"])
        .arg(&run)
        .arg("--out")
        .arg(&profile)
        .output()
        .unwrap();
    assert!(o.status.success(), "profile export: {}", text(&o));
    assert_output_safe(&o);
    assert!(profile.is_file());

    // inspect shows the name escaped, on its line.
    let o = qtune(&data).arg("inspect").arg(&model).output().unwrap();
    assert!(o.status.success(), "inspect: {}", text(&o));
    assert_output_safe(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("model "), "{out}");
    assert!(
        first.contains(r"models\tand a tab/evil.gguf (Evil\x1b]0;"),
        "{out}"
    );
    assert!(first.ends_with(r"txt.exe\u{0085})"), "{out}");

    // An edited results.json (a NUL in the model path: no path holds one) is still refused.
    let p = run.join("results.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["model_path"] = format!("{}\u{0}x", model.display()).into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let err = one_line_failure(&qtune(&data).arg("report").arg(&run).output().unwrap());
    assert!(
        err.contains("not a valid qtune result: model_path holds a NUL"),
        "{err}"
    );
}

/// The same with the real llama-server: a real tune of a tiny synthetic model whose
/// `general.name` is hostile, in a folder with a tab in its name.
#[test]
fn a_real_tune_of_a_hostile_model_keeps_its_name_as_data() {
    let Some(server) = support::real_server() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let model = evil_model(tmp.path());
    let run = tmp.path().join("run");
    let o = qtune(&data)
        .arg("tune")
        .arg("--model")
        .arg(&model)
        .arg("--server")
        .arg(&server)
        .args(["--space", "demo", "--budget-trials", "2", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_output_safe(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(r"Evil\x1b]0;PWNED TITLE\x07"),
        "{}",
        text(&o)
    );
    assert_report_safe(&std::fs::read_to_string(run.join("report.md")).unwrap());
    for args in [
        vec!["report".into(), run.display().to_string()],
        vec![
            "profile".into(),
            "export".into(),
            run.display().to_string(),
            "--out".into(),
            tmp.path().join("p.yaml").display().to_string(),
        ],
        vec![
            "script".into(),
            "--from".into(),
            run.display().to_string(),
            "--out".into(),
            tmp.path().join("l.sh").display().to_string(),
        ],
    ] {
        let o = qtune(&data).args(&args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert_output_safe(&o);
    }
}

/// A recorded trace from outside (issue 48's new surfaces): a file name with an escape
/// sequence, a tag and link syntax, a header whose fields hold the same. A tune replaying it
/// (on the fake server: the replay's numbers do not matter here) and `qtune trace show` keep
/// all of it as data: escaped on every terminal line, inert in report.md.
#[test]
fn a_trace_from_outside_is_data_on_the_terminal_and_in_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let header = serde_json::json!({"type":"header","format":"qtune-trace","version":1,
        "qtune_version":"0\u{1b}[31m<script>","started_at":"2026\u{1b}]0;T\u{7}",
        "upstream":"http://x\nMODEL=/etc/shadow <img src=x onerror=alert(1)>",
        "server":{"build_info":"b\u{1b}[2J","model_file":"m\u{1b}]0;TITLE\u{7}<script>.gguf"},
        "model":{"n_ctx":4096}});
    let mut body = format!("{header}\n");
    for id in 1..=4u64 {
        let at = id as f64 * 100.0;
        let line = serde_json::json!({"type":"request","id":id,"endpoint":"/completion",
            "stream":false,"arrived_ms":at,"first_byte_ms":at + 1.0,"ended_ms":at + 2.0,
            "overlapped":[],"status":200,"outcome":"ok","prompt_tokens":(1..=32).collect::<Vec<u32>>(),
            "n_generated":8,"max_tokens":null,"note":"\u{1b}[2J<script>",
            "timings":{"cache_n":0,"prompt_n":32,"prompt_ms":1.0,"predicted_n":8,"predicted_ms":1.0}});
        body.push_str(&format!("{line}\n"));
    }
    let trace = tmp
        .path()
        .join("evil\u{1b}]0;TITLE\u{7}<img src=x onerror=alert(1)>](javascript:x)\u{202e}.jsonl");
    std::fs::write(&trace, body).unwrap();
    let run = tmp.path().join("run");
    let o = qtune(tmp.path())
        .arg("tune")
        .arg("--model")
        .arg(qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap())
        .args(["--ctx", "4096", "--budget-trials", "2", "--server"])
        .arg(support::trial::fake_server())
        .arg("--out")
        .arg(&run)
        .arg("--workload")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_output_safe(&o);
    let all = text(&o);
    assert!(all.contains(r"evil\x1b]0;TITLE\x07<img"), "{all}");
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert_report_inert(&md);
    assert!(md.contains("evil"), "{md}");
    let o = qtune(tmp.path())
        .args(["trace", "show"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_output_safe(&o);
}

/// A workload whose name holds a control character is refused in one line (today's main
/// takes it and prints it raw).
#[test]
fn a_workload_name_with_a_control_character_is_refused_in_one_line() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tiny = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    for name in [
        r#""chat\e]0;PWNED\a""#,
        r#""chat\nMODEL=/etc/shadow""#,
        r#""chat\u202Etxt""#,
    ] {
        let w = tmp.path().join("w.yaml");
        std::fs::write(
            &w,
            format!("name: {name}\nshapes:\n  - {{name: a, new: 64, gen: 16}}\n"),
        )
        .unwrap();
        let o = qtune(tmp.path())
            .arg("tune")
            .arg("--replay")
            .arg(fixture_journal())
            .args(["--space", "quick", "--model"])
            .arg(&tiny)
            .arg("--workload")
            .arg(&w)
            .arg("--out")
            .arg(tmp.path().join("run"))
            .output()
            .unwrap();
        let err = one_line_failure(&o);
        assert!(
            err.contains("the workload's name") && err.contains("control or invisible character"),
            "{err}"
        );
        assert!(!tmp.path().join("run").join("results.json").exists());
    }
}

/// `compare` checks its model as `tune` does: a missing file, a folder and a file that is not
/// a GGUF get the same one-line error, before any server is looked for.
#[test]
fn compare_checks_its_model_as_tune_does() {
    let tmp = tempfile::tempdir().unwrap();
    let not_gguf = tmp.path().join("notes.gguf");
    std::fs::write(&not_gguf, "just some text, not a model\n").unwrap();
    let dir = tmp.path().join("a-folder.gguf");
    std::fs::create_dir(&dir).unwrap();
    for model in [tmp.path().join("missing.gguf"), dir, not_gguf] {
        let m = model.display().to_string();
        let o = qtune(tmp.path())
            .arg("compare")
            .arg(format!("llama-server -m '{m}' -c 4096 -np 1"))
            .arg(format!("llama-server -m '{m}' -c 4096 -np 1 -ub 256"))
            .output()
            .unwrap();
        let compare_err = one_line_failure(&o);
        let o = qtune(tmp.path())
            .arg("tune")
            .arg("--replay")
            .arg(fixture_journal())
            .args(["--space", "quick", "--model"])
            .arg(&model)
            .output()
            .unwrap();
        let tune_err = one_line_failure(&o);
        assert_eq!(compare_err, tune_err, "{m}");
        assert!(compare_err.contains(&m), "{compare_err}");
    }
}

/// `tune --from-profile` takes a profile's name, as `plan --profile` and `profile show` do
/// (today's main reads the name as a file path and fails).
#[test]
fn tune_from_profile_takes_the_names_plan_takes() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let tiny = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    let replay = |run: &Path, extra: &[&str]| {
        qtune(&data)
            .arg("tune")
            .arg("--replay")
            .arg(fixture_journal())
            .args(["--space", "quick", "--model"])
            .arg(&tiny)
            .args(extra)
            .arg("--out")
            .arg(run)
            .output()
            .unwrap()
    };
    let first = tmp.path().join("first");
    let o = replay(&first, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let file = tmp.path().join("exported.yaml");
    let o = qtune(&data)
        .args(["profile", "export"])
        .arg(&first)
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = qtune(&data)
        .args(["profile", "import"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let profile = qtune::profile::load_profile(&file).unwrap();
    let slug = qtune::profile::slug(&profile.name);
    for (i, name) in [profile.name.as_str(), slug.as_str()]
        .into_iter()
        .enumerate()
    {
        let o = qtune(&data)
            .args(["profile", "show", name])
            .output()
            .unwrap();
        assert!(o.status.success(), "profile show {name}: {}", text(&o));
        let run = tmp.path().join(format!("from-{i}"));
        let o = replay(&run, &["--from-profile", name]);
        assert!(o.status.success(), "--from-profile {name}: {}", text(&o));
        let inputs: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
        assert_eq!(
            inputs["start"],
            serde_json::to_value(profile.winner.config.base()).unwrap(),
            "{inputs}"
        );
    }
    let o = replay(
        &tmp.path().join("none"),
        &["--from-profile", "no-such-profile"],
    );
    let err = one_line_failure(&o);
    assert!(err.contains("no profile 'no-such-profile'"), "{err}");
}

/// Hostile text: arbitrary strings, and strings built from the fragments that matter (escape
/// sequences, line breaks, tags, link syntax, table pipes, backticks, bidi controls).
fn hostile() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("\u{1b}]0;T\u{7}".to_string()),
        Just("\u{1b}[2J".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("<script>alert(1)</script>".to_string()),
        Just("<img src=x onerror=alert(1)>".to_string()),
        Just("[x](javascript:alert(1))".to_string()),
        Just("![i](x.png)".to_string()),
        Just("<!--".to_string()),
        Just("<https://evil.example>".to_string()),
        Just("|".to_string()),
        Just("`".to_string()),
        Just("```".to_string()),
        Just("\\".to_string()),
        Just("&lt;".to_string()),
        Just("\u{202e}".to_string()),
        Just("\u{85}".to_string()),
        Just("\u{2028}".to_string()),
        Just("# ".to_string()),
        Just("**".to_string()),
        any::<char>().prop_map(|c| c.to_string()),
        "[a-z ]{0,6}",
    ];
    prop_oneof![
        prop::collection::vec(fragment, 0..12).prop_map(|v| v.concat()),
        any::<String>(),
    ]
    // Never empty: a field's presence must not depend on the draw.
    .prop_map(|s| format!("a{s}"))
}

/// A result whose outside fields all hold `s` (a path without the NUL and line breaks qtune
/// never stores in one; a version line without a line break).
fn result_with(s: &str) -> TuneResult {
    let path_text: String = s
        .chars()
        .filter(|c| !matches!(c, '\n' | '\r' | '\0'))
        .collect();
    let model = PathBuf::from(format!("/models/{path_text}.gguf"));
    let server = PathBuf::from(format!("/opt/{path_text}/llama-server"));
    let mut r = qtune::run::sample::gpu_result(&server, &model);
    r.model.name = Some(s.to_string());
    r.inputs.server_version = format!("version: {}", s.replace('\n', " "));
    for g in &mut r.inputs.hardware.gpus {
        g.name = s.to_string();
    }
    for g in &mut r.inputs.gpu_budgets {
        g.name = s.to_string();
    }
    r.inputs.hardware.host.cpu_model = s.to_string();
    r.inputs.hardware.host.os = s.to_string();
    r.inputs.hardware.driver_version = Some(s.to_string());
    r.inputs.space.description = s.to_string();
    r.warnings.push(s.to_string());
    for t in &mut r.trials {
        t.message = s.to_string();
        t.warnings.push(s.to_string());
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any string in a model's metadata or a result's free-text fields: the terminal renderers
    /// (`inspect`, `hw`, the tune summary) give lines without control characters, as many
    /// lines as for a plain name; report.md has no raw control character, as many lines as
    /// for a plain name, and nothing live (tags, links, table cells) that the plain report
    /// does not have. qtune's own schema check accepts the result.
    #[test]
    fn the_renderers_keep_any_outside_text_as_data(s in hostile()) {
        let r = result_with(&s);
        let plain = result_with("a");
        r.check_schema().unwrap();
        let md = qtune::report::markdown::render(&r, &[]);
        let plain_md = qtune::report::markdown::render(&plain, &[]);
        prop_assert!(!md.chars().any(|c| c != '\n' && is_hidden(c)), "{md}");
        prop_assert_eq!(md.lines().count(), plain_md.lines().count(), "{}", md);
        prop_assert_eq!(live_markdown(&md), live_markdown(&plain_md), "{}", md);

        let term = |r: &TuneResult| -> Vec<String> {
            let inspect = qtune::model::inspect::build(
                &r.inputs.model_path,
                &r.model,
                4096,
                qtune::config::KvType::F16,
                Some(20_000.0),
                r.inputs.hardware.summary(),
            );
            vec![
                qtune::escape::terminal_lines(&qtune::report::summary::table(r)),
                qtune::escape::terminal_lines(&qtune::model::inspect::render_text(&inspect)),
                qtune::escape::terminal_lines(&qtune::hardware::render_text(&r.inputs.hardware)),
            ]
        };
        for (got, want) in term(&r).iter().zip(term(&plain)) {
            prop_assert!(!got.chars().any(|c| c != '\n' && is_hidden(c)), "{}", got);
            prop_assert_eq!(got.lines().count(), want.lines().count(), "{}", got);
        }
        let t = qtune::escape::terminal(&s);
        prop_assert!(!t.chars().any(is_hidden));
        let m = qtune::escape::markdown(&s);
        prop_assert!(!m.chars().any(is_hidden) && !m.contains('<') && !m.contains('>'));
        prop_assert!(live_markdown(&m).is_empty(), "{}", m);
    }
}
