//! What the search knows that does not change during a tune: the space, the model, the box,
//! the budget and the clock; and the configs that follow from them (the starting point, the
//! alternatives along each dimension, the predicted `--n-cpu-moe` boundary, the baseline).

use crate::config::{Base, BlockSet, FlashAttn, KvType, LaunchConfig};
use crate::model::ModelLayout;
use crate::space::{NCpuMoe, SearchSpace, Threads};
use std::sync::Arc;

/// What the search knows that does not change during a tune (not checkpointed).
#[derive(Debug, Clone)]
pub struct SearchContext {
    pub space: SearchSpace,
    pub layout: ModelLayout,
    /// A GPU is present and the model has experts: `--n-cpu-moe` is searched.
    pub gpu_moe: bool,
    pub has_gpu: bool,
    /// VRAM budget for predictions (free before the tune minus headroom), MiB.
    pub budget_mib: Option<f64>,
    pub physical_cores: u32,
    pub logical_cores: u32,
    /// Start here instead of the space's first values (from a profile).
    pub start: Option<Base>,
    /// Host RAM available before the tune, MiB (`None`: not checked). A config whose predicted
    /// resident host memory is over it is never launched (pinned experts live in host RAM).
    pub ram_available_mib: Option<f64>,
    /// `--fit-target` of the `fit` placement candidate, MiB (the tune's VRAM headroom).
    pub fit_target_mib: u32,
    /// The clock the minutes budget is read from.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// What the speed model knows of this box (None: no ordering by predicted speed).
    pub speed: Option<crate::model::speed::SpeedBox>,
    /// Each card's budget on a box with two GPUs or more (empty: one GPU, `budget_mib`).
    pub gpus: Vec<crate::hardware::GpuBudget>,
    /// What the workload can show, for the levers past placement ([`crate::search::levers`]).
    pub workload_traits: crate::search::levers::WorkloadTraits,
    /// Each engine's server as its `--version` reads (the tune's first, then the others it
    /// races): what an engine's own levers can do depends on its build.
    pub server_versions: Vec<(crate::config::EngineKind, String)>,
}

impl SearchContext {
    pub(crate) fn ncmoe_bounds(&self) -> (u32, u32) {
        let n = self.layout.n_blocks;
        match &self.space.vary.n_cpu_moe {
            Some(NCpuMoe::Range { min, max }) => ((*min).min(n), (*max).min(n)),
            _ => (0, n),
        }
    }

    pub(super) fn thread_values(&self) -> Vec<Option<u32>> {
        let mut v: Vec<Option<u32>> = self
            .space
            .vary
            .threads
            .iter()
            .map(|t| match t {
                Threads::Auto(_) => self.physical_cores.max(1),
                Threads::Count(c) => *c,
            })
            .filter(|&c| c >= 1 && c <= self.logical_cores.max(1))
            // A busy box: no trial gets more threads than the free cores.
            .map(|c| self.space.fixed.threads_cap.map_or(c, |cap| c.min(cap)))
            .map(Some)
            .collect();
        let mut seen = Vec::new();
        v.retain(|t| {
            let new = !seen.contains(t);
            seen.push(*t);
            new
        });
        if v.is_empty() {
            let cores = self.physical_cores.max(1);
            v.push(Some(
                self.space
                    .fixed
                    .threads_cap
                    .map_or(cores, |cap| cores.min(cap)),
            ));
        }
        v
    }

    pub(super) fn start_base(&self) -> Base {
        if let Some(b) = &self.start {
            return b.clone();
        }
        let v = &self.space.vary;
        // A workload of long prompts (a mean of 4,096 new tokens or more per request, e.g. a
        // long document) starts at the space's largest micro-batch: prompt processing is most
        // of its time per request, and a larger ubatch reads prompts faster wherever experts
        // sit on the CPU (1.6x at -ub 2048, docs/how-it-works.md). Otherwise the first pair.
        let long_prompts = self.space.objective.metric == crate::objective::Metric::Request
            && self.space.workload.request_tokens().0 >= 4096.0;
        let batch = if long_prompts {
            v.batch_ubatch.iter().copied().max_by_key(|p| (p[1], p[0]))
        } else {
            v.batch_ubatch.first().copied()
        };
        let first = Base {
            threads: self.thread_values()[0],
            batch,
            kv: v.kv_types.first().copied().unwrap_or([KvType::F16; 2]),
            flash_attn: v.flash_attn.first().copied().unwrap_or(FlashAttn::Auto),
        };
        // One card that holds every expert with f16 KV (the server's default): start there.
        // A quantized KV then frees VRAM nothing needs and costs generation (on 24 GiB cards
        // q8_0 screened 3-6 % below the f16 default on both shapes, after 8 of 20 launches had
        // gone to q8_0 at four ubatch sizes before f16 was tried once:
        // docs/evidence/gpu-h100-proof13).
        const F16: [KvType; 2] = [KvType::F16; 2];
        if self.gpu_moe && !self.multi_gpu() && first.kv != F16 && v.kv_types.contains(&F16) {
            let f16 = Base {
                kv: F16,
                ..first.clone()
            };
            if self.predicted_fit(&f16, 0.0) == Some(0) && self.ncmoe_bounds().0 == 0 {
                return f16;
            }
        }
        first
    }

