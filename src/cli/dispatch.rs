//! Each parsed subcommand handed, as plain values, to its function in the app layer.

use super::*;

fn format(json: bool, yaml: bool) -> Format {
    if json {
        Format::Json
    } else if yaml {
        Format::Yaml
    } else {
        Format::Text
    }
}

/// Run the parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let command = match (cli.command, cli.tune) {
        (Some(c), _) => c,
        (None, Some(t)) => Command::Tune(t),
        (None, None) => {
            anyhow::bail!(
                "nothing to do: give --model M.gguf to tune, or try 'qtune demo' or 'qtune --help'"
            )
        }
    };
    use crate::app;
    match command {
        Command::Tune(t) => app::tune::tune(tune_options(t)),
        Command::Demo(d) => app::tune::demo(d.out, d.server, d.allow_busy),
        Command::Hw(h) => app::info::hw(format(h.json, h.yaml), !h.no_bandwidth, h.rpc),
        Command::Inspect(i) => app::info::inspect(
            &i.model.path()?,
            i.ctx,
            i.kv,
            i.target_vram_headroom,
            format(i.json, false),
        ),
        Command::Synth(SynthArgs {
            test_models: true, ..
        }) => app::info::test_models(),
        Command::Synth(s) => match (s.out, s.shape) {
            (Some(out), Some(shape)) => app::info::synth(&out, &shape, &s.ftype, s.no_mtp),
            _ => anyhow::bail!("qtune synth needs OUT.gguf and --shape (or --test-models)"),
        },
        Command::Server(ServerSubcommand::Path {
            server,
            rpc_server: false,
            engine,
        }) => app::info::server_path(server, engine),
        Command::Server(ServerSubcommand::Path {
            server,
            rpc_server: true,
            ..
        }) => app::rpc::rpc_server_path(server),
        Command::Rpc(RpcCommand::Serve(s)) => app::rpc::serve(app::rpc::Serve {
            listen: s.listen,
            host: s.host,
            port: s.port,
            device: s.device,
            threads: s.threads,
            no_cache: s.no_cache,
            allow_public: s.allow_public,
            rpc_server: s.rpc_server,
            dry_run: s.dry_run,
        }),
        Command::Rpc(RpcCommand::Link(l)) => {
            app::rpc::link(&l.listen, &l.to, l.gbit, l.delay_ms, l.stats)
        }
        Command::Server(ServerSubcommand::Check { server, engine }) => {
            app::info::server_check(server, engine)
        }
        Command::Server(ServerSubcommand::Build { cuda, cpu, engine }) => {
            app::info::server_build(cuda, cpu, engine)
        }
        Command::Report(r) => app::results::report(&r.dir),
        Command::Script(s) => app::results::script(
            &s.from,
            &s.out,
            &s.host,
            s.port,
            crate::report::ScriptExtras {
                systemd: s.systemd,
                compose: s.compose,
            },
        ),
        Command::Profile(ProfileCommand::Export { dir, out }) => {
            app::results::profile_export(&dir, &out)
        }
        Command::Profile(ProfileCommand::Import { file }) => app::results::profile_import(&file),
        Command::Profile(ProfileCommand::List) => app::results::profile_list(),
        Command::Profile(ProfileCommand::Show { name }) => app::results::profile_show(&name),
        Command::Plan(p) if p.list_boxes => {
            print!("{}", crate::plan::boxes::catalog_text());
            Ok(())
        }
        Command::Plan(p) if p.box_spec.is_some() || p.shape.is_some() => {
            app::plan_box::plan_box(app::plan_box::BoxPlanOptions {
                box_spec: p.box_spec,
                model: p.model,
                shape: p.shape,
                quants: p.quant,
                workload: p.workload,
                cores: p.cores,
                ram_gib: p.ram_gib,
                host_bw_gbs: p.host_bw_gbs,
                ctx: p.ctx,
                headroom_mib: p.target_vram_headroom,
                json: p.json,
            })
        }
        Command::Plan(p) if p.workload.is_some() => {
            anyhow::bail!("--workload plans with --box or --shape; a plan for a model on this box takes its profile's workload")
        }
        Command::Plan(p) => app::results::plan(
            &p.model
                .ok_or_else(|| anyhow::anyhow!("give --model M.gguf, or --shape NAME --quant Q"))?,
            p.profile.as_deref(),
            !p.no_profile,
            p.ctx,
            p.target_vram_headroom,
            p.json,
        ),
        Command::Sweep(s) => app::measure::sweep(&s.dir, s.from, s.to, s.step),
        Command::Depth(d) => app::measure::depth(&d.dir, &d.depths),
        Command::Calibrate(c) => app::measure::calibrate(
            &c.model.path()?,
            c.server.as_deref(),
            &c.n_cpu_moe,
            &c.ctx,
            &c.kv,
            &c.ubatch,
            &c.out,
        ),
        Command::Quality(q) => match q.against.clone() {
            Some(r) => app::quality::against(against_options(q.clone(), r), q.json),
            None => app::quality::quality(quality_options(q.clone())?, q.json),
        },
        Command::Compare(c) => app::compare::compare(crate::compare::CompareOptions {
            commands: c.commands,
            rounds: c.rounds,
            server: c.server,
            space: c.space,
            prompt_tokens: c.prompt_tokens,
            gen_tokens: c.gen_tokens,
            repetitions: c.repetitions,
            workload: c.workload,
            out: c.out,
            band_pct: c.band,
            json: c.json,
        }),
        Command::Record(r) => app::traffic::record(&r.upstream, &r.listen, r.out),
        Command::Trace(TraceCommand::Show { file, json }) => app::traffic::trace_show(&file, json),
        Command::Trace(TraceCommand::Session {
            kind,
            server,
            ctx,
            out,
            answers,
        }) => app::traffic::trace_session(&kind, &server, ctx, out, answers),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "qtune", &mut out);
            print!("{}", String::from_utf8_lossy(&out));
            Ok(())
        }
        Command::Man { dir: None } => {
            let mut out = Vec::new();
            clap_mangen::Man::new(man_command()).render(&mut out)?;
            print!("{}", String::from_utf8_lossy(&out));
            Ok(())
        }
        Command::Man { dir: Some(dir) } => {
            for path in man_pages(&dir)? {
                println!("{}", path.display());
            }
            Ok(())
        }
    }
}

