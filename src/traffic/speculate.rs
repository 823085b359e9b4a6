//! Speculative decoding's gain predicted from a trace, before any launch (issue 54, item 5).
//!
//! qtune replays the pinned llama.cpp's n-gram drafter (`--spec-type ngram-mod`) over a
//! trace's recorded prompt and answer tokens, and counts what the server would draft and
//! accept. The drafter is mirrored from llama.cpp b11434:
//! - `common/ngram-mod.cpp`, `common_ngram_mod`: one hash table of 4 Mi entries shared by
//!   every slot and kept across requests; the key of an n-gram is the hash
//!   `h = h * 6364136223846793005 + token` over its `n_match` tokens (wrapping, modulo the
//!   size); an entry holds the token that last followed that n-gram.
//! - `common/speculative.cpp`, `common_speculative_impl_ngram_mod`: `begin` adds the prompt's
//!   n-grams (and empties the table when over a quarter full); `draft_one` adds the context's
//!   new n-grams in chunks (once 32 or more wait), then chains lookups from the last `n_match`
//!   tokens up to `n_max` tokens, and drafts nothing when the chain ends before `n_min`;
//!   `accept` empties the table after 5 drafts in a row of which under a quarter was accepted.
//! - `common/common.h`, `common_params_speculative_ngram_mod`: `n_match` 24, `n_min` 48,
//!   `n_max` 64 (`--spec-ngram-mod-n-match/-n-min/-n-max`).
//! - `tools/server/server-context.cpp`, `handle_last_sampled_token` and the verify step: a
//!   draft is cut to `min(n_ctx - context - 2, n_predict - generated - 1)` tokens; the server
//!   counts the draft's tokens (`draft_n`) and the longest prefix of it that equals what the
//!   model generates (`draft_n_accepted`); the accepted tokens and one more join the context.
//!
//! At temperature 0 (what a replay sends) the tokens the model generates are the recorded
//! answer's, where the answer was generated greedily by the same model: the prediction is then
//! the server's own count. The answer of a request sampled at a temperature is one draw; a
//! replay's greedy answer may differ from it. A request without answer tokens feeds its prompt
//! to the table and is not predicted. Recurrent models (the server re-evaluates a partly
//! accepted draft from a checkpoint) are counted as attention models are.
//!
//! The time side: a step without a draft costs one generated token; a verify batch of `k`
//! tokens (a draft of `k - 1`) costs [`batch_cost`] tokens' time, from the batch-cost table of
//! docs/results.md (one H200 at 16 GiB, experts on the CPU: about 1.1x a token up to 4 tokens,
//! about 2.2x from 5 to 8), and past 8 tokens no less than reading `k` prompt tokens at the
//! trace's own prompt speed. The table was measured on one box; a box not at hand is assumed
//! to follow its shape.

use super::trace::{Request, Trace};
use serde::Serialize;

/// The table's size (`common_ngram_mod`'s `4*1024*1024` in `speculative.cpp`).
const TABLE: usize = 4 * 1024 * 1024;
/// The multiplier of the n-gram hash (`common_ngram_mod::idx`).
const MUL: u64 = 6364136223846793005;
/// An empty entry.
const EMPTY: i32 = -1;
/// New context n-grams are added once more than this many wait (`draft_one`).
const CHUNK: usize = 32;
/// The table is emptied at `begin` when more than this fraction is used.
const FULL: f64 = 0.25;
/// A draft accepted below this fraction is a low one; [`LOW_STREAK`] in a row empty the table.
const LOW: f64 = 0.25;
const LOW_STREAK: u32 = 5;

/// The drafter's settings (`--spec-ngram-mod-n-match`, `-n-min`, `-n-max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NgramMod {
    pub n_match: usize,
    pub n_min: usize,
    pub n_max: usize,
}

impl Default for NgramMod {
    /// The pinned build's defaults (`common/common.h`).
    fn default() -> NgramMod {
        NgramMod {
            n_match: 24,
            n_min: 48,
            n_max: 64,
        }
    }
}

/// `common_ngram_mod`: the shared hash table.
struct Table {
    n: usize,
    used: usize,
    entries: Vec<i32>,
}

