//! llama.cpp's RPC worker (`ggml-rpc-server`, which `qtune rpc serve` starts on a box that
//! lends its devices): its command line, in its own dialect (`-H`, `-p`, `-d`, `-t`, `-c`).
//! [`crate::rpc`] re-exports it with what head and worker share.

/// What `qtune rpc serve` starts.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    /// Device names on the worker (`-d CUDA0,CPU`); empty: every device it has.
    pub devices: Vec<String>,
    /// CPU threads of the worker's CPU device (`-t`); None: rpc-server's default.
    pub threads: Option<u32>,
    /// The local tensor cache (`-c`): a worker that has seen a large tensor before loads it
    /// from its own disk instead of the network.
    pub cache: bool,
}

/// The worker's command line: `ggml-rpc-server -H HOST -p PORT [-d DEVS] [-t N] [-c]`.
pub fn serve_argv(rpc_server: &str, o: &ServeOptions) -> Vec<String> {
    let mut a = vec![
        rpc_server.to_string(),
        "-H".into(),
        o.host.clone(),
        "-p".into(),
        o.port.to_string(),
    ];
    if !o.devices.is_empty() {
        a.push("-d".into());
        a.push(o.devices.join(","));
    }
    if let Some(t) = o.threads {
        a.push("-t".into());
        a.push(t.to_string());
    }
    if o.cache {
        a.push("-c".into());
    }
    a
}
