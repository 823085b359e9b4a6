//! What a tune prints when it ends (the summary, the stop line, the winning command as the
//! last line on stdout) and the checks of the address that command will use.

use crate::run::TuneResult;
use anyhow::Result;
use std::path::Path;

/// A `--host` must be a host name or address; one other machines reach gets a warning
/// (trials still listen on 127.0.0.1; the printed command and launch.sh use it).
pub fn host_check(host: &str) -> Result<()> {
    crate::run::schema::check_host("--host", host)?;
    if let Some(w) = crate::report::script::exposed_host_warning(host) {
        eprintln!("qtune: warning: {}", crate::escape::terminal_lines(&w));
    }
    Ok(())
}

/// The printed command's port: 1 to 65535. Port 0 (a random free port at each start) would
/// give a command and a launch.sh that cannot say where the server listens, and launch.sh
/// refuses it.
pub fn port_check(port: u16) -> Result<()> {
    if port == 0 {
        anyhow::bail!(
            "--port 0 is not a port clients can reach: give the port the launch command and launch.sh should use, from 1 to 65535 (default 8080)"
        );
    }
    Ok(())
}

/// A warning when the printed command's port is taken on its host right now (the command
/// would fail to start there).
pub fn port_taken_warning(host: &str, port: u16) -> Option<String> {
    match std::net::TcpListener::bind((host, port)) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Some(format!(
            "port {port} on {host} is in use right now: the command below will fail to start until it is free (or tune with --port N, or edit --port)"
        )),
        _ => None,
    }
}

/// The summary table on stderr, then the winning command alone as the last line on stdout.
/// `resume` is the command that continues the tune (named where a budget cut it short).
pub fn print_outcome(
    result: &TuneResult,
    run_dir: &Path,
    json: bool,
    quiet: bool,
    resume: &str,
) -> Result<()> {
    // Said even with --quiet and --json (on stderr): a tune the budget cut short.
    // The reason wrapped to the terminal's 100 columns, the command whole on its own line.
    let stop = result.budget_stop.as_ref().map(|s| {
        let line = s.line(resume);
        let (why, command) = line.split_once('\n').unwrap_or((&line, ""));
        format!(
            "{}\n{}",
            crate::util::wrap(&format!("qtune: {why}"), crate::util::COLUMNS, "  "),
            crate::util::shell_fit(command, "  ")
        )
    });
    if json || quiet {
        if let Some(s) = &stop {
            eprintln!("{s}");
        }
    }
    if json {
        if let Some(w) = port_taken_warning(&result.inputs.host, result.inputs.port) {
            eprintln!("qtune: warning: {}", crate::escape::terminal_lines(&w));
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::run::results_document(
                result,
                run_dir,
                crate::report::verdict_json(result),
            ))?
        );
        return Ok(());
    }
    if !quiet {
        eprintln!(
            "{}",
            crate::util::fit(&crate::escape::terminal_lines(
                &crate::report::summary::table(result)
            ))
        );
        if let Some(s) = &stop {
            eprintln!("{}", crate::escape::terminal_lines(s));
        }
        eprintln!(
            "report: {}",
            crate::escape::terminal_path(&run_dir.join("report.md"))
        );
        eprintln!("run directory: {}", crate::escape::terminal_path(run_dir));
    }
    if result.winner.is_some() {
        if let Some(w) = port_taken_warning(&result.inputs.host, result.inputs.port) {
            eprintln!("qtune: warning: {}", crate::escape::terminal_lines(&w));
        }
    }
    match &result.winner {
        Some(w) => {
            println!("{}", crate::config::shell_line(&w.command));
            Ok(())
        }
        None => anyhow::bail!(
            "no config ran successfully within the budget; see {} for each failure",
            run_dir.join("report.md").display()
        ),
    }
}
