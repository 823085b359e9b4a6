//! The report's later sections: hardware, model, search, confirmation, trials, where the
//! time went, and the model pick.

use super::*;

pub(super) fn hardware(m: &mut String, r: &TuneResult) {
    let hw = &r.inputs.hardware;
    let _ = writeln!(m, "## Hardware\n");
    if hw.gpus.is_empty() {
        let _ = writeln!(
            m,
            "- **GPU:** none ({}): a CPU-only tune, VRAM not measured",
            text(hw.no_gpu_reason.as_deref().unwrap_or("none found"))
        );
    }
    for g in &hw.gpus {
        let link = match (g.pcie.gen_current, g.pcie.width_current) {
            (Some(gen), Some(w)) => format!(" · PCIe {gen}.0 x{w}"),
            _ => String::new(),
        };
        let cc = g
            .compute_capability
            .map(|(a, b)| format!(" · compute {a}.{b}"))
            .unwrap_or_default();
        let _ = writeln!(
            m,
            "- **GPU {}:** {} · {} total, {} free at start{link}{cc}",
            g.index,
            text(&g.name),
            fmt_mib(g.vram_total_mib as f64),
            fmt_mib(g.vram_free_mib as f64)
        );
        if g.vram_total_mib > 0
            && (g.vram_free_mib as f64) < EMULATED_FREE_SHARE * g.vram_total_mib as f64
        {
            let _ = writeln!(
                m,
                "  - **Emulated card:** free VRAM at start {} of {}: another process (e.g. a ballast \
                 emulating a smaller card) held the rest. The tune used only what was free.",
                fmt_mib(g.vram_free_mib as f64),
                fmt_mib(g.vram_total_mib as f64)
            );
        }
    }
    if let (Some(d), c) = (&hw.driver_version, &hw.cuda_version) {
        let _ = writeln!(
            m,
            "- **Driver:** {}{}",
            text(d),
            c.as_ref()
                .map(|c| format!(" (CUDA {})", text(c)))
                .unwrap_or_default()
        );
    }
    if let Some(b) = r.inputs.vram_budget_mib {
        let _ = writeln!(
            m,
            "- **VRAM budget:** {} (free at start {} − headroom {})",
            fmt_mib(b as f64),
            fmt_mib(r.inputs.free_vram_at_start_mib as f64),
            fmt_mib(r.inputs.headroom_mib as f64)
        );
    }
    if !r.inputs.gpu_budgets.is_empty() {
        let _ = writeln!(
            m,
            "- **Cards** (device order, `CUDA_DEVICE_ORDER=PCI_BUS_ID`; the headroom is kept on each):"
        );
        for g in &r.inputs.gpu_budgets {
            let _ = writeln!(
                m,
                "  - CUDA{}: {} · budget {} (free at start {})",
                g.index,
                text(&g.name),
                fmt_mib(g.budget_mib as f64),
                fmt_mib(g.free_mib as f64)
            );
        }
    }
    let h = &hw.host;
    let _ = writeln!(
        m,
        "- **CPU:** {} · {} cores ({} logical){}",
        text(&h.cpu_model),
        h.physical_cores.map_or("?".to_string(), |c| c.to_string()),
        h.logical_cores,
        h.mem_bandwidth_gbs
            .map(|b| format!(" · memory read {}", crate::util::gbs(b)))
            .unwrap_or_default()
    );
    let _ = writeln!(
        m,
        "- **RAM:** {:.1} GiB ({:.1} GiB available at start)",
        h.ram_total_mib as f64 / 1024.0,
        h.ram_available_mib as f64 / 1024.0
    );
    let _ = writeln!(m, "- **OS:** {}\n", text(&h.os));
}

