//! `results.json`: the one document of a finished run ([`results_document`]), written here
//! ([`write_results`]) and read back within bounds ([`read_result`]). A [`TuneResult`] is laid
//! out as [`ResultFile`]: the result's own fields and, beside them, the fields of its
//! [`RunInputs`] a result always carried (not `start`, nor the fingerprints, which only
//! `run.json` holds). Published in `docs/results-schema.md`: kept exactly as it was when the
//! result held copies of those fields.

use super::*;

/// The version of results.json's layout: the [`TuneResult`]'s fields plus `schema_version`,
/// `run_directory`, `report` and `verdict`. 3: results.json and `--json` became one document;
/// the verdict's times follow one rule; `measured_not_raced` replaced `workloads`; a
/// comparison the rounds do not support has no interval.
pub const JSON_SCHEMA_VERSION: u32 = 3;

/// The one JSON document of a tune, written as `results.json` and printed by
/// `qtune tune --json`: `schema_version`, `run_directory`, `report` and `verdict` (rendered by
/// `report::verdict_json`) first, then the run's result, which reading it back takes (the rest
/// it ignores). Its layout is published in `docs/results-schema.md`.
pub fn results_document(
    r: &TuneResult,
    run_dir: &Path,
    verdict: serde_json::Value,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    out.insert("schema_version".into(), JSON_SCHEMA_VERSION.into());
    out.insert(
        "run_directory".into(),
        run_dir.to_string_lossy().into_owned().into(),
    );
    out.insert(
        "report".into(),
        run_dir
            .join("report.md")
            .to_string_lossy()
            .into_owned()
            .into(),
    );
    out.insert("verdict".into(), verdict);
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(r) {
        out.extend(m);
    }
    serde_json::Value::Object(out)
}

/// Write `results.json` into a run directory, atomically: [`results_document`].
pub fn write_results(run_dir: &Path, r: &TuneResult, verdict: serde_json::Value) -> Result<()> {
    crate::util::write_atomic(
        &run_dir.join(RESULTS_FILE),
        serde_json::to_string_pretty(&results_document(r, run_dir, verdict))?.as_bytes(),
    )
}

/// Read `results.json` from a run directory (or the file itself). Returns the directory too.
pub fn read_result(dir_or_file: &Path) -> Result<(PathBuf, TuneResult)> {
    let (dir, file) = if dir_or_file.is_dir() {
        (dir_or_file.to_path_buf(), dir_or_file.join(RESULTS_FILE))
    } else if dir_or_file.file_name().is_some_and(|n| n == RESULTS_FILE) {
        let dir = dir_or_file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (dir.to_path_buf(), dir_or_file.to_path_buf())
    } else {
        anyhow::bail!(
            "{} is not a run directory: pass the directory qtune tune wrote (it holds {RESULTS_FILE})",
            dir_or_file.display()
        );
    };
    let bytes = match crate::util::read_bounded(&file, MAX_RUN_FILE_BYTES) {
        Ok(t) => t,
        Err(crate::util::BoundedReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!(
                "no {RESULTS_FILE} in {}: is it a finished qtune run? (qtune tune writes it when a tune \
                 ends; resume an interrupted one with qtune tune --resume DIR)",
                dir.display()
            )
        }
        Err(e) => anyhow::bail!("cannot read {}: {e}", file.display()),
    };
    let result: TuneResult = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid qtune result ({e}): was it edited, truncated, or written by another qtune version?",
            file.display()
        )
    })?;
    result.check_schema().map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid qtune result: {e} (was it edited?)",
            file.display()
        )
    })?;
    Ok((dir, result))
}

/// What results.json holds, field by field.
#[derive(Serialize, Deserialize)]
pub(super) struct ResultFile {
    qtune_version: String,
    server_path: PathBuf,
    server_version: String,
    started_at: String,
    finished_at: String,
    hardware: HardwareProfile,
    /// Free VRAM (summed) measured before the tune, MiB.
    free_vram_at_start_mib: u64,
    headroom_mib: u64,
    /// Free VRAM before the tune minus headroom; None with no GPU. With several GPUs, the sum
    /// of `gpu_budgets`.
    vram_budget_mib: Option<u64>,
    /// Each card's budget when the box has two GPUs or more (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    gpu_budgets: Vec<crate::hardware::GpuBudget>,
    model_path: PathBuf,
    model: ModelLayout,
    space: SearchSpace,
    trials: Vec<TrialOutcome>,
    confirmation: Vec<Confirmed>,
    winner: Option<Winner>,
    /// The race of the top candidates against the baseline (paired ABBA rounds), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    race: Option<RaceReport>,
    warnings: Vec<String>,
    minutes_used: f64,
    /// Host and port the launch command, report and launch script use (`tune --host/--port`).
    #[serde(default = "default_host")]
    host: String,
    #[serde(default = "default_port")]
    port: u16,
    /// What the space's quality floor measured and excluded (None: no floor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    quality: Option<crate::quality::floor::QualityGate>,
    /// The config the speed model rated best on this box, launched right after the baseline
    /// (None: no GPU the model knows, several GPUs, or a tune written before qtune made one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model_pick: Option<crate::config::LaunchConfig>,
    /// The best command for each workload measured (the objective's first, then the other
    /// built-ins), from the trials' medians ([`TuneResult::workload_picks`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    workload_picks: Vec<WorkloadPick>,
    /// The budget that ended the tune before its race decided (None: the tune finished on
    /// its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget_stop: Option<BudgetStop>,
    /// The other engines' servers the tune raced (`--engine both`): the winner's launch
    /// script starts its own engine's server. Empty where one engine was tuned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    engine_servers: Vec<crate::engine::select::EngineServer>,
}