impl Table {
    fn new(n: usize) -> Table {
        Table {
            n,
            used: 0,
            entries: vec![EMPTY; TABLE],
        }
    }

    fn idx(&self, tokens: &[i32]) -> usize {
        let mut h: u64 = 0;
        for &t in &tokens[..self.n] {
            // C++ adds an int32 to a size_t: sign-extended, wrapping.
            h = h.wrapping_mul(MUL).wrapping_add(t as i64 as u64);
        }
        (h % TABLE as u64) as usize
    }

    /// Record that `tokens[..n]` was followed by `tokens[n]`.
    fn add(&mut self, tokens: &[i32]) {
        let i = self.idx(tokens);
        if self.entries[i] == EMPTY {
            self.used += 1;
        }
        self.entries[i] = tokens[self.n];
    }

    fn get(&self, tokens: &[i32]) -> i32 {
        self.entries[self.idx(tokens)]
    }

    fn reset(&mut self) {
        self.entries.fill(EMPTY);
        self.used = 0;
    }
}

/// One slot's drafting state (`seq_info`).
#[derive(Default)]
struct Seq {
    i_last: usize,
    n_draft_last: usize,
    n_low: u32,
}

/// The drafter over a whole launch: its table outlives requests, as the server's does.
pub struct Drafter {
    p: NgramMod,
    table: Table,
    seq: Seq,
}

impl Drafter {
    pub fn new(p: NgramMod) -> Drafter {
        Drafter {
            p,
            table: Table::new(p.n_match.max(1)),
            seq: Seq::default(),
        }
    }

    /// `begin`: a request's prompt has been read.
    fn begin(&mut self, prompt: &[i32]) {
        self.seq = Seq::default();
        let n = self.table.n;
        if prompt.len() < n {
            return;
        }
        for i in 0..prompt.len() - n {
            self.table.add(&prompt[i..]);
        }
        self.seq.i_last = prompt.len() - n;
        if self.table.used as f64 / TABLE as f64 > FULL {
            self.table.reset();
        }
    }

    /// `draft_one`: the draft after `ctx` (the context before the last sampled token) and
    /// `last` (that token).
    fn draft(&mut self, ctx: &[i32], last: i32) -> Vec<i32> {
        self.seq.n_draft_last = 0;
        let n = self.table.n;
        let cur = ctx.len();
        if cur < n {
            return Vec::new();
        }
        if self.seq.i_last + CHUNK < cur {
            for i in self.seq.i_last..cur - n {
                self.table.add(&ctx[i..]);
            }
            self.seq.i_last = cur - n;
        }
        let mut r: Vec<i32> = Vec::with_capacity(n + self.p.n_max);
        r.extend_from_slice(&ctx[cur - n + 1..]);
        r.push(last);
        for i in 0..self.p.n_max {
            let t = self.table.get(&r[i..]);
            if t == EMPTY {
                if i < self.p.n_min {
                    return Vec::new();
                }
                break;
            }
            r.push(t);
        }
        let d = r.split_off(n);
        self.seq.n_draft_last = d.len();
        d
    }

    /// `accept`: `n` of the last draft's tokens were accepted.
    fn accept(&mut self, n: usize) {
        if self.seq.n_draft_last == 0 {
            return;
        }
        if (n as f64) / (self.seq.n_draft_last as f64) < LOW {
            self.seq.n_low += 1;
            if self.seq.n_low >= LOW_STREAK {
                self.table.reset();
                self.seq.n_low = 0;
                self.seq.i_last = 0;
            }
        } else {
            self.seq.n_low = 0;
        }
    }