pub(super) fn model(m: &mut String, r: &TuneResult) {
    let l = &r.model;
    let _ = writeln!(m, "## Model\n");
    let _ = writeln!(
        m,
        "| architecture | blocks | experts (used) | file type | size | file |"
    );
    let _ = writeln!(m, "|---|---:|---|---|---:|---|");
    let experts = if l.n_experts > 0 {
        format!("{} ({})", l.n_experts, l.n_experts_used)
    } else {
        "dense".to_string()
    };
    let _ = writeln!(
        m,
        "| {} | {} | {} | {} | {:.2} GiB | {} |\n",
        text(&l.arch),
        l.n_blocks,
        experts,
        text(l.file_type.as_deref().unwrap_or("?")),
        l.file_bytes as f64 / (1024.0 * 1024.0 * 1024.0),
        code(&r.inputs.model_path.display().to_string())
    );
    let _ = writeln!(
        m,
        "Server: {} ({})\n",
        code(&r.inputs.server_path.display().to_string()),
        text(&crate::engine::binary::short_version(
            &r.inputs.server_version
        ))
    );
}

pub(super) fn search(m: &mut String, r: &TuneResult) {
    let s = &r.inputs.space;
    let _ = writeln!(m, "## Search space and budget\n");
    let _ = writeln!(
        m,
        "- **Space:** {}{}",
        code(&s.name),
        if s.description.is_empty() {
            String::new()
        } else {
            format!(": {}", text(&s.description))
        }
    );
    let _ = writeln!(
        m,
        "- **Fixed:** context {} tokens, {}, load mode {}",
        s.fixed.ctx,
        crate::util::count(u64::from(s.fixed.parallel), "slot", "slots"),
        s.load_modes()
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(" / ")
    );
    let w = &s.workload;
    // What each launch sent, and nothing it did not: a replay sends the trace's requests only.
    match &w.replay {
        Some(t) => {
            let _ = writeln!(
                m,
                "- **Workload per trial:** the trace {}, {}",
                text(&t.name),
                text(&t.plan.describe())
            );
        }
        None => {
            let _ = writeln!(
                m,
                "- **Workload per trial:** {} prompt tokens, {} generated, {} measured request(s){}{}{}",
                w.prompt_tokens,
                w.gen_tokens,
                w.repetitions,
                if w.warmup { " after a warm-up" } else { "" },
                w.context_depth
                    .map(|d| format!(", generation also measured at depth {d}"))
                    .unwrap_or_default(),
                w.objective_mix()
                    .map(|x| format!("; then the workload {}", text(&x.describe())))
                    .unwrap_or_default()
            );
        }
    }
    let vary = serde_json::to_string(&s.vary).unwrap_or_default();
    let _ = writeln!(m, "- **Varied:** {}", code(&vary));
    let _ = writeln!(
        m,
        "- **Objective:** {} (ties within {} %)",
        s.objective.metric.as_str(),
        s.objective.tie_pct
    );
    let b = &s.budget;
    let count = |role: TrialRole| r.trials.iter().filter(|t| t.role == role).count();
    let skipped = r
        .trials
        .iter()
        .filter(|t| t.kind == OutcomeKind::Skipped)
        .count();
    // The budget as it stands after any `--resume` (run.json keeps the new total), and the
    // rounds the race ran, not the ones planned.
    let rounds = r.race.as_ref().map_or(0, |x| x.outcome.rounds.len() as u64);
    let _ = writeln!(
        m,
        "- **Budget:** {}, {}; top {} raced against the baselines: {} interleaved",
        crate::util::count(u64::from(b.trials), "launch", "launches"),
        crate::util::minutes(b.minutes),
        b.confirm_top,
        crate::util::count(rounds, "round", "rounds"),
    );
    let _ = writeln!(
        m,
        "- **Used:** {} trials ({} search, {} baseline, {} confirmation, {} sweep; {} skipped by the memory prediction) in {:.1} minutes\n",
        r.trials.len(),
        count(TrialRole::Search),
        count(TrialRole::Baseline),
        count(TrialRole::Confirm),
        count(TrialRole::Sweep),
        skipped,
        r.minutes_used
    );
}

