//! What one trial asks of the server: the request shapes, repetitions and warm-up, a mix of
//! workloads or a replayed trace.

use serde::{Deserialize, Serialize};

/// What one trial asks of the server, measured the way a single user uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Prompt length in tokens for each measured request.
    pub prompt_tokens: u32,
    /// Tokens generated per measured request (`ignore_eos`).
    pub gen_tokens: u32,
    /// Measured requests per trial (after the warm-up).
    pub repetitions: u32,
    /// How many times each request of the mixes is measured per launch (a shape counts with
    /// its mean time): 1 in a tune, `qtune compare --repetitions N` asks for more.
    #[serde(default = "one_u32", skip_serializing_if = "is_one")]
    pub shape_repetitions: u32,
    /// Send one unmeasured warm-up request first.
    #[serde(default = "default_true")]
    pub warmup: bool,
    /// Optional: tokens already in context before generation is measured (long-context speed).
    #[serde(default)]
    pub context_depth: Option<u32>,
    /// What the user runs, as a mix of request shapes: `chat`, `agent`, `long-doc` or a YAML
    /// file ([`crate::workloads`]). The objective is then the mix's time per request. Absent:
    /// the one request above (`prompt_tokens` read, `gen_tokens` written) is the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<String>,
    /// The mixes measured in every trial, fitted to the context: the objective's first, then the
    /// other built-ins (so the summary can name the best command for each). Filled in by
    /// [`Workload::resolve`] when a tune starts and kept in the run directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mixes: Vec<crate::workloads::Mix>,
    /// A recorded trace replayed in every trial (`--workload FILE.jsonl`): the objective is
    /// then the replay's mean time per request, and no mix is measured. Filled in by
    /// [`Workload::resolve`]; the run directory keeps its path, SHA-256 and plan, never a
    /// prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::traffic::plan::ReplayWorkload>,
}

fn one_u32() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Workload {
    /// Load and fit the mix (and the other built-ins) to `ctx`. Returns notes on shapes that
    /// had to be scaled down to fit the context.
    pub fn resolve(&mut self, ctx: u32) -> Result<Vec<String>, crate::workloads::WorkloadError> {
        self.replay = None;
        let Some(name) = &self.mix else {
            self.mixes.clear();
            return Ok(Vec::new());
        };
        if crate::traffic::plan::is_trace(name) {
            let w = crate::traffic::plan::load(
                std::path::Path::new(name),
                ctx,
                crate::traffic::plan::DEFAULT_BUDGET,
            )
            .map_err(|e| crate::workloads::WorkloadError::Trace(format!("{e:#}")))?;
            let note = format!("workload {}: {}", w.name, w.plan.describe());
            self.mixes.clear();
            self.replay = Some(w);
            return Ok(vec![note]);
        }
        let main = crate::workloads::load(name)?;
        let (main, mut notes) = main.fitted(ctx);
        let mut mixes = vec![main];
        for b in crate::workloads::builtins() {
            if mixes.iter().any(|m| m.name == b.name) {
                continue;
            }
            // The other built-ins are measured too; a note only for the objective's own.
            mixes.push(b.fitted(ctx).0);
        }
        notes.dedup();
        self.mixes = mixes;
        Ok(notes)
    }

    /// Refuse a replayed trace the model cannot replay (another tokenizer, token ids outside
    /// its `n_vocab`), before anything is launched: one line naming the file.
    pub fn check_vocab(&self, n_vocab: u32) -> Result<(), crate::workloads::WorkloadError> {
        match &self.replay {
            Some(r) => r.check_vocab(n_vocab).map_err(|e| {
                crate::workloads::WorkloadError::Trace(format!("the trace {}: {e}", r.name))
            }),
            None => Ok(()),
        }
    }

    /// The mix the objective is computed for (None: the single request of the old form).
    pub fn objective_mix(&self) -> Option<&crate::workloads::Mix> {
        if self.replay.is_some() {
            return None;
        }
        self.mixes.first()
    }

    /// Mean new prompt tokens and generated tokens per request, over the objective's mix
    /// weighted (or the single request): what a speed prediction turns into time per request.
    pub fn request_tokens(&self) -> (f64, f64) {
        if let Some(r) = &self.replay {
            return r.plan.mean_tokens();
        }
        match self.objective_mix() {
            Some(m) => {
                let w: f64 = m.shapes.iter().map(|s| s.weight).sum();
                let mean = |f: fn(&crate::workloads::Shape) -> u32| {
                    m.shapes
                        .iter()
                        .map(|s| s.weight * f64::from(f(s)))
                        .sum::<f64>()
                        / w.max(1e-9)
                };
                (mean(|s| s.new), mean(|s| s.gen))
            }
            None => (f64::from(self.prompt_tokens), f64::from(self.gen_tokens)),
        }
    }

    /// The name people read: the mix's, or the single request's shape.
    pub fn name(&self) -> String {
        if let Some(r) = &self.replay {
            return r.name.clone();
        }
        match self.objective_mix() {
            Some(m) => m.name.clone(),
            None => format!(
                "one request ({} prompt → {} generated tokens)",
                self.prompt_tokens, self.gen_tokens
            ),
        }
    }

    /// Time per request of the single request of the old form, from its measured speeds.
    pub fn single_request_s(&self, gen_tps: f64, prompt_tps: f64) -> Option<f64> {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        (ok(gen_tps) && ok(prompt_tps)).then(|| {
            crate::objective::request_seconds(
                f64::from(self.prompt_tokens) / prompt_tps,
                f64::from(self.gen_tokens),
                gen_tps,
            )
        })
    }
}

fn default_true() -> bool {
    true
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            prompt_tokens: 512,
            gen_tokens: 128,
            repetitions: 3,
            shape_repetitions: 1,
            warmup: true,
            context_depth: None,
            mix: None,
            mixes: Vec::new(),
            replay: None,
        }
    }
}
