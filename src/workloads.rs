//! Workloads: what the user runs, as a weighted mix of request shapes (`workloads/*.yaml`).
//!
//! A shape is one kind of request: `held` tokens already in the server's prompt cache (the
//! conversation or transcript so far), `new` prompt tokens it must read, `gen` tokens it writes.
//! The objective of a tune is the **time per request** (time to first token plus generation
//! time) averaged over the mix with its weights: a chat turn is mostly generation, an agent turn
//! deep in a long context pays attention over the held tokens, a long document is mostly
//! prompt processing. Built-ins: `chat`, `agent-shapes`, `long-doc`; any YAML file of the same form.
//! (`--workload agent` is the built-in agent session of real text, not these shapes:
//! [`crate::trial::session_render`].)

use serde::{Deserialize, Serialize};

/// One kind of request in a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub name: String,
    /// Tokens already in context, reused from the prompt cache (0: a fresh context).
    #[serde(default)]
    pub held: u32,
    /// New prompt tokens the server reads (at least 1).
    pub new: u32,
    /// Tokens generated (at least 1).
    pub gen: u32,
    /// Relative frequency of this request in the mix.
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

impl Shape {
    /// Context the shape needs: everything held, read and written.
    pub fn tokens(&self) -> u64 {
        u64::from(self.held) + u64::from(self.new) + u64::from(self.gen)
    }

    /// The same request measured identically (name and weight aside).
    pub fn same_request(&self, other: &Shape) -> bool {
        (self.held, self.new, self.gen) == (other.held, other.new, other.gen)
    }
}

/// A workload: a named, weighted mix of shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub shapes: Vec<Shape>,
}

/// The built-in workloads, embedded so the binary works anywhere.
pub const BUILTIN: [(&str, &str); 3] = [
    ("chat", include_str!("../workloads/chat.yaml")),
    (
        "agent-shapes",
        include_str!("../workloads/agent-shapes.yaml"),
    ),
    ("long-doc", include_str!("../workloads/long-doc.yaml")),
];

/// The workload a tune optimizes when neither the space nor `--workload` names one.
pub const DEFAULT: &str = "chat";

/// The largest workload file read.
pub const MAX_WORKLOAD_BYTES: u64 = 64 * 1024;
/// The most shapes one workload may have (each costs a request in every launch).
pub const MAX_SHAPES: usize = 8;
/// The most tokens one shape may hold, read or write.
pub const MAX_SHAPE_TOKENS: u32 = 1_048_576;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown workload '{0}': give agent, chat-session or subagents-session (sessions of real text), chat, agent-shapes or long-doc (request shapes), a YAML file or a trace FILE.jsonl")]
    Unknown(String),
    /// A built-in session where only request shapes are taken (a space file, `plan`).
    #[error("'{0}' is a built-in session of real text, rendered by a real llama-server: tune and compare take it as --workload {0}; here give chat, agent-shapes, long-doc or a YAML file")]
    SessionHere(String),
    #[error("cannot read workload {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// A trace given as the workload could not be used (one line, naming the file).
    #[error("{0}")]
    Trace(String),
}

/// Every built-in workload.
pub fn builtins() -> Vec<Mix> {
    BUILTIN
        .iter()
        .map(|(n, text)| parse(text, n).expect("built-in workloads are valid"))
        .collect()
}

/// The built-in session (`crate::trial::session_render`) that `--workload name` names:
/// `agent` is the agent session of real text (issue 52; its request shapes of filler text are
/// `agent-shapes`), and each session also answers to its full name.
pub fn session_name(name: &str) -> Option<&'static str> {
    match name {
        "agent" | "agent-session" => Some("agent-session"),
        "chat-session" => Some("chat-session"),
        "subagents-session" => Some("subagents-session"),
        _ => None,
    }
}

/// The longest workload or shape name.
const MAX_NAME_CHARS: usize = 64;