pub(super) fn confirmation(m: &mut String, r: &TuneResult) {
    if r.confirmation.is_empty() {
        return;
    }
    let _ = writeln!(m, "## Confirmation (interleaved re-measurement)\n");
    let _ = writeln!(
        m,
        "| candidate | time per request (s) | generation (tok/s) | prompt (tok/s) | peak VRAM | trials |"
    );
    let _ = writeln!(m, "|---|---:|---:|---:|---:|---|");
    let time = |c: &LaunchConfig| r.objective_time(c, None).map(|t| t.seconds);
    let mut rows: Vec<&crate::run::Confirmed> = r.confirmation.iter().collect();
    rows.sort_by(|a, b| {
        let gen =
            |c: &crate::run::Confirmed| c.gen_tps.as_ref().map_or(f64::NEG_INFINITY, |s| s.median);
        crate::util::by_time(time(&a.config), gen(a), time(&b.config), gen(b))
    });
    for c in rows {
        let name = if c.is_baseline {
            format!("baseline: `{}`", c.config.label())
        } else {
            format!("`{}`", c.config.label())
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&name),
            time(&c.config).map_or("–".to_string(), |x| format!("{x:.2}")),
            c.gen_tps.as_ref().map_or("failed".to_string(), tps),
            c.prompt_tps.as_ref().map_or("failed".to_string(), tps),
            vram(c.peak_vram_mib),
            ids(&c.trial_ids)
        );
    }
    let _ = writeln!(m);
}

pub(super) fn trials(m: &mut String, r: &TuneResult) {
    let _ = writeln!(m, "## All trials\n");
    if r.trials.is_empty() {
        let _ = writeln!(m, "No trial ran.\n");
        return;
    }
    let _ = writeln!(
        m,
        "| # | time per request (s) | role | config | outcome | generation (tok/s) | prompt (tok/s) | tg % of bound | peak VRAM | time | note |"
    );
    let _ = writeln!(m, "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---|");
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.inputs.hardware);
    // The tune's objective first: each launch's own time per request (the numbers the
    // summary's medians are taken over), the lowest first; launches without one after.
    let mix = r.inputs.space.workload.objective_mix();
    let mut sorted: Vec<(&TrialOutcome, Option<f64>)> = r
        .trials
        .iter()
        .map(|t| (t, crate::run::figures::launch_time(t, mix)))
        .collect();
    sorted.sort_by(|a, b| {
        let gen = |t: &TrialOutcome| t.gen_tps().unwrap_or(f64::NEG_INFINITY);
        crate::util::by_time(a.1, gen(a.0), b.1, gen(b.0))
    });
    for (t, time) in sorted {
        let (g, p) = match &t.metrics {
            Some(x) => (
                format!(
                    "{:.2} ±{:.1} %",
                    x.gen_tps.median,
                    x.gen_tps.spread_pct / 2.0
                ),
                format!("{:.2}", x.prompt_tps.median),
            ),
            None => ("–".to_string(), "–".to_string()),
        };
        let note = if t.kind.is_ok() {
            String::new()
        } else {
            t.message.lines().next().unwrap_or("").to_string()
        };
        let roof = match (&t.metrics, speed_of(r, &sb, &t.config)) {
            (Some(x), Some(sp)) => format!("{:.0} %", x.gen_tps.median / sp.tg_bound_tps * 100.0),
            _ => "–".to_string(),
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | `{}` | {} | {} | {} | {} | {} | {:.0} s | {} |",
            t.id,
            time.map_or("–".to_string(), |x| format!("{x:.2}")),
            crate::search::progress::launch_word(t.role, &t.config),
            cell(&t.config.label()),
            outcome_cell(t),
            g,
            p,
            roof,
            vram(t.peak_vram_total_mib()),
            t.duration_s,
            prose(&note)
        );
    }
    let _ = writeln!(
        m,
        "\nSorted by time per request: each launch's own (the summary's is the median over a \
         config's launches). Generation: median ± half the spread of the trial's requests. tg % of bound: the \
         measured generation as a share of the speed model's bound for that config (weight and KV \
         bytes over GPU and host bandwidth, no overheads; a config that places itself is modelled \
         as its fit is expected to place it on one GPU, `–` where it cannot be). A failed trial's note is its one-line diagnosis; its log is under `logs/`.\n"
    );
}

