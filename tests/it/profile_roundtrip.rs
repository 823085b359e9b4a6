//! Export a run's result, import it elsewhere, list and show it: through the real binary.

use crate::support;

use qtune::profile::{load_profile, Profile};
use support::profile::{qtune, stderr, stdout, write_run_dir};

#[test]
fn export_import_list_show_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    write_run_dir(&run);
    let out_file = tmp.path().join("shared.yaml");

    let o = qtune(
        tmp.path(),
        &["profile", "export", "run", "--out", "shared.yaml"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let yaml = std::fs::read_to_string(&out_file).unwrap();
    // Nothing that identifies the box or where files live.
    for secret in ["/home/alice", "secret", "GPU-1234", "trial.log"] {
        assert!(!yaml.contains(secret), "profile leaks {secret}:\n{yaml}");
    }
    let exported: Profile = load_profile(&out_file).unwrap();
    assert_eq!(exported.winner.config.n_cpu_moe, Some(20));
    assert_eq!(exported.winner.tg.median, 40.0);
    assert_eq!(exported.winner.tg.samples, 3);
    assert_eq!(exported.hardware.free_vram_at_start_mib, 15800);
    assert_eq!(exported.hardware.vram_budget_mib, Some(15288));
    assert_eq!(exported.model.fingerprint, "fedcba9876543210");
    assert_eq!(exported.llama_cpp_version, "version: 11434 (abc1234)");
    // Skipped configs are not measurements; the OOM one is kept as a failure, last.
    assert_eq!(exported.front.len(), 5);
    assert_eq!(exported.front[0].config, exported.winner.config);
    assert!(exported.front[0].pareto);
    assert_eq!(
        exported.front.last().unwrap().outcome,
        qtune::trial::OutcomeKind::OomRuntime
    );

    // Import into another "box" (a fresh current directory).
    let other = tempfile::tempdir().unwrap();
    let o = qtune(
        other.path(),
        &["profile", "import", out_file.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stored: Vec<_> = std::fs::read_dir(other.path().join("profiles"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(load_profile(&stored[0]).unwrap(), exported);

    // Importing the same profile again is fine and changes nothing.
    let o = qtune(
        other.path(),
        &["profile", "import", out_file.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("already imported"), "{}", stdout(&o));

    // A different profile under the same name is refused, the stored one is kept.
    let changed = yaml.replace("median: 40.0", "median: 45.0");
    assert_ne!(changed, yaml);
    let changed_file = tmp.path().join("changed.yaml");
    std::fs::write(&changed_file, changed).unwrap();
    let o = qtune(
        other.path(),
        &["profile", "import", changed_file.to_str().unwrap()],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    assert_eq!(load_profile(&stored[0]).unwrap(), exported);

    let o = qtune(other.path(), &["profile", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&o);
    assert!(list.contains(&exported.name), "{list}");
    assert!(list.contains("Qwen3.5-35B-A3B Q4_K_M"), "{list}");
    assert!(list.contains("NVIDIA GeForce RTX 4080"), "{list}");
    assert!(list.contains("40.0 t/s"), "{list}");

    for key in [exported.name.as_str(), stored[0].to_str().unwrap()] {
        let o = qtune(other.path(), &["profile", "show", key]);
        assert!(o.status.success(), "{}", stderr(&o));
        let show = stdout(&o);
        assert!(
            show.contains("llama-server -m MODEL.gguf -c 8192 -np 1 -ngl 999 --n-cpu-moe 20 -t 8"),
            "{show}"
        );
        assert!(show.contains("oom-runtime"), "{show}");
    }
}

#[test]
fn list_with_no_profiles_of_ones_own_says_how_to_add_one_and_shows_the_built_in_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let o = qtune(tmp.path(), &["profile", "list"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("qtune profile import"), "{err}");
    // From any directory: the profiles shipped with qtune, by the slug 'profile show' takes.
    assert!(
        stdout(&o).contains("qwen3.5-35b-a3b-q4_k_m-h200-16gib (built-in)"),
        "{}",
        stdout(&o)
    );
    let o = qtune(
        tmp.path(),
        &["profile", "show", "qwen3.5-35b-a3b-q4_k_m-h200-16gib"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout(&o).starts_with("# built-in:qwen3.5-35b-a3b-q4_k_m-h200-16gib"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn export_of_a_run_without_winner_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut v = support::profile::tune_result_json();
    v["winner"] = serde_json::Value::Null;
    std::fs::write(tmp.path().join("results.json"), v.to_string()).unwrap();
    let o = qtune(tmp.path(), &["profile", "export", ".", "--out", "p.yaml"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no winner"), "{}", stderr(&o));
    assert!(!tmp.path().join("p.yaml").exists());
}

/// Issue 43: `profile export` warns on stderr when the tune's verdict did not decide the
/// winner, or when the winner's own measurements spread wider than a race decides (a plan
/// would predict from them); the profile is written all the same. A proven, steady winner
/// exports without a word.
#[test]
fn export_warns_about_an_undecided_or_noisy_winner() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let mut r = support::profile::tune_result_json();
    let write = |r: &serde_json::Value| {
        std::fs::write(
            run.join("results.json"),
            serde_json::to_vec_pretty(r).unwrap(),
        )
        .unwrap()
    };
    r["winner"]["status"] = "proven".into();
    write(&r);
    let o = qtune(tmp.path(), &["profile", "export", "run", "--out", "a.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));

    let noisy = qtune::trial::Stat::from_samples(&[2.0, 40.0, 41.0]).unwrap();
    r["winner"]["status"] = "likely".into();
    r["winner"]["gen_tps"] = serde_json::to_value(&noisy).unwrap();
    write(&r);
    let o = qtune(tmp.path(), &["profile", "export", "run", "--out", "b.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("qtune: warning: the winner is faster by its estimate only"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "qtune: warning: the winner's generation speeds spread {:.0} % between its measurements",
            noisy.spread_pct
        )),
        "{err}"
    );
    assert!(load_profile(&tmp.path().join("b.yaml")).is_ok());

    // Never raced: the verdict did not decide.
    r["winner"]["status"] = "unraced".into();
    write(&r);
    let o = qtune(tmp.path(), &["profile", "export", "run", "--out", "c.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the tune's verdict did not decide that the winner is faster"),
        "{}",
        stderr(&o)
    );
}

/// Issue 43: the built-in profiles predate workloads: `profile show` and `profile list` say
/// what they were tuned for, and one whose winner measured slower in generation than its
/// baseline says that too.
#[test]
fn built_in_profiles_say_what_they_were_tuned_for() {
    let tmp = tempfile::tempdir().unwrap();
    let o = qtune(
        tmp.path(),
        &["profile", "show", "qwen3.5-35b-a3b-q4_k_m-h200-16gib"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "Tuned for: generation speed with a 2048-token prompt and 64 generated tokens, before qtune measured workloads"
        ),
        "{out}"
    );
    assert!(
        out.contains("its winner measured 1.1 % slower in generation than its baseline"),
        "{out}"
    );
    assert!(
        !out.contains("llama.cpp version:"),
        "the version without its prefix: {out}"
    );
    let o = qtune(tmp.path(), &["profile", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&o);
    let row = list
        .lines()
        .find(|l| l.starts_with("qwen3.5-35b-a3b-q4_k_m-h200-16gib (built-in)"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.ends_with("generation (before workloads)"), "{row}");
}