    /// Generate `answer` after `prompt` as the server does, drafting at each step: what it
    /// drafts and accepts, and the verify batches it runs. `n_predict` is what the request
    /// asked for (a replay asks for the recorded length); `n_ctx` the slot's context.
    pub fn run(
        &mut self,
        prompt: &[u32],
        answer: &[u32],
        n_predict: Option<usize>,
        n_ctx: Option<usize>,
    ) -> Simulated {
        let mut ctx: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
        let ans: Vec<i32> = answer.iter().map(|&t| t as i32).collect();
        let mut s = Simulated::default();
        self.begin(&ctx);
        if ans.is_empty() {
            return s;
        }
        // The first token comes from reading the prompt.
        let mut j = 0usize;
        let mut n_gen = 1usize;
        s.generated = 1;
        let limit = n_predict.unwrap_or(usize::MAX);
        while n_gen < limit && j + 1 < ans.len() {
            let mut room = i64::MAX;
            if let Some(c) = n_ctx {
                room = c as i64 - ctx.len() as i64 - 2;
            }
            if let Some(p) = n_predict {
                room = room.min(p as i64 - n_gen as i64 - 1);
            }
            let mut d = if room > 0 {
                self.draft(&ctx, ans[j])
            } else {
                Vec::new()
            };
            d.truncate(usize::try_from(room.max(0)).unwrap_or(usize::MAX));
            let m = if d.is_empty() {
                s.steps_plain += 1;
                0
            } else {
                let m = d
                    .iter()
                    .zip(&ans[j + 1..])
                    .take_while(|(a, b)| a == b)
                    .count();
                s.drafted += d.len() as u64;
                s.accepted += m as u64;
                s.batches.push(d.len() as u32 + 1);
                self.accept(m);
                m
            };
            ctx.extend_from_slice(&ans[j..=j + m]);
            j += m + 1;
            n_gen += m + 1;
            s.generated += m as u64 + 1;
        }
        s
    }
}

/// What one request's generation drafted, accepted and ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Simulated {
    pub drafted: u64,
    pub accepted: u64,
    /// Tokens generated in the simulation (the recorded answer's, at most).
    pub generated: u64,
    /// Steps that generated one token without a draft.
    pub steps_plain: u64,
    /// The size of each verify batch (a draft and the token before it).
    #[serde(skip)]
    pub batches: Vec<u32>,
}

/// The time per token of a trace's box: generation and prompt reading (ms per token), the
/// medians of its requests' timings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Speeds {
    pub gen_ms: f64,
    pub prompt_ms: f64,
}

impl Speeds {
    /// From the requests' own timings; None when no request has them (a scripted trace).
    pub fn of(requests: &[Request]) -> Option<Speeds> {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| v[v.len() / 2])
        };
        let ts = requests.iter().filter_map(|r| r.timings.as_ref());
        let gen: Vec<f64> = ts
            .clone()
            .filter(|t| t.predicted_n >= 8)
            .map(|t| t.predicted_ms / t.predicted_n as f64)
            .collect();
        let prompt: Vec<f64> = ts
            .filter(|t| t.prompt_n >= 32)
            .map(|t| t.prompt_ms / t.prompt_n as f64)
            .collect();
        let gen_ms = median(gen)?;
        Some(Speeds {
            gen_ms,
            prompt_ms: median(prompt).unwrap_or(gen_ms / 8.0),
        })
    }
}

/// The time of a verify batch of `k` tokens, in generated tokens' time: docs/results.md's
/// batch-cost table at 2,048 tokens deep (medians over 12 rounds) up to 8 tokens; past 8, the
/// larger of 8 tokens' cost and reading `k` prompt tokens (`prompt_per_gen`: a prompt token's
/// time over a generated token's).
pub fn batch_cost(k: u32, prompt_per_gen: f64) -> f64 {
    const TABLE: [f64; 9] = [0.0, 1.0, 1.14, 1.20, 1.09, 2.20, 2.21, 2.18, 2.15];
    match k {
        0 => 0.0,
        1..=8 => TABLE[k as usize],
        _ => TABLE[8].max(f64::from(k) * prompt_per_gen),
    }
}

/// The prediction for one request.
#[derive(Debug, Clone, Serialize)]
pub struct RequestPrediction {
    pub id: u64,
    #[serde(flatten)]
    pub sim: Simulated,
    /// Generation time without and with speculation, in generated tokens' time.
    pub plain_cost: f64,
    pub spec_cost: f64,
}