/// The speed model's prediction for `cfg` on the run's box and workload. A config that leaves
/// the placement to the server (the baseline) is modelled on one GPU with the placement its
/// own fit is expected to choose ([`crate::search::candidates::predict_server_default`]).
pub(super) fn speed_of(
    r: &TuneResult,
    sb: &crate::model::speed::SpeedBox,
    cfg: &LaunchConfig,
) -> Option<crate::model::speed::SpeedPrediction> {
    let prompt_tokens = r.inputs.space.workload.prompt_tokens;
    if let [gpu] = r.inputs.hardware.gpus.as_slice() {
        let free = gpu.vram_free_mib as f64;
        if let Some((_, p)) = crate::search::candidates::predict_server_default(
            &r.model,
            cfg,
            free,
            sb,
            prompt_tokens,
        ) {
            return Some(p);
        }
    }
    crate::model::speed::predict(
        &r.model,
        cfg,
        sb,
        r.inputs.hardware.has_gpu(),
        prompt_tokens,
        &crate::model::speed::FITTED,
    )
}

/// The placement the server's own fit is expected to choose for `cfg` (one GPU, a config with
/// no placement flags), as explicit flags.
pub(super) fn server_placement(r: &TuneResult, cfg: &LaunchConfig) -> Option<LaunchConfig> {
    let [gpu] = r.inputs.hardware.gpus.as_slice() else {
        return None;
    };
    crate::search::candidates::server_default_stand_in(&r.model, cfg, gpu.vram_free_mib as f64)
}

/// "Where the time goes": the winner's measured speed against the speed model's prediction,
/// its bound, and the model's split of one token's time.
pub(super) fn time_split(m: &mut String, r: &TuneResult) {
    let Some(w) = &r.winner else { return };
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.inputs.hardware);
    let _ = writeln!(m, "## Where the time goes (speed model)\n");
    let Some(sp) = speed_of(r, &sb, &w.config) else {
        let _ = writeln!(
            m,
            "No model prediction for the winner: {}.\n",
            if w.config.is_auto_placement() {
                "its placement is the server's own, not known before the launch"
            } else {
                "this GPU's memory bandwidth is unknown"
            }
        );
        return;
    };
    if let Some(p) = server_placement(r, &w.config) {
        let _ = writeln!(
            m,
            "The winner places itself: modelled as its fit is expected to place it ({}). Its \
             prompt interval's upper end is {}× the prediction: its CPU experts are \
             memory-mapped, which the fit saw least (the committed runs measured up to 1.74×).\n",
            crate::search::candidates::stand_in_placement(&p),
            crate::search::candidates::SERVER_DEFAULT_PP_HIGH
        );
    }
    let d = &sp.decode;
    let total = d.total_ms().max(1e-9);
    let share = |x: f64| format!("{:.1} ms ({:.0} %)", x, x / total * 100.0);
    let _ = writeln!(m, "| | measured | modelled | bound |");
    let _ = writeln!(m, "|---|---:|---:|---:|");
    let _ = writeln!(
        m,
        "| generation (tok/s) | {:.1} | {} | {:.0} ({:.0} % reached) |",
        w.gen_tps.median,
        sp.tg.text(),
        sp.tg_bound_tps,
        w.gen_tps.median / sp.tg_bound_tps * 100.0
    );
    let _ = writeln!(
        m,
        "| prompt (tok/s, {}-token prompt) | {:.1} | {} | |\n",
        sp.prompt_tokens,
        w.prompt_tps.median,
        sp.pp.text()
    );
    let _ = writeln!(
        m,
        "One generated token, as modelled: GPU weights and KV {}, CPU experts {}, per-layer \
         overhead {}. One {}-token micro-batch of the prompt: copying CPU experts to the GPU \
         {:.0} ms, GPU compute {:.0} ms, CPU compute {:.0} ms.\n",
        share(d.gpu_ms),
        share(d.cpu_experts_ms),
        share(d.overhead_ms),
        sp.prefill.ubatch,
        sp.prefill.copy_ms,
        sp.prefill.gpu_ms,
        sp.prefill.cpu_ms
    );
    let _ = writeln!(
        m,
        "The bound is bytes over bandwidth alone; the model adds the fitted overheads \
         (`src/model/speed.rs`, fitted on the committed GPU runs; interval: its held-out error). \
         Room left is in the largest share: fewer CPU experts (more VRAM) when CPU experts \
         dominate, nothing much when overhead does.\n"
    );
}