    /// Alternatives to `inc` along dimension `dim`: 0 batch/ubatch, 1 KV type, 2 threads,
    /// 3 flash attention. Batch comes first: it moves VRAM (compute buffer) and prompt speed
    /// most, and the KV type decided after it can win back the VRAM a larger ubatch took.
    pub(super) fn alternatives(&self, inc: &Base, dim: usize) -> Vec<Base> {
        let v = &self.space.vary;
        let mut out: Vec<Base> = match dim {
            1 => v
                .kv_types
                .iter()
                .map(|kv| Base {
                    kv: *kv,
                    ..inc.clone()
                })
                .collect(),
            0 => v
                .batch_ubatch
                .iter()
                .map(|b| Base {
                    batch: Some(*b),
                    ..inc.clone()
                })
                .collect(),
            2 => self
                .thread_values()
                .into_iter()
                .map(|t| Base {
                    threads: t,
                    ..inc.clone()
                })
                .collect(),
            3 => v
                .flash_attn
                .iter()
                .map(|fa| Base {
                    flash_attn: *fa,
                    ..inc.clone()
                })
                .collect(),
            _ => Vec::new(),
        };
        out.retain(|b| b != inc);
        out
    }

    /// The starting base (for tests of the modules next to the strategy).
    #[cfg(test)]
    pub(crate) fn start_base_for_tests(&self) -> Base {
        self.start_base()
    }

    /// The launch config of a base at `n_cpu_moe` (ignored without GPU + experts). On several
    /// GPUs: `n` blocks' experts on the CPU and the layers split so that the fullest card has
    /// the most room ([`Self::config_placed`]), each card with its CUDA context estimate.
    pub fn config(&self, base: &Base, n_cpu_moe: u32) -> LaunchConfig {
        if self.multi_gpu() {
            let context = vec![crate::model::cards::CARD_CONTEXT_MIB; self.gpus.len()];
            return self.config_placed(base, n_cpu_moe, &context).0;
        }
        let mut c = self.unplaced(base);
        if self.gpu_moe {
            c.place_experts(n_cpu_moe);
        }
        c
    }

    /// A base's config with nothing placed yet (the server's defaults for placement).
    fn unplaced(&self, base: &Base) -> LaunchConfig {
        let f = &self.space.fixed;
        LaunchConfig {
            parallel: f.parallel,
            threads: base.threads,
            batch: base.batch.map(|b| b[0]),
            ubatch: base.batch.map(|b| b[1]),
            cache_type_k: base.kv[0],
            cache_type_v: base.kv[1],
            flash_attn: base.flash_attn,
            // The space's first load mode; the strategy varies it (vary.load_mode).
            load_mode: self.space.load_modes()[0],
            engine: f.engine,
            rpc: crate::hardware::rpc::addresses(&f.rpc_workers),
            // Nothing placed: no -ngl, CPU experts, fit or split (op offload on).
            ..LaunchConfig::baseline(f.ctx)
        }
    }

    /// Several GPUs: a base's config with `n` blocks' experts on the CPU and the `-ts` split
    /// that leaves the most room on its fullest card, each card holding `extra_mib` (device
    /// order) beyond its predicted buffers ([`crate::model::cards::balanced_split`]); and that
    /// room, MiB (negative: a card is over).
    pub fn config_placed(&self, base: &Base, n: u32, extra_mib: &[f64]) -> (LaunchConfig, f64) {
        let mut c = self.unplaced(base);
        let p = crate::model::cards::balanced_split(&self.layout, &c, &self.gpus, extra_mib, n);
        c.place_on_gpus(p.split, p.cpu_blocks);
        (c, p.room_mib)
    }

