//! Issue 33: property-based fuzzing (proptest, bounded case counts so CI runs it in seconds)
//! of the GGUF header reader (and the layout built from it), the search-space parser and the
//! profile parser. Every case must end with a correct result or a clear one-line error,
//! within 10 s, and the whole run within 256 MB of peak memory.

use proptest::prelude::*;
use qtune::model::ggml_type::GgmlType;
use qtune::model::gguf::{self, GgufValue, TensorSpec};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const CASES: u32 = 192;
const CASE_LIMIT: Duration = Duration::from_secs(10);

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Peak resident memory of this test process so far, MiB (Linux `ru_maxrss` is KiB).
fn peak_rss_mib() -> u64 {
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    r.ru_maxrss as u64 / 1024
}

fn within_limits(t0: Instant, what: &str) {
    assert!(t0.elapsed() < CASE_LIMIT, "{what}: took {:?}", t0.elapsed());
    assert!(
        peak_rss_mib() < 256,
        "{what}: peak memory {} MiB",
        peak_rss_mib()
    );
}

fn one_line(e: &str, what: &str) {
    assert!(!e.trim().is_empty(), "{what}: empty error");
    assert_eq!(e.trim_end().lines().count(), 1, "{what}: {e}");
}

/// A small, valid MoE model file: the tiny model's metadata without its tokenizer, and a
/// handful of small tensors named as llama.cpp names them.
fn base_gguf() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let tiny = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
        let g = gguf::read(&tiny).unwrap();
        let arch = g.get_str("general.architecture").unwrap().to_string();
        let mut md: Vec<(String, GgufValue)> = g
            .metadata
            .iter()
            .filter(|(k, _)| !k.starts_with("tokenizer."))
            .cloned()
            .collect();
        md.push((format!("{arch}.vocab_size"), GgufValue::U32(64)));
        let blocks = g.get_u64(&format!("{arch}.block_count")).unwrap();
        let mut ts = vec![TensorSpec {
            name: "token_embd.weight".into(),
            dims: vec![32, 64],
            ggml_type: GgmlType::F32,
        }];
        for b in 0..blocks {
            for n in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "attn_norm"] {
                ts.push(TensorSpec {
                    name: format!("blk.{b}.{n}.weight"),
                    dims: vec![32, 4],
                    ggml_type: GgmlType::F32,
                });
            }
        }
        let mut out = Vec::new();
        gguf::write_gguf(&mut out, &md, &ts, 32, |_, t, w| {
            w.write_all(&vec![0u8; t.bytes().unwrap() as usize])
        })
        .unwrap();
        let p = scratch().join("base.gguf");
        std::fs::write(&p, &out).unwrap();
        gguf::read(&p).expect("the base file reads");
        out
    })
}

fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn case_path(name: &str) -> PathBuf {
    let n = std::thread::current()
        .name()
        .unwrap_or("t")
        .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    scratch().join(format!("{n}-{name}"))
}

/// Counts and lengths a hostile header would claim.
fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u32::MAX as u64),
        Just(1u64 << 31),
        Just(1u64 << 32),
        Just(u64::MAX),
        Just(u64::MAX / 24),
        any::<u64>(),
    ]
}

/// One mutation of a file: overwrite bytes, plant a u64, or cut it short.
#[derive(Debug, Clone)]
enum Mutation {
    Byte(usize, u8),
    Word(usize, u64),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        4 => (any::<usize>(), interesting_u64()).prop_map(|(i, v)| Mutation::Word(i, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(base: &[u8], muts: &[Mutation], header_only: bool) -> Vec<u8> {
    let mut b = base.to_vec();
    // Most of the interest is in the header (its first few KiB).
    let span = if header_only {
        b.len().min(4096)
    } else {
        b.len()
    };
    for m in muts {
        if b.is_empty() {
            break;
        }
        let span = span.min(b.len());
        match *m {
            Mutation::Byte(i, v) => b[i % span] = v,
            Mutation::Word(i, v) => {
                let at = i % span;
                for (k, byte) in v.to_le_bytes().iter().enumerate() {
                    if let Some(x) = b.get_mut(at + k) {
                        *x = *byte;
                    }
                }
            }
            Mutation::Truncate(i) => b.truncate(i % (b.len() + 1)),
        }
    }
    b
}

proptest! {
    #![proptest_config(config())]

    /// Mutated model headers: read and laid out (whole, and as `plan` reads them), or refused
    /// with one line.
    #[test]
    fn gguf_headers_read_or_fail_with_one_line(
        muts in prop::collection::vec(mutation(), 1..6),
        header_only in any::<bool>(),
    ) {
        let bytes = mutate(base_gguf(), &muts, header_only);
        let p = case_path("m.gguf");
        std::fs::write(&p, &bytes).unwrap();
        let t0 = Instant::now();
        match gguf::read(&p) {
            Ok(g) => {
                if let Err(e) = qtune::model::layout::from_gguf(&g) {
                    one_line(&format!("{e:#}"), "layout");
                }
            }
            Err(e) => one_line(&e.to_string(), "gguf"),
        }
        // `qtune plan`'s read, which takes a file cut after its header.
        if let Err(e) = qtune::model::header::load_for_plan(&p) {
            one_line(&format!("{e:#}"), "plan's header read");
        }
        within_limits(t0, "gguf");
    }
}

fn demo_space() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("search-spaces/demo.yaml"))
        .unwrap()
}

fn a_profile() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    std::fs::read_to_string(&files[0]).unwrap()
}