/// The prediction over a trace.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub drafter: NgramMod,
    /// Requests predicted (those with answer tokens), and those without.
    pub predicted: usize,
    pub without_answers: usize,
    pub drafted: u64,
    pub accepted: u64,
    /// Generation time with speculation over without (below 1: faster).
    pub gen_ratio: f64,
    /// The time per request with speculation over without, the prompts read included (at the
    /// speeds' prompt rate; without speeds, a prompt token at an eighth of a generated one's).
    pub request_ratio: Option<f64>,
    pub speeds: Option<Speeds>,
    pub requests: Vec<RequestPrediction>,
}

impl Prediction {
    /// Accepted over drafted, 0 to 1; None when nothing would be drafted.
    pub fn acceptance(&self) -> Option<f64> {
        (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64)
    }

    /// Speculation is predicted to cost time, not save it: nothing drafted, or generation no
    /// faster (within 2 %).
    pub fn cannot_pay(&self) -> bool {
        self.predicted > 0 && (self.drafted == 0 || self.gen_ratio >= 0.98)
    }

    /// What `trace show` prints, each line under 100 columns: "speculative decoding
    /// (ngram-mod), predicted from 12 of 12 requests' answers:", then "  61 % of 1,290 drafted
    /// tokens accepted; generation 0.74x the time, a request 0.95x".
    pub fn lines(&self) -> Vec<String> {
        let n = crate::util::fmt_thousands;
        let head = "speculative decoding (ngram-mod), predicted";
        if self.predicted == 0 {
            return vec![
                format!("{head}: no answer tokens in the trace (record it with this qtune,"),
                "  or 'qtune trace session --answers')".into(),
            ];
        }
        let mut out = vec![format!(
            "{head} from {} of {} requests' answers:",
            self.predicted,
            self.predicted + self.without_answers
        )];
        let Some(a) = self.acceptance() else {
            out.push("  nothing would be drafted, so it cannot pay".into());
            return out;
        };
        out.push(format!(
            "  {:.0} % of {} drafted tokens accepted; generation {:.2}x the time{}{}",
            a * 100.0,
            n(self.drafted as f64),
            self.gen_ratio,
            self.request_ratio
                .map(|r| format!(", a request {r:.2}x"))
                .unwrap_or_default(),
            if self.cannot_pay() {
                " (it cannot pay)"
            } else {
                ""
            }
        ));
        out
    }
}

/// Predict `--spec-type ngram-mod` with settings `p` over the trace, as a replay runs it (the
/// requests in id order, each asked for its recorded length, greedy).
pub fn predict(t: &Trace, p: NgramMod) -> Prediction {
    predict_on(t, p, Speeds::of(&t.requests))
}

