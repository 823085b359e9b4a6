//! `qtune hw` through the real binary. This machine has no GPU: the profile must say so.

use qtune::hardware::HardwareProfile;
use std::process::Command;

fn qtune(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .env("QTUNE_NO_GPU", "1")
        .output()
        .expect("run qtune")
}

#[test]
fn hw_json_parses_and_says_no_gpu() {
    let out = qtune(&["hw", "--json", "--no-bandwidth"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hw: HardwareProfile =
        serde_json::from_slice(&out.stdout).expect("hw --json is a HardwareProfile");
    assert!(hw.gpus.is_empty());
    assert!(hw.no_gpu_reason.is_some());
    assert!(hw.host.logical_cores >= 1);
    assert!(hw.host.ram_total_mib > 0);
    assert!(hw.host.mem_bandwidth_gbs.is_none());
    assert_eq!(hw.fingerprint.len(), 16);
}

#[test]
fn hw_yaml_parses() {
    let out = qtune(&["hw", "--yaml", "--no-bandwidth"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hw: HardwareProfile =
        serde_yaml::from_slice(&out.stdout).expect("hw --yaml is a HardwareProfile");
    assert!(hw.gpus.is_empty());
}

#[test]
fn hw_text_says_cpu_only_and_measures_bandwidth() {
    let out = qtune(&["hw"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("GPU: none — "), "{text}");
    assert!(text.contains("qtune will tune for CPU only"), "{text}");
    assert!(
        text.contains("Memory read bandwidth: ") && text.contains("GB/s"),
        "{text}"
    );
    // Fewer threads too, for the speed model's thread scaling (a 1-core box has none).
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        assert!(
            text.contains("Memory read bandwidth by threads: 1: "),
            "{text}"
        );
    }
}

#[test]
fn hw_without_override_still_exits_zero_here() {
    let out = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["hw", "--json", "--no-bandwidth"])
        .env_remove("QTUNE_NO_GPU")
        .output()
        .unwrap();
    assert!(out.status.success());
    let hw: HardwareProfile = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hw.gpus.is_empty(), hw.no_gpu_reason.is_some());
}