impl From<TuneResult> for ResultFile {
    fn from(r: TuneResult) -> Self {
        let i = r.inputs;
        ResultFile {
            qtune_version: r.qtune_version,
            server_path: i.server_path,
            server_version: i.server_version,
            started_at: i.started_at,
            finished_at: r.finished_at,
            hardware: i.hardware,
            free_vram_at_start_mib: i.free_vram_at_start_mib,
            headroom_mib: i.headroom_mib,
            vram_budget_mib: i.vram_budget_mib,
            gpu_budgets: i.gpu_budgets,
            model_path: i.model_path,
            model: r.model,
            space: i.space,
            trials: r.trials,
            confirmation: r.confirmation,
            winner: r.winner,
            race: r.race,
            warnings: r.warnings,
            minutes_used: r.minutes_used,
            host: i.host,
            port: i.port,
            quality: i.quality,
            model_pick: r.model_pick,
            workload_picks: r.workload_picks,
            budget_stop: r.budget_stop,
            engine_servers: i.engine_servers,
        }
    }
}

impl From<ResultFile> for TuneResult {
    fn from(f: ResultFile) -> Self {
        TuneResult {
            qtune_version: f.qtune_version,
            inputs: RunInputs {
                model_path: f.model_path,
                server_path: f.server_path,
                server_version: f.server_version,
                space: f.space,
                headroom_mib: f.headroom_mib,
                hardware: f.hardware,
                free_vram_at_start_mib: f.free_vram_at_start_mib,
                vram_budget_mib: f.vram_budget_mib,
                gpu_budgets: f.gpu_budgets,
                started_at: f.started_at,
                host: f.host,
                port: f.port,
                start: None,
                quality: f.quality,
                model_fingerprint: None,
                model_bytes: None,
                server_bytes: None,
                engine_servers: f.engine_servers,
            },
            finished_at: f.finished_at,
            model: f.model,
            trials: f.trials,
            confirmation: f.confirmation,
            winner: f.winner,
            race: f.race,
            warnings: f.warnings,
            minutes_used: f.minutes_used,
            model_pick: f.model_pick,
            workload_picks: f.workload_picks,
            budget_stop: f.budget_stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys results.json has always had (optional ones included): the result's and, beside
    /// them, 13 of its inputs' (docs/results-schema.md, "The run's fields").
    const KEYS: [&str; 25] = [
        "qtune_version",
        "server_path",
        "server_version",
        "started_at",
        "finished_at",
        "hardware",
        "free_vram_at_start_mib",
        "headroom_mib",
        "vram_budget_mib",
        "gpu_budgets",
        "model_path",
        "model",
        "space",
        "trials",
        "confirmation",
        "winner",
        "race",
        "warnings",
        "minutes_used",
        "host",
        "port",
        "quality",
        "model_pick",
        "workload_picks",
        "budget_stop",
    ];

    #[test]
    fn results_json_keeps_its_published_fields_and_only_those() {
        let schema = include_str!("../../docs/results-schema.md");
        let section = schema
            .split("## The run's fields")
            .nth(1)
            .expect("the schema has its run's fields");
        let mut r = sample::gpu_result(Path::new("/s/llama-server"), Path::new("/m/model.gguf"));
        // What only run.json holds stays out of results.json.
        r.inputs.start = Some(r.trials[0].config.base());
        r.inputs.model_fingerprint = Some("fp".into());
        r.inputs.model_bytes = Some(1);
        r.inputs.server_bytes = Some(2);
        r.inputs.gpu_budgets = r.inputs.hardware.gpu_budgets(512);
        r.workload_picks = r.workload_picks();
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for k in &keys {
            assert!(KEYS.contains(k), "results.json gained `{k}`");
            assert!(
                section.contains(&format!("`{k}`")),
                "`{k}` is not in the schema"
            );
        }
        for k in [
            "server_path",
            "hardware",
            "space",
            "host",
            "port",
            "gpu_budgets",
        ] {
            assert!(keys.contains(&k), "results.json lost `{k}`: {keys:?}");
        }
        // Read back: the inputs a result carries come back; the rest are None.
        let back: TuneResult = serde_json::from_value(v).unwrap();
        let mut want = r.inputs.clone();
        (want.start, want.model_fingerprint) = (None, None);
        (want.model_bytes, want.server_bytes) = (None, None);
        assert_eq!(back.inputs, want);
        assert_eq!(back.trials, r.trials);
    }
}
