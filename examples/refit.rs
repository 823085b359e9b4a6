//! Refit the speed model's constants on the GPU evidence and print them with every group's
//! prediction error: what `qtune::model::speed::FITTED` should carry.
//!
//! `cargo run --example refit` fits on every run in `FITTED`'s fit (docs/evidence/manifest.json:
//! every single-GPU run but those planned with `FITTED`); `cargo run --example refit -- RUN...`
//! also leaves out the named runs (by id) and prints how the refit predicts them.
//! tests/it/speed_replay.rs checks that `FITTED` is this refit, to 5 %.

#[path = "../tests/it/support/evidence.rs"]
pub mod evidence;
#[path = "../tests/it/support/replay.rs"]
mod replay;
/// What tests/it/support/replay.rs reaches as `crate::support`.
mod support {
    pub use super::evidence;
}

use replay::*;

fn main() {
    let m = manifest();
    let held: Vec<String> = std::env::args().skip(1).collect();
    for id in &held {
        if !m.runs.iter().any(|r| &r.id == id) {
            eprintln!("error: no run {id:?} in docs/evidence/manifest.json");
            std::process::exit(2);
        }
    }
    let out_of_fit = m.ids("planned-with-fitted");
    let train = prepare(&groups_where(|f| {
        !in_any(f, &out_of_fit) && !in_any(f, &held)
    }));
    let k = fit(&train);
    report("fit", &train, &k);
    for id in &held {
        report(
            &format!("held out {id}"),
            &prepare(&groups_where(|f| in_run(f, id))),
            &k,
        );
    }
    println!("{} groups in the fit", train.len());
    print_constants(&k);
}
