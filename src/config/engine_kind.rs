//! Which inference server a config is for: the vocabulary every stage shares. Each engine's
//! dialect lives in [`crate::engine`].

/// Which inference server a config is for. Serialized as the engine's name; absent (every
/// result written before there were two) reads as llama.cpp.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum EngineKind {
    /// llama.cpp's `llama-server`.
    #[default]
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// ik_llama.cpp's `llama-server`.
    #[serde(rename = "ik_llama.cpp")]
    IkLlama,
}

impl EngineKind {
    pub const ALL: [EngineKind; 2] = [EngineKind::LlamaCpp, EngineKind::IkLlama];

    /// The engine's name, as the user reads it (`llama.cpp`, `ik_llama.cpp`).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::LlamaCpp => "llama.cpp",
            EngineKind::IkLlama => "ik_llama.cpp",
        }
    }

    /// The `--engine` value that names it (`llama.cpp`, `ik`).
    pub fn cli_name(self) -> &'static str {
        match self {
            EngineKind::LlamaCpp => "llama.cpp",
            EngineKind::IkLlama => "ik",
        }
    }

    /// Whether this is the default engine (llama.cpp): serde's `skip_serializing_if` (the
    /// default is not written), and what a message need not name. What an engine can do is
    /// [`crate::engine::Caps`], not this.
    pub fn is_default(&self) -> bool {
        *self == EngineKind::default()
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "llama.cpp" | "llama-cpp" | "llamacpp" => Ok(EngineKind::LlamaCpp),
            "ik" | "ik_llama.cpp" | "ik-llama.cpp" | "ik_llama" => Ok(EngineKind::IkLlama),
            _ => Err(format!(
                "unknown engine '{s}': use llama.cpp or ik (ik_llama.cpp)"
            )),
        }
    }
}