/// The command line as the man pages describe it (no `help` subcommand: it has no page).
fn man_command() -> clap::Command {
    let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Every man page (qtune.1 and one per visible subcommand, as qtune.1's SEE ALSO names them)
/// written into `dir`, each through a temporary file renamed into place (never half-written).
fn man_pages(dir: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context;
    fn walk(cmd: clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(s.clone(), out)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut page = Vec::new();
        man.render(&mut page)?;
        out.push((man.get_filename(), page));
        Ok(())
    }
    let mut pages = Vec::new();
    walk(man_command(), &mut pages)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (file, page) in pages {
        let path = dir.join(&file);
        let tmp = dir.join(format!(".{file}.qtune-tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut f = crate::util::create_fresh(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::io::Write::write_all(&mut f, &page)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn tune_options(t: TuneArgs) -> crate::app::tune::TuneOptions {
    crate::app::tune::TuneOptions {
        rpc: t.rpc,
        model: t.model,
        server: t.server,
        engine: t.engine,
        space: t.space,
        headroom_mib: t.target_vram_headroom,
        ctx: t.ctx,
        workload: t.workload,
        budget_trials: t.budget_trials,
        budget_minutes: t.budget_minutes,
        out: t.out,
        resume: t.resume,
        from_profile: t.from_profile,
        host: t.host,
        port: t.port,
        json: t.json,
        quiet: t.quiet,
        dry_run: t.dry_run,
        allow_dense: t.allow_dense,
        allow_busy: t.allow_busy,
        replay: t.replay.map(|journal| crate::app::tune::ReplayOptions {
            journal,
            noise_pct: t.replay_noise,
            seed: t.replay_seed,
            interrupt_after: t.replay_interrupt_after,
            pace_ms: t.replay_pace_ms,
        }),
    }
}

fn quality_options(q: QualityArgs) -> anyhow::Result<crate::quality::QualityOptions> {
    let [model] = <[PathBuf; 1]>::try_from(q.model).map_err(|m| {
        anyhow::anyhow!(
            "{} models given with -m: several are scored only --against a reference file (e.g. -m Q4_K_M.gguf -m Q4_0.gguf --against Q8_0.gguf)",
            m.len()
        )
    })?;
    let kv = if q.kv.is_empty() {
        vec![KvType::Q8_0, KvType::Q4_0]
    } else {
        q.kv
    };
    Ok(crate::quality::QualityOptions {
        model,
        text: q.text,
        kv: kv.into_iter().map(|k| [k, k]).collect(),
        ctx: q.ctx,
        chunks: q.chunks,
        max_disk_mib: q.max_disk_mib,
        perplexity: q.perplexity,
        server: q.server,
        threads: q.threads,
    })
}

fn against_options(q: QualityArgs, reference: PathBuf) -> crate::quality::against::AgainstOptions {
    crate::quality::against::AgainstOptions {
        models: q.model,
        reference,
        text: q.text,
        ctx: q.ctx,
        chunks: q.chunks,
        max_disk_mib: q.max_disk_mib,
        perplexity: q.perplexity,
        server: q.server,
        threads: q.threads,
    }
}