/// A built-in by name, or a YAML file.
pub fn load(name_or_path: &str) -> Result<Mix, WorkloadError> {
    if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, n);
    }
    if session_name(name_or_path).is_some() {
        return Err(WorkloadError::SessionHere(name_or_path.to_string()));
    }
    let path = std::path::Path::new(name_or_path);
    if !name_or_path.contains('/') && !name_or_path.ends_with(".yaml") && !path.exists() {
        return Err(WorkloadError::Unknown(name_or_path.to_string()));
    }
    let bytes =
        crate::util::read_bounded(path, MAX_WORKLOAD_BYTES).map_err(|e| WorkloadError::Read {
            path: name_or_path.to_string(),
            message: e.to_string(),
        })?;
    let text = String::from_utf8(bytes).map_err(|_| WorkloadError::Invalid {
        path: name_or_path.to_string(),
        message: "not UTF-8 text".into(),
    })?;
    parse(&text, name_or_path)
}

/// Parse and check a workload.
pub fn parse(text: &str, origin: &str) -> Result<Mix, WorkloadError> {
    let invalid = |message: String| WorkloadError::Invalid {
        path: origin.to_string(),
        message,
    };
    let mix: Mix = serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    if mix.name.trim().is_empty() {
        return Err(invalid("name must not be empty".into()));
    }
    // A name is shown on terminals and in reports: one line of visible text.
    for (what, name) in std::iter::once(("the workload's name", &mix.name))
        .chain(mix.shapes.iter().map(|s| ("a shape's name", &s.name)))
    {
        if let Some(c) = name.chars().find(|&c| crate::escape::is_hidden(c)) {
            return Err(invalid(format!(
                "{what} \"{}\" holds the control or invisible character {}: use visible text on one line",
                crate::escape::terminal(name),
                crate::escape::terminal(&c.to_string())
            )));
        }
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(invalid(format!(
                "{what} is {} characters long, more than {MAX_NAME_CHARS}",
                name.chars().count()
            )));
        }
    }
    if mix.shapes.is_empty() || mix.shapes.len() > MAX_SHAPES {
        return Err(invalid(format!(
            "a workload has 1..={MAX_SHAPES} shapes, this one {}",
            mix.shapes.len()
        )));
    }
    for s in &mix.shapes {
        if s.new == 0 || s.gen == 0 {
            return Err(invalid(format!(
                "shape '{}': new and gen must be at least 1",
                s.name
            )));
        }
        if [s.held, s.new, s.gen].iter().any(|&t| t > MAX_SHAPE_TOKENS) {
            return Err(invalid(format!(
                "shape '{}': held, new and gen are at most {MAX_SHAPE_TOKENS} tokens",
                s.name
            )));
        }
        if !(s.weight.is_finite() && s.weight > 0.0 && s.weight <= 1e6) {
            return Err(invalid(format!(
                "shape '{}': weight must be a positive number (at most 1e6)",
                s.name
            )));
        }
    }
    Ok(mix)
}

impl Mix {
    /// The mix fitted to a context of `ctx` tokens: a shape that does not fit (with a 5 %
    /// margin) is scaled down, held, new and generated tokens alike, and a note says so.
    pub fn fitted(&self, ctx: u32) -> (Mix, Vec<String>) {
        let room = (f64::from(ctx) * 0.95).floor();
        let mut notes = Vec::new();
        let shapes = self
            .shapes
            .iter()
            .map(|s| {
                let total = s.tokens() as f64;
                if total <= room {
                    return s.clone();
                }
                let f = room / total;
                let scale = |t: u32, min: u32| ((f64::from(t) * f).floor() as u32).max(min);
                let fitted = Shape {
                    held: if s.held == 0 { 0 } else { scale(s.held, 1) },
                    new: scale(s.new, 1),
                    gen: scale(s.gen, 1),
                    ..s.clone()
                };
                notes.push(format!(
                    "workload {}: shape {} ({} held + {} new + {} generated) does not fit {} {ctx}; measured at {} + {} + {}",
                    self.name,
                    s.name,
                    s.held,
                    s.new,
                    s.gen,
                    crate::engine::Flag::Ctx,
                    fitted.held,
                    fitted.new,
                    fitted.gen
                ));
                fitted
            })
            .collect();
        (
            Mix {
                shapes,
                ..self.clone()
            },
            notes,
        )
    }

