//! `qtune plan -m` from a GGUF header alone (issue 46): a file holding only a model's first
//! megabytes, or a plain-http:// URL read with one Range request (a local server,
//! tests/fixtures/range-server), plans exactly as the whole file does and says it planned from
//! the header; every other command still refuses the cut file; https://, a redirect to https, a
//! stalled server, a missing file and a header cut short are one-line errors.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::require;

fn qtune(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.args(args).env("NO_COLOR", "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = qtune(&all, &[]);
    assert!(o.status.success(), "{}", support::output_text(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", support::output_text(&o)))
}

/// The one-line error of a failed run.
fn one_line_error(o: &Output) -> String {
    assert!(!o.status.success(), "{}", support::output_text(o));
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    assert!(
        err.starts_with("qtune: error: "),
        "{}",
        support::output_text(o)
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// The tiny synthetic MoE model (64 MB, a 151k-token vocabulary in its header).
fn tiny() -> Option<PathBuf> {
    require::or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen3moe").map_err(|e| format!("{e:#}")),
        "the tiny MoE fixture",
    )
}

/// The first `n` bytes of `model`, as `dir/name`.
fn first_bytes(model: &Path, n: u64, dir: &Path, name: &str) -> PathBuf {
    let bytes = std::fs::read(model).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, &bytes[..n as usize]).unwrap();
    p
}

/// Where the header ends (the tensor data's start).
fn data_offset(model: &Path) -> u64 {
    qtune::model::gguf::read(model).unwrap().data_offset
}

/// tests/fixtures/range-server serving one file; killed on drop.
struct RangeServer {
    child: Child,
    port: u16,
    portfile: PathBuf,
    _dir: tempfile::TempDir,
}

impl RangeServer {
    fn start(file: &Path, mode: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let portfile = dir.path().join("port");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/range-server");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(file)
            .arg(&portfile)
            .arg(mode)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Ok(s) = std::fs::read_to_string(&portfile) {
                break s.trim().parse().unwrap();
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "the range server exited"
            );
            assert!(Instant::now() < deadline, "the range server did not start");
            std::thread::sleep(Duration::from_millis(100));
        };
        RangeServer {
            child,
            port,
            portfile,
            _dir: dir,
        }
    }

    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/models/{name}", self.port)
    }

    /// The request lines it logged (a line is written when a request is done with).
    fn log(&self) -> Vec<String> {
        let p = self.portfile.with_extension("log");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            if !text.is_empty() || Instant::now() > deadline {
                return text.lines().map(str::to_string).collect();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RangeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a box plan predicts for its one quant, without what names the file.
fn predictions(p: &serde_json::Value) -> serde_json::Value {
    let mut q = p["quants"][0].clone();
    let o = q.as_object_mut().unwrap();
    for k in ["recipe", "command"] {
        o.remove(k);
    }
    q
}

#[test]
fn a_header_only_file_plans_like_the_whole_file_and_says_so() {
    let Some(model) = tiny() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let len = std::fs::metadata(&model).unwrap().len();
    let header = data_offset(&model);
    assert!(header < len / 4, "a header, not most of the file: {header}");
    let head = first_bytes(&model, header + 4096, dir.path(), "head.gguf");
    let m = model.display().to_string();
    let h = head.display().to_string();

    // With --box: the same predictions; the recipe says what the plan rests on.
    let whole = json(&["--box", "rtx-5080-16gb", "-m", &m]);
    let part = json(&["--box", "rtx-5080-16gb", "-m", &h]);
    assert_eq!(predictions(&part), predictions(&whole));
    assert_eq!(part["quants"][0]["file_bytes"], len);
    let recipe = part["quants"][0]["recipe"].as_str().unwrap();
    assert!(
        recipe.contains("planned from the GGUF header only") && recipe.contains("download"),
        "{recipe}"
    );
    assert!(!whole["quants"][0]["recipe"]
        .as_str()
        .unwrap()
        .contains("header only"));

    // On this box: the same config, and a reason that says it.
    let whole = json(&["-m", &m, "--no-profile"]);
    let part = json(&["-m", &h, "--no-profile"]);
    assert_eq!(part["config"], whole["config"]);
    assert_eq!(part["predicted_host_mib"], whole["predicted_host_mib"]);
    let reasons = part["reasons"].to_string();
    assert!(
        reasons.contains("planned from the GGUF header only"),
        "{reasons}"
    );
    assert!(!whole["reasons"].to_string().contains("header only"));
    let o = qtune(&["plan", "-m", &h, "--no-profile"], &[]);
    assert!(o.status.success(), "{}", support::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("planned from the GGUF header only"),
        "{}",
        support::output_text(&o)
    );

    // Every other command still refuses the cut file.
    let e = one_line_error(&qtune(&["inspect", "-m", &h], &[]));
    assert!(e.contains("is truncated"), "{e}");

    // Cut inside the header: say to fetch more.
    let short = first_bytes(&model, header / 2, dir.path(), "short.gguf");
    let e = one_line_error(&qtune(
        &[
            "plan",
            "--box",
            "rtx-3090",
            "-m",
            &short.display().to_string(),
        ],
        &[],
    ));
    assert!(
        e.contains("ends inside its GGUF header") && e.contains("curl -L -r 0-"),
        "{e}"
    );
}

/// A model split in parts (every model past a hub's 50 GB file limit) plans from its parts'
/// headers as from the parts themselves: from the first MiB of each part on disk, or from the
/// first part's URL (each other part read at the same address under its own name); a missing
/// part is named in one line.
#[test]
fn a_split_model_plans_from_its_parts_headers() {
    let Some(model) = tiny() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (parts, heads) = (dir.path().join("parts"), dir.path().join("heads"));
    std::fs::create_dir(&parts).unwrap();
    std::fs::create_dir(&heads).unwrap();
    let first = support::split::split(&model, &parts, "Tiny-Q4_K_M", 3);
    let names: Vec<String> = (1..=3)
        .map(|i| format!("Tiny-Q4_K_M-{i:05}-of-00003.gguf"))
        .collect();
    let mut total = 0;
    for name in &names {
        let p = parts.join(name);
        total += std::fs::metadata(&p).unwrap().len();
        first_bytes(&p, data_offset(&p) + 4096, &heads, name);
    }
    let on_box = |m: &str| json(&["--box", "rtx-5080-16gb", "-m", m]);
    let whole = on_box(&first.display().to_string());
    assert_eq!(whole["quants"][0]["file_bytes"], total);
    let head = heads.join(&names[0]).display().to_string();
    let p = on_box(&head);
    assert_eq!(predictions(&p), predictions(&whole));
    let recipe = p["quants"][0]["recipe"].as_str().unwrap();
    assert!(
        recipe.contains("model in 3 files") && recipe.contains("download all 3 parts"),
        "{recipe}"
    );

    let server = RangeServer::start(&parts, "ok");
    let p = on_box(&server.url(&names[0]));
    assert_eq!(predictions(&p), predictions(&whole));
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = loop {
        let log = server.log();
        if log.len() >= 3 || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The server logs a request when its answer is sent, so the parts' order is the order in
    // which their answers finished, not the order asked: compare them sorted by name.
    let mut log = log;
    log.sort();
    for (line, name) in log.iter().zip(&names) {
        assert!(
            line.starts_with(&format!("/models/{name} range=bytes=0-")),
            "{log:?}"
        );
    }
    assert_eq!(log.len(), 3, "{log:?}");

    std::fs::remove_file(heads.join(&names[2])).unwrap();
    let e = one_line_error(&qtune(
        &["plan", "--box", "rtx-5080-16gb", "-m", &head],
        &[],
    ));
    assert!(e.contains(&format!("{} is missing", names[2])), "{e}");
}

#[test]
fn a_url_is_read_for_its_header_with_one_range_request() {
    let Some(model) = tiny() else {
        return;
    };
    let len = std::fs::metadata(&model).unwrap().len();
    let whole = json(&["--box", "rtx-5080-16gb", "-m", &model.display().to_string()]);
    let name = "Tiny-Qwen3MoE-Q4_K_M.gguf";

    let server = RangeServer::start(&model, "ok");
    let p = json(&["--box", "rtx-5080-16gb", "-m", &server.url(name)]);
    assert_eq!(predictions(&p), predictions(&whole));
    let recipe = p["quants"][0]["recipe"].as_str().unwrap();
    assert!(recipe.contains("header only"), "{recipe}");
    // The command names the file a download of the URL makes.
    let cmd: Vec<&str> = p["quants"][0]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let at = cmd.iter().position(|a| *a == "-m").unwrap();
    assert_eq!(cmd[at + 1], name, "{cmd:?}");
    // One request, for a bounded range, and the connection dropped once the header was in.
    let log = server.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].contains("range=bytes=0-67108863"), "{log:?}");
    let sent: u64 = log[0].rsplit("sent=").next().unwrap().parse().unwrap();
    assert!(sent < len / 2, "sent {sent} of {len} bytes: {log:?}");

    // On this box too.
    let part = json(&["-m", &server.url(name), "--no-profile"]);
    let local = json(&["-m", &model.display().to_string(), "--no-profile"]);
    assert_eq!(part["config"], local["config"]);
    assert!(part["reasons"].to_string().contains("header only"));

    // A range whose total length is unknown ("bytes 0-N/*", as RFC 9110 allows) is read as
    // any other (issue 48: it was refused as "a range that does not start at byte 0").
    let server = RangeServer::start(&model, "unknown-total");
    let p = json(&["--box", "rtx-5080-16gb", "-m", &server.url(name)]);
    assert_eq!(predictions(&p), predictions(&whole));

    // A server that ignores Range: its whole-file reply is read only as far as the header.
    let server = RangeServer::start(&model, "ignore-range");
    let p = json(&["--box", "rtx-5080-16gb", "-m", &server.url(name)]);
    assert_eq!(predictions(&p), predictions(&whole));
    let log = server.log();
    assert!(log[0].contains("status=200"), "{log:?}");
    let sent: u64 = log[0].rsplit("sent=").next().unwrap().parse().unwrap();
    assert!(sent < len / 2, "sent {sent} of {len} bytes: {log:?}");
}

#[test]
fn https_redirects_stalls_missing_and_cut_files_are_one_line_errors() {
    let Some(model) = tiny() else {
        return;
    };
    let plan = |url: &str, envs: &[(&str, &str)]| {
        one_line_error(&qtune(&["plan", "--box", "rtx-4090", "-m", url], envs))
    };
    let curl = "curl -L -r 0-16777215 URL -o head.gguf";
    let e = plan("https://huggingface.co/x/y/resolve/main/m.gguf", &[]);
    assert!(e.contains("no TLS") && e.contains(curl), "{e}");

    let s = RangeServer::start(&model, "https-redirect");
    let e = plan(&s.url("m.gguf"), &[]);
    assert!(
        e.contains("redirects to https://") && e.contains(curl),
        "{e}"
    );

    let s = RangeServer::start(&model, "not-found");
    let e = plan(&s.url("m.gguf"), &[]);
    assert!(e.contains("HTTP 404"), "{e}");

    let s = RangeServer::start(&model, "stall");
    let t = Instant::now();
    let e = plan(&s.url("m.gguf"), &[("QTUNE_HTTP_TIMEOUT_S", "2")]);
    assert!(e.contains("within 2 s") && e.contains(curl), "{e}");
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    drop(s);

    // Nothing listening.
    let port = support::free_port();
    let e = plan(&format!("http://127.0.0.1:{port}/m.gguf"), &[]);
    assert!(e.contains("cannot read http://127.0.0.1"), "{e}");

    // A file on the server that ends inside its header.
    let dir = tempfile::tempdir().unwrap();
    let short = first_bytes(&model, data_offset(&model) / 2, dir.path(), "short.gguf");
    let s = RangeServer::start(&short, "ok");
    let e = plan(&s.url("m.gguf"), &[]);
    assert!(
        e.contains("ends inside its GGUF header") && e.contains("cut off"),
        "{e}"
    );
}

/// A header whose tensor shapes claim more bytes than a u64 holds (two tensors of 2^56 rows,
/// packed one after the other): a one-line "corrupt" error, not a panic (issue 48).
#[test]
fn a_header_claiming_exabytes_of_weights_is_refused_in_one_line() {
    use qtune::model::gguf::{encode_header, GgufValue};
    let s = |v: &str| GgufValue::String(v.into());
    let md: Vec<(String, GgufValue)> = vec![
        ("general.architecture".into(), s("qwen3moe")),
        ("qwen3moe.block_count".into(), GgufValue::U32(2)),
        ("qwen3moe.embedding_length".into(), GgufValue::U32(256)),
        ("qwen3moe.attention.head_count".into(), GgufValue::U32(4)),
        ("qwen3moe.attention.head_count_kv".into(), GgufValue::U32(2)),
        ("qwen3moe.expert_count".into(), GgufValue::U32(4)),
        ("qwen3moe.expert_used_count".into(), GgufValue::U32(2)),
        ("qwen3moe.context_length".into(), GgufValue::U32(4096)),
    ];
    // Metadata only (alignment 1: no padding), then three tensor infos by hand, Q4_K (id 12,
    // 144 bytes a row of 256).
    let (mut h, _) = encode_header(&md, &[], 1).unwrap();
    let row = 144u64;
    let huge = row << 56;
    let tensors: [(&str, [u64; 2], u64); 3] = [
        ("blk.0.attn_q.weight", [256, 256], 0),
        ("blk.0.ffn_up_exps.weight", [256, 1 << 56], 256 * row),
        ("blk.1.ffn_up_exps.weight", [256, 1 << 56], 256 * row + huge),
    ];
    h[8..16].copy_from_slice(&(tensors.len() as u64).to_le_bytes());
    for (name, dims, offset) in tensors {
        h.extend_from_slice(&(name.len() as u64).to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(&2u32.to_le_bytes());
        for d in dims {
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.extend_from_slice(&12u32.to_le_bytes());
        h.extend_from_slice(&offset.to_le_bytes());
    }
    h.resize(h.len().div_ceil(32) * 32 + 4096, 0);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("exabytes.gguf");
    std::fs::write(&f, &h).unwrap();
    let e = one_line_error(&qtune(
        &["plan", "-m", &f.display().to_string(), "--no-profile"],
        &[],
    ));
    assert!(e.contains("is corrupt") && e.contains("1 PiB"), "{e}");
}

/// A sparse file of 100 GiB whose header claims a 50 GiB metadata key, or billions of tensors
/// or metadata entries: refused in one line without allocating them (issue 48). Run under a
/// 4 GB address-space limit, so the old code aborts on the allocation instead of reading 50 GiB
/// of zeros into memory.
#[test]
fn a_header_claiming_a_50_gib_string_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("sparse.gguf");
    let cases: [(u64, u64, &[u8], &str); 3] = [
        (
            0,
            1,
            &(50u64 << 30).to_le_bytes(),
            "header goes on past 64 MiB",
        ),
        (4_000_000_000, 0, b"", "more than a header of 64 MiB holds"),
        (0, 8_000_000_000, b"", "more than a header of 64 MiB holds"),
    ];
    for (n_tensors, n_kv, rest, what) in cases {
        let mut h = b"GGUF".to_vec();
        h.extend(3u32.to_le_bytes());
        h.extend(n_tensors.to_le_bytes());
        h.extend(n_kv.to_le_bytes());
        h.extend(rest);
        std::fs::write(&f, &h).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(100 << 30)
            .unwrap();
        let o = Command::new("sh")
            .args(["-c", "ulimit -v 4000000 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_qtune"))
            .args(["plan", "--box", "rtx-4090", "-m"])
            .arg(&f)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let e = one_line_error(&o);
        assert!(e.contains(what), "{e}");
    }
}

/// A split model's part `no` of `count` as `dir/Bomb-NNNNN-of-CCCCC.gguf`: its header (with
/// `split.tensors.count` when given) and `n` small tensors, the file as long as they need.
fn bomb_part(dir: &Path, no: u16, count: u32, claimed: Option<i32>, n: usize) {
    use qtune::model::ggml_type::GgmlType;
    use qtune::model::gguf::{encode_header, GgufValue, TensorSpec};
    let mut md = vec![
        (
            "general.architecture".to_string(),
            GgufValue::String("qwen3moe".into()),
        ),
        ("split.no".into(), GgufValue::U16(no)),
        ("split.count".into(), GgufValue::U32(count)),
    ];
    if let Some(c) = claimed {
        md.push(("split.tensors.count".into(), GgufValue::I32(c)));
    }
    let ts: Vec<TensorSpec> = (0..n)
        .map(|i| TensorSpec {
            name: format!("p{no}.t{i}"),
            dims: vec![32],
            ggml_type: GgmlType::F32,
        })
        .collect();
    let (h, _) = encode_header(&md, &ts, 32).unwrap();
    let f = dir.join(format!("Bomb-{:05}-of-{count:05}.gguf", no + 1));
    std::fs::write(&f, &h).unwrap();
    let len = h.len() as u64 + n as u64 * 128 + 4096;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Issue 53: a split-model bomb over `plan -m http://` (a header claiming 99,999 parts of
/// 1.2 M tensors each fetched 15 parts and held 2.4 GB within the 30 s limit). Every claim is
/// bounded before it is acted on: the parts count, the tensors the parts say they hold, the
/// tensors one part's header holds (counted before they are read); and a user-set timeout is
/// capped (raising `QTUNE_HTTP_TIMEOUT_S` removed the bound).
#[test]
fn a_split_model_bomb_over_http_is_refused_before_it_is_fetched() {
    let plan = |url: &str, envs: &[(&str, &str)]| {
        one_line_error(&qtune(&["plan", "--box", "rtx-4090", "-m", url], envs))
    };
    // 99,999 parts: refused from the first part's header, nothing else fetched.
    let d = tempfile::tempdir().unwrap();
    bomb_part(d.path(), 0, 99_999, Some(4), 2);
    bomb_part(d.path(), 1, 99_999, None, 2);
    let s = RangeServer::start(d.path(), "ok");
    let e = plan(&s.url("Bomb-00001-of-99999.gguf"), &[]);
    assert!(e.contains("99999 parts") && e.contains("256"), "{e}");
    assert_eq!(s.log().len(), 1, "{:?}", s.log());

    // The first part says its parts hold 3.6 M tensors.
    let d = tempfile::tempdir().unwrap();
    bomb_part(d.path(), 0, 3, Some(3_600_000), 2);
    let s = RangeServer::start(d.path(), "ok");
    let e = plan(&s.url("Bomb-00001-of-00003.gguf"), &[]);
    assert!(
        e.contains("3600000 tensors") && e.contains("corrupt"),
        "{e}"
    );
    assert_eq!(s.log().len(), 1, "{:?}", s.log());

    // The first part says 4, and the second's header holds 150,000: refused from its count,
    // before its tensor infos are read; the third part is never asked for.
    let d = tempfile::tempdir().unwrap();
    bomb_part(d.path(), 0, 3, Some(4), 2);
    bomb_part(d.path(), 1, 3, None, 150_000);
    bomb_part(d.path(), 2, 3, None, 2);
    let s = RangeServer::start(d.path(), "ok");
    let e = plan(&s.url("Bomb-00001-of-00003.gguf"), &[]);
    assert!(e.contains("claims 150000 tensors"), "{e}");
    std::thread::sleep(Duration::from_millis(500));
    let log = s.log();
    assert!(
        log.iter().all(|l| !l.contains("Bomb-00003")),
        "the third part fetched: {log:?}"
    );

    // A user-set timeout past the cap, or not a number, is a one-line error.
    for v in ["3600", "301", "0", "forever"] {
        let e = plan("http://127.0.0.1:9/m.gguf", &[("QTUNE_HTTP_TIMEOUT_S", v)]);
        assert!(
            e.contains("QTUNE_HTTP_TIMEOUT_S") && e.contains("1 to 300"),
            "{v}: {e}"
        );
    }
}
