//! Print a tune's results.json with its workload picks computed by this qtune's rule
//! (`TuneResult::workload_picks`): for a tune written before the rule changed, so that
//! `scripts/workload-table.py` reads the picks qtune names now.
//!
//! `cargo run --example repick -- RUN_DIR_OR_RESULTS_JSON > results.json`

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: repick RUN_DIR_OR_RESULTS_JSON");
        std::process::exit(2);
    };
    let (_, mut r) = match qtune::run::read_result(std::path::Path::new(&path)) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    };
    r.workload_picks = r.workload_picks();
    for p in &mut r.workload_picks {
        p.command = r.inputs.command(&p.config);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&r).expect("a result serializes")
    );
}
