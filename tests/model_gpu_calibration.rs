//! The memory prediction replayed against what the CUDA llama-server reported on the GPU
//! machine (reports/gpu-calibration/*.json, written by `qtune calibrate`): per-device totals
//! within 3 % or 64 MiB, whichever is larger. Under-predicting is the dangerous side (a config
//! predicted to fit would not), so it is held to that everywhere; over-prediction has a
//! per-model allowance where a known bias remains. The layouts come from header-only copies of
//! the synthetic shapes, so no GPU and no 20 GB file is needed here.

use qtune::model::synth::{shape_by_name, write_sparse_header, SynthFtype};
use qtune::search::measure::CalibrationRow;

fn check(shape: &str, file: &str, over_allowance_mib: f64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let vocab = qtune::model::synth::default_vocab_dir();
    write_sparse_header(
        &path,
        &shape_by_name(shape).unwrap(),
        SynthFtype::Q4KM,
        &vocab,
    )
    .unwrap();
    let layout = qtune::model::load(&path).unwrap();
    let rows: Vec<CalibrationRow> = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/reports/gpu-calibration/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    assert!(rows.len() >= 12, "{file}: {} rows", rows.len());
    let mut worst: f64 = 0.0;
    for r in &rows {
        let p = qtune::model::memory::predict(&layout, &r.config, true);
        for (what, pred, rep) in [
            ("GPU", p.gpu_mib, r.reported_gpu_mib.unwrap()),
            ("host", p.host_mib, r.reported_host_mib.unwrap()),
        ] {
            let err = (pred - rep).abs();
            let tol = (rep * 0.03).max(if pred > rep { over_allowance_mib } else { 64.0 });
            worst = worst.max(err / rep.max(1.0));
            println!(
                "{shape} c={} ncmoe={:?} kv={} {what}: predicted {pred:.0} reported {rep:.0} MiB ({:+.1} %)",
                r.config.ctx,
                r.config.n_cpu_moe,
                r.config.cache_type_k,
                (pred / rep - 1.0) * 100.0
            );
            assert!(
                err <= tol,
                "{shape} {what} {:?}: predicted {pred:.0}, reported {rep:.0}",
                r.config
            );
        }
    }
    println!("{shape}: worst relative error {:.1} %", worst * 100.0);
}

#[test]
fn qwen35_35b_a3b_on_the_gpu_machine() {
    // The MoE staging model was fitted on this model: held to 3 % / 64 MiB both ways.
    check("qwen3.5-35b-a3b", "qwen3.5-35b-a3b-q4_k_m.json", 64.0);
}

#[test]
fn qwen3_30b_a3b_on_the_gpu_machine() {
    // Held out from the fit. Known bias: with experts on the host the CUDA compute buffer is
    // over-predicted by about 166 MiB (staging 133 MiB measured, 2/3 of a block's experts +
    // 48 MiB modelled), which matters only when the GPU holds little (2 of 12 rows, 1.4-1.8 GiB
    // totals): the safe direction, at most one expert block too many on the CPU.
    check("qwen3-30b-a3b", "qwen3-30b-a3b-q4_k_m.json", 200.0);
}
