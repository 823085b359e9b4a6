//! Print the table of docs/results.md "Planned boxes against the seeds": every seed row of
//! docs/seed-speeds.csv against `qtune plan --box`'s prediction for its box, quant and placement.
//! `cargo run --example seed_table` (from the repository root); paste its output between the
//! markers in docs/results.md (tests/it/plan_box.rs checks the two agree).

fn main() -> anyhow::Result<()> {
    let csv = std::fs::read_to_string("docs/seed-speeds.csv")?;
    print!("{}", qtune::plan::seeds::table(&csv)?);
    Ok(())
}
