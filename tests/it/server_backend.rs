//! Issue 43: on a box with a GPU, a llama-server that lists no GPU device (a CPU-only build
//! found first) is refused with the command that builds one, and `server check` names the
//! backend and devices. The real CPU server; the GPU is a hand-made profile (the only fake).

use crate::support;
use support::hardware::FakeBox;
use support::output_text as text;

#[test]
fn a_cpu_only_server_is_refused_where_the_box_has_a_gpu() {
    let Some(path) = support::real_server() else {
        return;
    };
    let server =
        qtune::engine::binary::check(&path, qtune::engine::binary::Source::Flag).expect("checks");
    assert_eq!(
        server.devices.as_deref(),
        Some(&[][..]),
        "the pinned CPU build lists no device: {:?}",
        server.devices
    );

    let gpu_box = FakeBox::new()
        .gpu("NVIDIA GeForce RTX 4090", 24_564, 23_000)
        .build();
    let e = qtune::app::preflight::check_server_backend(&gpu_box, &server)
        .expect_err("a CPU-only server on a GPU box is refused");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("NVIDIA GeForce RTX 4090")
            && msg.contains("lists no GPU device")
            && msg.contains("qtune server build --cuda"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");

    // Without a GPU, or with a server that cannot list its devices, nothing is refused.
    qtune::app::preflight::check_server_backend(&FakeBox::new().build(), &server).unwrap();
    let mut unknown = server.clone();
    unknown.devices = None;
    qtune::app::preflight::check_server_backend(&gpu_box, &unknown).unwrap();

    // `server check` says which backend it has.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["server", "check", "--server"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("devices: CPU only"),
        "{}",
        text(&o)
    );
}

#[test]
fn devices_are_read_from_list_devices() {
    let cuda = "ggml_cuda_init: found 1 CUDA devices:\n  Device 0: NVIDIA H100 80GB HBM3, compute capability 9.0\nAvailable devices:\n  CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB, 80577 MiB free)\n";
    assert_eq!(
        qtune::engine::binary::parse_devices(cuda).unwrap(),
        vec!["CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB, 80577 MiB free)".to_string()]
    );
    assert_eq!(
        qtune::engine::binary::parse_devices("Available devices:\n  (none)\n").unwrap(),
        Vec::<String>::new()
    );
    assert!(qtune::engine::binary::parse_devices("error: unknown argument").is_none());
}

/// Issue 52: on a GPU box the README's first path built the CPU server and then refused it.
/// Without `--server`, a CPU-only build found on PATH or in the cache is passed over for the
/// pinned CUDA build (built when missing), and a box with no server at all builds CUDA's; one
/// named by QTUNE_LLAMA_SERVER is the user's and kept. Before anything is built, the line says
/// what and how long, or, without the CUDA toolkit, what to install. The real CPU server; the
/// GPU is a hand-made profile.
#[test]
fn a_gpu_box_without_a_named_server_builds_the_cuda_one() {
    use qtune::engine::binary::auto::{build_line, plan_from, Plan};
    use qtune::engine::binary::Source;
    let Some(path) = support::real_server() else {
        return;
    };
    let gpu_box = FakeBox::new()
        .gpu("NVIDIA GeForce RTX 4080", 16_376, 15_800)
        .build();
    let no_gpu = FakeBox::new().build();
    let cpu_build = |source| {
        let mut s = qtune::engine::binary::check(&path, Source::Flag).expect("checks");
        s.source = source;
        s
    };
    for source in [Source::Cache, Source::Path] {
        match plan_from(Some(cpu_build(source)), &gpu_box) {
            Plan::Build {
                cuda: true,
                note: Some(n),
            } => assert!(
                n.contains("CPU-only build") && n.contains("NVIDIA GeForce RTX 4080"),
                "{n}"
            ),
            other => panic!("{source:?}: {other:?}"),
        }
    }
    assert!(matches!(
        plan_from(Some(cpu_build(Source::Env)), &gpu_box),
        Plan::Use(_)
    ));
    assert!(matches!(
        plan_from(Some(cpu_build(Source::Cache)), &no_gpu),
        Plan::Use(_)
    ));
    assert!(matches!(
        plan_from(None, &gpu_box),
        Plan::Build {
            cuda: true,
            note: None
        }
    ));
    assert!(matches!(
        plan_from(None, &no_gpu),
        Plan::Build {
            cuda: false,
            note: None
        }
    ));

    // Without nvcc: one line naming what to install, before anything is built.
    let e = build_line(true, &gpu_box, None).expect_err("no CUDA toolkit");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("CUDA toolkit") && msg.contains("nvcc") && msg.contains("QTUNE_NO_GPU=1"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
    let line = build_line(
        true,
        &gpu_box,
        Some(std::path::Path::new("/usr/local/cuda/bin/nvcc")),
    )
    .unwrap();
    assert!(
        line.contains("with CUDA") && line.contains(" on 16 cores"),
        "{line}"
    );
    let cpu = build_line(false, &no_gpu, None).unwrap();
    assert!(
        cpu.contains("(CPU)") && cpu.contains("about 1 minute on 16 cores"),
        "{cpu}"
    );
}