    /// Several GPUs: a base's config at `n` under a given `-ts` split, with the blocks
    /// [`Self::config_placed`] takes under it: how a trial of this search was placed.
    pub fn config_at(&self, base: &Base, n: u32, split: &[u32]) -> LaunchConfig {
        let mut c = self.unplaced(base);
        let blocks = self.cpu_fill(&c, split, n);
        c.place_on_gpus(split.to_vec(), blocks);
        c
    }

    /// Smallest `--n-cpu-moe` the memory prediction says fits the budget (None: nothing fits).
    /// `unitemized_mib`: GPU memory the server's reported buffers do not itemize (the CUDA
    /// context and its workspaces), as measured in this tune ([`unitemized_vram_mib`]); the
    /// buffers must fit what it leaves of the budget.
    /// On several GPUs: [`Self::predicted_fit_cards`] with each card's CUDA context estimate.
    pub fn predicted_fit(&self, base: &Base, unitemized_mib: f64) -> Option<u32> {
        if self.multi_gpu() {
            let context = vec![crate::model::cards::CARD_CONTEXT_MIB; self.gpus.len()];
            return self.predicted_fit_cards(base, &context);
        }
        let (lo, hi) = self.ncmoe_bounds();
        let budget = self.budget_mib? - unitemized_mib;
        let template = self.config(base, lo);
        crate::model::memory::min_n_cpu_moe_that_fits(&self.layout, &template, budget)
            .map(|n| n.clamp(lo, hi))
    }

    /// Several GPUs: the fewest blocks' experts on the CPU for which some `-ts` split fits every
    /// card, each holding `extra_mib` (device order) beyond its predicted buffers.
    pub fn predicted_fit_cards(&self, base: &Base, extra_mib: &[f64]) -> Option<u32> {
        let (lo, hi) = self.ncmoe_bounds();
        (lo..=hi).find(|&n| self.config_placed(base, n, extra_mib).1 >= 0.0)
    }

    /// `--fit-target` of fit's candidate on each card, MiB: the tune's headroom plus fit's
    /// measured overshoot ([`crate::placement::FIT_OVERSHOOT_MIB`]).
    pub fn fit_candidate_target_mib(&self) -> u32 {
        self.fit_target_mib + crate::placement::FIT_OVERSHOOT_MIB
    }

    pub fn baseline(&self) -> LaunchConfig {
        crate::run::baseline_of(&self.space)
    }

    /// The second baseline: what a user who asks for this headroom can type without qtune,
    /// `--fit on --fit-target <headroom>` (one target per card). Measured 8-12 % faster in
    /// generation than the bare default wherever experts sit on the CPU (docs/results.md).
    /// None without a GPU (fit then changes nothing) or where the space does not race.
    pub fn second_baseline(&self) -> Option<LaunchConfig> {
        if !self.has_gpu || !self.space.objective.second_baseline {
            return None;
        }
        let cards = self.gpus.len().max(1);
        let engine = crate::engine::of(self.space.fixed.engine);
        Some(engine.fit_baseline(
            &self.space.fixed.baseline_inputs(),
            self.fit_target_mib,
            cards,
        ))
    }

    /// Two GPUs or more and a MoE model: the layers are split over the cards (`-ts`) and the
    /// CPU experts are taken from each card's share, each card filled to its own budget.
    pub fn multi_gpu(&self) -> bool {
        self.gpu_moe && self.gpus.len() >= 2
    }

    /// How many blocks' experts a config of this search puts on the CPU (its `n` in
    /// [`Self::config`]): `--n-cpu-moe` on one GPU; the `-ot` CPU blocks on several.
    pub fn cpu_blocks_of(&self, c: &LaunchConfig) -> u32 {
        if self.multi_gpu() {
            c.n_cpu_moe.unwrap_or(0) + c.cpu_experts.as_ref().map_or(0, |e| e.blocks.len() as u32)
        } else {
            c.n_cpu_moe.unwrap_or(0)
        }
    }

    /// Each card's free VRAM before the tune, MiB (how llama.cpp splits without `-ts`).
    pub fn gpu_free_mib(&self) -> Vec<f64> {
        self.gpus.iter().map(|g| g.free_mib as f64).collect()
    }