/// Text edits: insert YAML-significant snippets, delete spans, or replace a number with an
/// extreme one, at positions anywhere in the text.
#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, String),
    Delete(usize, usize),
    Number(usize, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let snippet = prop_oneof![
        Just("[".to_string()),
        Just("{".to_string()),
        Just("]".to_string()),
        Just("\n".to_string()),
        Just(": ".to_string()),
        Just("- ".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("#".to_string()),
        Just("  ".to_string()),
        Just("\u{0}".to_string()),
        Just("$(touch PWNED)".to_string()),
        "\\PC{0,12}",
    ];
    let number = prop_oneof![
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("1e308".to_string()),
        Just(".nan".to_string()),
        Just("18446744073709551616".to_string()),
    ];
    prop_oneof![
        3 => (any::<usize>(), snippet).prop_map(|(i, s)| Edit::Insert(i, s)),
        1 => (any::<usize>(), 0usize..40).prop_map(|(i, n)| Edit::Delete(i, n)),
        2 => (any::<usize>(), number).prop_map(|(i, s)| Edit::Number(i, s)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut s = text.to_string();
    let at = |s: &String, i: usize| {
        let mut i = i % (s.len() + 1);
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    for e in edits {
        match e {
            Edit::Insert(i, t) => {
                let i = at(&s, *i);
                s.insert_str(i, t);
            }
            Edit::Delete(i, n) => {
                let i = at(&s, *i);
                let j = at(&s, i + n).max(i);
                s.replace_range(i..j, "");
            }
            Edit::Number(i, t) => {
                // Replace the first number at or after the position.
                let i = at(&s, *i);
                if let Some(k) = s[i..].find(|c: char| c.is_ascii_digit()) {
                    let start = i + k;
                    let end = s[start..]
                        .find(|c: char| !c.is_ascii_digit())
                        .map_or(s.len(), |e| start + e);
                    s.replace_range(start..end, t);
                }
            }
        }
    }
    s
}

/// Deeply nested or repeated text, up to 200,000 levels.
fn deep() -> impl Strategy<Value = String> {
    (
        0usize..200_000,
        prop_oneof![Just("["), Just("{a: "), Just("- ")],
    )
        .prop_map(|(n, open)| {
            let close = match open {
                "[" => "]",
                "{a: " => "}",
                _ => "",
            };
            format!("name: x\nvary: {}1{}\n", open.repeat(n), close.repeat(n))
        })
}

proptest! {
    #![proptest_config(config())]

    /// Edited search spaces: parsed and validated, or refused with one line.
    #[test]
    fn spaces_parse_or_fail_with_one_line(edits in prop::collection::vec(edit(), 1..6)) {
        let text = apply(&demo_space(), &edits);
        let t0 = Instant::now();
        if let Err(e) = qtune::space::parse(&text, "fuzz.yaml") {
            one_line(&e.to_string(), "space");
        }
        within_limits(t0, "space");
    }

    /// Edited profiles: parsed and validated, or refused with one line.
    #[test]
    fn profiles_parse_or_fail_with_one_line(edits in prop::collection::vec(edit(), 1..6)) {
        let text = apply(&a_profile(), &edits);
        let t0 = Instant::now();
        if let Err(e) = qtune::profile::parse_profile(&text, "fuzz.yaml") {
            one_line(&format!("{e:#}"), "profile");
        }
        within_limits(t0, "profile");
    }

    /// Nesting up to 200,000 levels deep: refused at once, in both parsers.
    #[test]
    fn deep_nesting_fails_fast(text in deep()) {
        let t0 = Instant::now();
        if let Err(e) = qtune::space::parse(&text, "deep.yaml") {
            one_line(&e.to_string(), "deep space");
        }
        if let Err(e) = qtune::profile::parse_profile(&text, "deep.yaml") {
            one_line(&format!("{e:#}"), "deep profile");
        }
        within_limits(t0, "deep");
    }
}

/// The unedited inputs are accepted (so the properties above test edits of valid files).
#[test]
fn the_unedited_inputs_are_valid() {
    qtune::space::parse(&demo_space(), "demo.yaml").unwrap();
    qtune::profile::parse_profile(&a_profile(), "profile.yaml").unwrap();
    let p = scratch().join("valid.gguf");
    std::fs::write(&p, base_gguf()).unwrap();
    qtune::model::layout::from_gguf(&gguf::read(&p).unwrap()).unwrap();
}

/// One launch's numbers: depth-0 samples at `gen0` and `pp0` tok/s, and one workload request
/// of 1,000 new prompt tokens read at `pp` tok/s that generates at `gen` tok/s.
fn launch(gen0: f64, pp0: f64, gen: f64, pp: f64) -> qtune::trial::Metrics {
    use qtune::trial::{Metrics, Stat};
    use qtune::workloads::{Shape, ShapeTiming};
    let shape = ShapeTiming {
        shape: Shape {
            name: "chat".into(),
            held: 500,
            new: 1000,
            gen: 100,
            weight: 1.0,
        },
        cache_n: 500,
        prompt_n: 1000,
        prompt_ms: 1000.0 / pp * 1000.0,
        gen_tps: gen,
        gen_measured: 100,
        draft_n: None,
        draft_n_accepted: None,
    };
    Metrics {
        drafts: None,
        gen_tps: Stat::from_samples(&[gen0 * 0.99, gen0, gen0 * 1.01]).unwrap(),
        prompt_tps: Stat::from_samples(&[pp0 * 0.99, pp0, pp0 * 1.01]).unwrap(),
        ttft_ms: Stat::from_samples(&[100.0]).unwrap(),
        gen_tps_at_depth: None,
        request_s: shape.request_s(),
        shapes: vec![shape],
        replay: None,
    }
}

proptest! {
    #![proptest_config(config())]

    /// Issue 53: for any factor of 100 or more between a workload request's speed and the
    /// same launch's depth-0 samples, in generation or prompt processing, whichever of the two
    /// is the faster, the trial is never ok (the absolute ceiling alone let 49,000 tok/s
    /// beside 25 pass).
    #[test]
    fn a_workload_100x_off_its_own_samples_is_never_ok(
        factor in 100.0f64..1e4,
        field in 0usize..2,
        workload_faster in any::<bool>(),
        gen0 in 1.0f64..400.0,
        pp0 in 20.0f64..4000.0,
    ) {
        use qtune::trial::plausible::{implausible_speed, SpeedCeiling};
        let off = |base: f64| if workload_faster { base * factor } else { base / factor };
        let (gen, pp) = if field == 0 { (off(gen0), pp0) } else { (gen0, off(pp0)) };
        let m = launch(gen0, pp0, gen, pp);
        let v = implausible_speed(&m, &SpeedCeiling::ABSOLUTE);
        prop_assert!(v.is_some(), "ok: gen {gen} against {gen0}, prompt {pp} against {pp0}");
        let v = v.unwrap();
        prop_assert_eq!(v.kind, qtune::trial::OutcomeKind::Implausible);
        prop_assert_eq!(v.message.lines().count(), 1);
    }

    /// The same launch with the two within 50x (depth and a cached prefix move real speeds a
    /// few times) is ok: the check is by factor, not a blanket refusal.
    #[test]
    fn a_workload_within_50x_of_its_samples_is_ok(
        factor in 1.0f64..50.0,
        field in 0usize..2,
        workload_faster in any::<bool>(),
        gen0 in 1.0f64..400.0,
        pp0 in 20.0f64..4000.0,
    ) {
        use qtune::trial::plausible::{implausible_speed, SpeedCeiling};
        let off = |base: f64| if workload_faster { base * factor } else { base / factor };
        let (gen, pp) = if field == 0 { (off(gen0), pp0) } else { (gen0, off(pp0)) };
        let v = implausible_speed(&launch(gen0, pp0, gen, pp), &SpeedCeiling::ABSOLUTE);
        prop_assert!(v.is_none(), "{:?}", v.map(|v| v.message));
    }
}