    /// Weighted mean time per request (seconds) from the measured shapes (a shape measured
    /// several times counts with its mean time); None when one of the mix's shapes was not
    /// measured or a measurement is unusable.
    pub fn request_s(&self, measured: &[ShapeTiming]) -> Option<f64> {
        let mut parts = Vec::with_capacity(self.shapes.len());
        for s in &self.shapes {
            let times = measured
                .iter()
                .filter(|m| m.shape.same_request(s))
                .map(ShapeTiming::request_s)
                .collect::<Option<Vec<f64>>>()?;
            if times.is_empty() {
                return None;
            }
            parts.push((s.weight, times.iter().sum::<f64>() / times.len() as f64));
        }
        crate::objective::weighted_mean(parts)
    }

    /// One line for people: "chat (2,000 held + 150 new → 400 generated)".
    pub fn describe(&self) -> String {
        let shapes: Vec<String> = self
            .shapes
            .iter()
            .map(|s| {
                let w = if self.shapes.len() > 1 {
                    format!(" ×{}", s.weight)
                } else {
                    String::new()
                };
                if s.held > 0 {
                    format!("{} held + {} new → {} generated{w}", s.held, s.new, s.gen)
                } else {
                    format!("{} new → {} generated{w}", s.new, s.gen)
                }
            })
            .collect();
        format!("{} ({})", self.name, shapes.join("; "))
    }
}

/// What one measured request of a shape took, from the server's own timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeTiming {
    /// The shape as measured (after fitting to the context).
    pub shape: Shape,
    /// Prompt tokens the server reused from its cache (ideally `held`).
    pub cache_n: u32,
    /// Prompt tokens it processed (ideally `new`; more when it could not reuse its cache).
    pub prompt_n: u32,
    /// Time to process them, milliseconds: the time to first token.
    pub prompt_ms: f64,
    /// Generation speed at this depth, tokens per second (measured over `gen_measured` tokens).
    pub gen_tps: f64,
    pub gen_measured: u32,
    /// Speculative decoding (`--spec-type`): the tokens the server drafted for this request,
    /// and of these the ones it accepted (its `timings.draft_n`, `draft_n_accepted`). Absent
    /// where it drafted nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u32>,
}

impl ShapeTiming {
    /// Time to first token plus the time to generate `shape.gen` tokens at the measured speed,
    /// seconds. None for a measurement that cannot be real (non-finite, zero or negative).
    pub fn request_s(&self) -> Option<f64> {
        crate::objective::measured_request_seconds(
            self.prompt_ms,
            f64::from(self.shape.gen),
            self.gen_tps,
        )
    }

    /// Prompt tokens per second of this request.
    pub fn prompt_tps(&self) -> Option<f64> {
        (self.prompt_ms > 0.0 && self.prompt_n > 0)
            .then(|| f64::from(self.prompt_n) / self.prompt_ms * 1000.0)
    }
}