    /// What each card's predicted buffers may fill: its budget minus the CUDA context every
    /// card holds ([`crate::model::cards::CARD_CONTEXT_MIB`]), MiB.
    pub fn gpu_budgets_mib(&self) -> Vec<f64> {
        crate::model::cards::buffer_budgets_mib(&self.gpus)
    }

    /// The `-ts` proportions (percent, summing to 100) by the cards' budgets, GPU 0's share
    /// moved by `shift_pct` points (kept within 5..=95 % per card).
    pub fn split_by_budget(&self, shift_pct: i32) -> Vec<u32> {
        crate::model::cards::split_by_budget(&self.gpu_budgets_mib(), shift_pct)
    }

    /// Predicted memory of `c` on this box's cards.
    pub fn predict_cards(&self, c: &LaunchConfig) -> crate::model::memory::MemoryPrediction {
        crate::model::memory::predict_devices(&self.layout, c, &self.gpu_free_mib())
    }

    /// Do `c`'s predicted buffers fit every card's own budget (less its CUDA context)?
    pub fn fits_cards(&self, c: &LaunchConfig) -> bool {
        crate::model::memory::fits_devices(&self.predict_cards(c), &self.gpu_budgets_mib())
    }

    /// The `n` blocks whose experts go to the CPU under `split`: one at a time from the card
    /// furthest over (or least under) its budget, the last block of that card's share not yet
    /// moved, so every card is filled to its own budget and the moved experts come from the
    /// card that needs the room (`--n-cpu-moe` would take them all from GPU 0).
    pub fn cpu_fill(&self, template: &LaunchConfig, split: &[u32], n: u32) -> BlockSet {
        let extra = vec![crate::model::cards::CARD_CONTEXT_MIB; self.gpus.len()];
        self.cpu_fill_with(template, split, &extra, n)
    }

    /// [`Self::cpu_fill`] with what each card holds beyond the prediction (`extra_mib`, device
    /// order), e.g. as measured in this tune.
    pub fn cpu_fill_with(
        &self,
        template: &LaunchConfig,
        split: &[u32],
        extra_mib: &[f64],
        n: u32,
    ) -> BlockSet {
        crate::model::cards::cpu_fill(&self.layout, template, split, &self.gpus, extra_mib, n)
    }

    /// Does `c` fit every card's budget with `extra_mib` (device order) on top of its
    /// predicted buffers?
    pub fn fits_cards_with(&self, c: &LaunchConfig, extra_mib: &[f64]) -> bool {
        let p = self.predict_cards(c);
        if p.gpu_devices.len() < 2 {
            return self.fits_cards(c);
        }
        p.gpu_devices.iter().all(|d| {
            let i = d.device as usize;
            let budget = self.gpus.get(i).map_or(0.0, |g| g.budget_mib as f64);
            d.total_mib + extra_mib.get(i).copied().unwrap_or(0.0) <= budget
        })
    }
}

/// GPU memory a launch uses beyond the buffers the server itemizes in its log (the CUDA context,
/// cuBLAS handles and workspaces), learned from this tune's own trials: the largest gap between
/// a trial's peak VRAM (NVML) and the sum of its reported GPU buffers, MiB. 0 before any trial
/// with both (a CPU-only box, or a replay without them).
///
/// Measured on the GPU machine (H100, CUDA 13.0, docs/evidence/gpu-h100-proof13): about 715-760 MiB in every trial,
/// whatever the placement, so the memory prediction alone (which itemizes only the buffers)
/// proposed placements 700 MiB over the card; the search's boundary step corrected for it one
/// launch at a time, the filled placements did not. Trials that ran out of memory are left out:
/// their peak is the card's limit, not the config's use.
pub fn unitemized_vram_mib<'a>(
    history: impl IntoIterator<Item = &'a crate::trial::TrialOutcome>,
) -> f64 {
    history
        .into_iter()
        .filter(|o| {
            !matches!(
                o.kind,
                crate::trial::OutcomeKind::OomLoad | crate::trial::OutcomeKind::OomRuntime
            )
        })
        .filter_map(|o| {
            let r = o.reported.as_ref()?;
            if o.peak_vram_mib.is_empty() {
                return None;
            }
            let reported = crate::trial::logparse::gpu_total_mib(r);
            (reported > 0.0).then(|| o.peak_vram_mib.iter().sum::<u64>() as f64 - reported)
        })
        .fold(0.0, f64::max)
}
