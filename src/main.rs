use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args_os().len() == 1 {
        qtune::util::print_to(false, format_args!("{}", qtune::cli::bare_help()));
        return ExitCode::SUCCESS;
    }
    let cli = qtune::cli::Cli::parse();
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("QTUNE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("qtune={default_level}")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(qtune::util::colour_on_stderr())
        .without_time()
        .init();
    match qtune::cli::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes, joined (never a panic on a closed stderr),
            // with any path or name from outside in it escaped for the terminal.
            qtune::util::print_to(
                true,
                format_args!(
                    "qtune: error: {}\n",
                    qtune::escape::terminal(&qtune::util::error_line(&e))
                ),
            );
            if let Some(h) = e.downcast_ref::<qtune::util::ResumeHint>() {
                qtune::util::print_to(true, format_args!("  {}\n", h.command));
            }
            ExitCode::from(qtune::trial::cleanup::exit_code_for(&e))
        }
    }
}