/// [`predict`] on a box of these `speeds` (a box not at hand: its predicted generation and
/// prompt speeds), not the recording box's.
pub fn predict_on(t: &Trace, p: NgramMod, speeds: Option<Speeds>) -> Prediction {
    let mut d = Drafter::new(p);
    let n_ctx = t.header.model.n_ctx.map(|c| c as usize);
    let ppg = speeds.map_or(0.125, |s| s.prompt_ms / s.gen_ms);
    let prompts: Vec<Option<&[u32]>> = t
        .requests
        .iter()
        .map(|r| r.prompt_tokens.as_deref())
        .collect();
    let links = super::trace::prefix_links(&prompts);
    let mut out = Vec::new();
    let mut without = 0usize;
    let (mut plain_all, mut spec_all, mut prompt_all) = (0.0, 0.0, 0.0);
    for (r, link) in t.requests.iter().zip(&links) {
        let Some(prompt) = &r.prompt_tokens else {
            continue;
        };
        let Some(answer) = r.answer_tokens.as_ref().filter(|a| !a.is_empty()) else {
            // Its prompt still fills the table, as the live server's did.
            d.run(prompt, &[], None, n_ctx);
            without += 1;
            continue;
        };
        let n_predict = r.n_generated.map(|n| n as usize).or(Some(answer.len()));
        let sim = d.run(prompt, answer, n_predict, n_ctx);
        // The first token comes from reading the prompt, with or without speculation.
        let plain_cost = sim.generated.saturating_sub(1) as f64;
        let spec_cost =
            sim.steps_plain as f64 + sim.batches.iter().map(|&k| batch_cost(k, ppg)).sum::<f64>();
        plain_all += plain_cost;
        spec_all += spec_cost;
        // The prompt tokens read: the server's count, else those past the longest prefix an
        // earlier prompt shares (what a cache would hold).
        let read = r.timings.map_or_else(
            || prompt.len().saturating_sub(link.map_or(0, |(_, n)| n)),
            |t| t.prompt_n as usize,
        );
        prompt_all += read as f64 * ppg;
        out.push(RequestPrediction {
            id: r.id,
            sim,
            plain_cost,
            spec_cost,
        });
    }
    let drafted = out.iter().map(|r| r.sim.drafted).sum();
    let accepted = out.iter().map(|r| r.sim.accepted).sum();
    Prediction {
        drafter: p,
        predicted: out.len(),
        without_answers: without,
        drafted,
        accepted,
        gen_ratio: if plain_all > 0.0 {
            spec_all / plain_all
        } else {
            1.0
        },
        request_ratio: (plain_all > 0.0)
            .then(|| (prompt_all + spec_all) / (prompt_all + plain_all)),
        speeds,
        requests: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> NgramMod {
        NgramMod {
            n_match: 4,
            n_min: 3,
            n_max: 8,
        }
    }

    #[test]
    fn the_hash_is_llama_cpps() {
        // h = ((0 * M + 1) * M + 2) mod 2^64, then mod 4 Mi; checked by hand against the C++
        // expression with size_t arithmetic.
        let t = Table::new(2);
        let h = MUL.wrapping_add(2);
        assert_eq!(t.idx(&[1, 2]), (h % TABLE as u64) as usize);
    }

    #[test]
    fn text_the_answer_repeats_from_the_prompt_is_drafted_and_accepted() {
        // The prompt holds a 40-token run; the answer repeats it.
        let run: Vec<u32> = (100..140).collect();
        let mut prompt = vec![1, 2, 3];
        prompt.extend(&run);
        prompt.extend([7, 8, 9, 10, 11]);
        let answer: Vec<u32> = run.clone();
        let mut d = Drafter::new(small());
        let s = d.run(&prompt, &answer, Some(answer.len()), None);
        assert!(s.drafted > 0, "{s:?}");
        assert_eq!(
            s.accepted, s.drafted,
            "every drafted token is the answer's: {s:?}"
        );
        assert_eq!(s.generated, answer.len() as u64);
        // New text is never drafted.
        let fresh: Vec<u32> = (500..540).collect();
        let mut d = Drafter::new(small());
        let s = d.run(&prompt, &fresh, Some(fresh.len()), None);
        assert_eq!((s.drafted, s.accepted), (0, 0), "{s:?}");
        assert_eq!(s.steps_plain, fresh.len() as u64 - 1);
    }

    #[test]
    fn a_draft_that_goes_wrong_is_accepted_up_to_the_first_difference() {
        let run: Vec<u32> = (100..120).collect();
        let mut prompt = run.clone();
        prompt.extend([1, 1, 1, 1, 1]);
        // The answer repeats the first 10 tokens of the run, then leaves it.
        let mut answer: Vec<u32> = run[..10].to_vec();
        answer.extend(900..910);
        let mut d = Drafter::new(small());
        let s = d.run(&prompt, &answer, Some(answer.len()), None);
        assert!(s.drafted > s.accepted && s.accepted > 0, "{s:?}");
        // n_predict cuts drafts: never past the asked length.
        let mut d = Drafter::new(small());
        let s = d.run(&prompt, &answer, Some(6), None);
        assert!(s.generated <= 6, "{s:?}");
    }

    #[test]
    fn a_verify_batch_costs_the_tables_time_then_the_prompts() {
        assert_eq!(batch_cost(1, 0.1), 1.0);
        assert_eq!(batch_cost(4, 0.1), 1.09);
        assert_eq!(batch_cost(5, 0.1), 2.20);
        assert!((batch_cost(65, 0.1) - 6.5).abs() < 1e-9);
        assert_eq!(batch_cost(65, 0.01), 2.15);
    }
}