/// The distinct requests of several mixes (each measured once per launch and repetition).
pub fn distinct_shapes<'a>(mixes: impl IntoIterator<Item = &'a Mix>) -> Vec<Shape> {
    let mut out: Vec<Shape> = Vec::new();
    for m in mixes {
        for s in &m.shapes {
            if !out.iter().any(|o| o.same_request(s)) {
                out.push(s.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_cover_chat_agent_and_a_long_document() {
        let b = builtins();
        let names: Vec<&str> = b.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["chat", "agent-shapes", "long-doc"]);
        assert!(b[1].shapes[0].held >= 20_000, "an agent turn is deep");
        assert_eq!(b[2].shapes[0].held, 0, "a document is read fresh");
        // All three fit the default space's 32k context unscaled.
        for m in &b {
            assert!(m.fitted(32768).1.is_empty(), "{} is scaled at 32k", m.name);
        }
    }

    /// Issue 52: `--workload agent` is the agent session of real text; the filler shapes
    /// answer to `agent-shapes`, and a place that takes only shapes says so in one line.
    #[test]
    fn agent_names_the_session_and_the_shapes_have_their_own_name() {
        assert_eq!(session_name("agent"), Some("agent-session"));
        assert_eq!(session_name("agent-session"), Some("agent-session"));
        assert_eq!(session_name("chat"), None, "chat stays the request shapes");
        assert_eq!(session_name("agent-shapes"), None);
        let e = load("agent").unwrap_err().to_string();
        assert!(
            e.contains("--workload agent") && e.contains("agent-shapes"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert!(load("agent-shapes").unwrap().shapes[0].held >= 20_000);
    }

    #[test]
    fn a_shape_too_long_for_the_context_is_scaled_and_said() {
        let agent = load("agent-shapes").unwrap();
        let (f, notes) = agent.fitted(4096);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("does not fit -c 4096"), "{}", notes[0]);
        assert!(f.shapes[0].tokens() <= 3891, "{:?}", f.shapes[0]);
        assert!(f.shapes[0].held > f.shapes[0].new);
    }

    #[test]
    fn request_time_is_the_weighted_mean_of_ttft_plus_generation() {
        let mix = parse(
            "name: m\nshapes:\n  - {name: a, new: 100, gen: 10, weight: 3}\n  - {name: b, held: 50, new: 10, gen: 20, weight: 1}\n",
            "test",
        )
        .unwrap();
        let t = |s: &Shape, prompt_ms: f64, gen_tps: f64| ShapeTiming {
            shape: s.clone(),
            cache_n: s.held,
            prompt_n: s.new,
            prompt_ms,
            gen_tps,
            gen_measured: s.gen,
            draft_n: None,
            draft_n_accepted: None,
        };
        let m = vec![
            t(&mix.shapes[0], 500.0, 10.0),
            t(&mix.shapes[1], 1000.0, 5.0),
        ];
        // a: 0.5 + 1.0 = 1.5 s; b: 1.0 + 4.0 = 5.0 s; (3·1.5 + 5) / 4 = 2.375
        assert!((mix.request_s(&m).unwrap() - 2.375).abs() < 1e-12);
        assert_eq!(mix.request_s(&m[..1]), None, "a shape not measured");
        let bogus = vec![t(&mix.shapes[0], 500.0, 0.0), m[1].clone()];
        assert_eq!(
            mix.request_s(&bogus),
            None,
            "a zero speed is no measurement"
        );
    }

    #[test]
    fn bad_workloads_are_refused_with_a_reason() {
        for (text, want) in [
            ("name: x\nshapes: []\n", "1..=8 shapes"),
            (
                "name: x\nshapes:\n  - {name: a, new: 0, gen: 1}\n",
                "at least 1",
            ),
            (
                "name: x\nshapes:\n  - {name: a, new: 1, gen: 1, weight: -1}\n",
                "weight",
            ),
            (
                "name: x\nshapes:\n  - {name: a, new: 1, gen: 1, colour: 2}\n",
                "unknown field",
            ),
            (
                "name: x\nshapes:\n  - {name: a, new: 4294967295, gen: 1}\n",
                "at most",
            ),
            (
                "name: \"x\\e]0;T\\a\\nMODEL=/etc/shadow\"\nshapes:\n  - {name: a, new: 1, gen: 1}\n",
                r#"the workload's name "x\x1b]0;T\x07\nMODEL=/etc/shadow" holds the control or invisible character \x1b"#,
            ),
            (
                "name: x\nshapes:\n  - {name: \"a\\u202eb\", new: 1, gen: 1}\n",
                r"a shape's name",
            ),
            (
                "name: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nshapes:\n  - {name: a, new: 1, gen: 1}\n",
                "more than 64",
            ),
        ] {
            let e = parse(text, "w.yaml").unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert!(matches!(load("chatty"), Err(WorkloadError::Unknown(_))));
    }

    #[test]
    fn shared_requests_are_measured_once() {
        let a = load("chat").unwrap();
        let shapes = distinct_shapes([&a, &a.clone(), &load("long-doc").unwrap()]);
        assert_eq!(shapes.len(), 2);
    }
}