/// "The speed model's pick": the config the tune launched right after the baseline as the
/// model's best for this card, its predicted speeds against what its launches
/// measured (the median of their medians), and what became of it.
pub(super) fn model_pick(m: &mut String, r: &TuneResult) {
    let Some(pick) = &r.model_pick else { return };
    let launched: Vec<&TrialOutcome> = r
        .trials
        .iter()
        .filter(|t| &t.config == pick && t.kind != OutcomeKind::Skipped)
        .collect();
    let _ = writeln!(m, "## The speed model's pick\n");
    let Some(first) = launched.first() else {
        let _ = writeln!(m, "`{}` was chosen but never launched.\n", pick.label());
        return;
    };
    let median = |v: Vec<f64>| Stat::from_samples(&v).map(|s| s.median);
    let ok: Vec<&&TrialOutcome> = launched.iter().filter(|t| t.kind.is_ok()).collect();
    let tg = median(ok.iter().filter_map(|t| t.gen_tps()).collect());
    let pp = median(ok.iter().filter_map(|t| t.prompt_tps()).collect());
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.inputs.hardware);
    let pred = speed_of(r, &sb, pick);
    let err = |p: f64, x: Option<f64>| {
        x.map_or(String::new(), |x| {
            format!(" ({:+.1} %)", (p / x - 1.0) * 100.0)
        })
    };
    let fate = if r.winner.as_ref().is_some_and(|w| &w.config == pick) {
        "It is the winner."
    } else if r
        .race
        .as_ref()
        .is_some_and(|race| race.candidates.contains(pick))
    {
        "It raced the baseline (above) and did not win."
    } else if ok.len() < launched.len() {
        "A launch of it failed or went over the budget, so it cannot win."
    } else {
        "The screening ranked others ahead of it, so it was not raced."
    };
    let _ = writeln!(
        m,
        "`{}` was launched as trial {}, the config the speed model rated best for this card \
         (the rule `qtune plan` proposes by), measured over {} ok launch(es).\n",
        pick.label(),
        first.id,
        ok.len()
    );
    let _ = writeln!(m, "| | measured | predicted (error) |");
    let _ = writeln!(m, "|---|---:|---:|");
    let fmt = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.1}"));
    match &pred {
        Some(p) => {
            let _ = writeln!(
                m,
                "| generation (tok/s) | {} | {}{} |",
                fmt(tg),
                p.tg.text(),
                err(p.tg.tps, tg)
            );
            let _ = writeln!(
                m,
                "| prompt (tok/s) | {} | {}{} |\n",
                fmt(pp),
                p.pp.text(),
                err(p.pp.tps, pp)
            );
        }
        None => {
            let _ = writeln!(m, "| generation (tok/s) | {} | – |", fmt(tg));
            let _ = writeln!(m, "| prompt (tok/s) | {} | – |\n", fmt(pp));
        }
    }
    let _ = writeln!(m, "{fate}\n");
}
