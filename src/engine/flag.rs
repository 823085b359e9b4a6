//! How an engine spells a [`Flag`] (issue 56): the one place a message outside `src/engine/`
//! gets a flag's spelling from. A [`Flag`] displays as llama.cpp's spelling, the default
//! where a message is about no particular engine; [`super::Engine::spelling`] is one engine's.
//! (The `Display` impl lives here, not beside the type in `config`, so that the spellings stay
//! the engine's while `config`, below the engine, can name a flag in its errors.)

pub use crate::config::Flag;
use std::fmt;

/// llama.cpp's spelling of `flag`: what qtune renders for it.
pub fn llama_cpp_spelling(flag: Flag) -> &'static str {
    match flag {
        Flag::Ctx => "-c",
        Flag::Parallel => "-np",
        Flag::GpuLayers => "-ngl",
        Flag::SplitMode => "-sm",
        Flag::TensorSplit => "-ts",
        Flag::NCpuMoe => "--n-cpu-moe",
        Flag::Threads => "-t",
        Flag::Batch => "-b",
        Flag::Ubatch => "-ub",
        Flag::FlashAttn => "-fa",
        Flag::Fit => "--fit",
        Flag::FitTarget => "--fit-target",
        Flag::LoadMode => "--load-mode",
        Flag::NoMmap => "--no-mmap",
        Flag::OverrideTensor => "-ot",
        Flag::SpecType => "--spec-type",
        Flag::CheckpointMinStep => "--checkpoint-min-step",
    }
}

impl fmt::Display for Flag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(llama_cpp_spelling(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, IkLlama, LlamaCpp};

    #[test]
    fn a_flag_displays_as_llama_cpp_spells_it_and_ik_spells_its_own() {
        assert_eq!(Flag::NCpuMoe.to_string(), "--n-cpu-moe");
        // Padded as a column head is.
        assert_eq!(format!("{:>5}|", Flag::Threads), "   -t|");
        assert_eq!(LlamaCpp.spelling(Flag::FitTarget), "--fit-target");
        assert_eq!(IkLlama.spelling(Flag::FitTarget), "--fit-margin");
        assert_eq!(IkLlama.spelling(Flag::OverrideTensor), "-ot");
        // Every llama.cpp spelling is one its parser reads back.
        for f in [
            Flag::Ctx,
            Flag::GpuLayers,
            Flag::NCpuMoe,
            Flag::CheckpointMinStep,
        ] {
            assert_eq!(
                super::super::canonical_flag(&f.to_string()),
                Some(llama_cpp_spelling(f))
            );
        }
    }
}
