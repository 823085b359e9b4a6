//! The log dialect: what a server's log says went wrong ([`LogDialect`], one per engine), and
//! what `llama-server` reports about its memory (`-lv 4` or higher):
//!
//! ```text
//! load_tensors:   CPU_Mapped model buffer size =    92.10 MiB
//! load_tensors:        CUDA0 model buffer size = 14874.12 MiB
//! llama_context:  CUDA_Host  output buffer size =     0.58 MiB
//! llama_kv_cache:        CUDA0 KV buffer size =   640.00 MiB
//! llama_memory_recurrent:        CUDA0 RS buffer size =    62.81 MiB
//! sched_reserve:        CUDA0 compute buffer size =   493.00 MiB
//! common_memory_breakdown_print: |   - CUDA0 (H200)  | 143771 = 120000 + (15000 = 14000 + 700 + 300) + 8000 |
//! common_memory_breakdown_print: |   - Host          |          153 =    92 +      45 +      16          |
//! ```
//!
//! Buffer lines win; the breakdown table is the fallback when they are absent. Lines are
//! matched by their text, so the timestamp / level prefix and the device name (CPU, CPU_Mapped,
//! CPU_REPACK, CUDA0, CUDA_Host, ROCm0, Vulkan0, ...) do not matter. Only the last model load of
//! the log counts (a log that holds a failed load and a retry reports the retry).

use std::collections::BTreeMap;

/// Memory the server itself reported in its log (MiB), per device name ("CUDA0", "CPU", ...).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReportedMemory {
    pub model_mib: BTreeMap<String, f64>,
    pub kv_mib: BTreeMap<String, f64>,
    pub recurrent_mib: BTreeMap<String, f64>,
    pub compute_mib: BTreeMap<String, f64>,
}

/// What an engine's server logs, as qtune reads it: the lines that say what went wrong, and
/// how its weights' buffers are named. Lines are matched by their text in any trial's log
/// (every engine's lines are known in every log, so a log reads the same whichever server
/// wrote it).
#[derive(Debug, Clone, Copy)]
pub struct LogDialect {
    /// Lines that mean the server rejected its command line (matched case-insensitively).
    pub bad_flag: &'static [&'static str],
    /// Lines that mean an allocation failed, GPU or host (matched case-insensitively).
    pub oom: &'static [&'static str],
    /// Lines that contain an OOM word but are harmless: the server falls back and goes on.
    pub oom_benign: &'static [&'static str],
    /// Lines printed as the server aborts (matched case-sensitively): nothing serves after one.
    pub abort: &'static [&'static str],
    /// The server's line when its port is taken.
    pub bind_failed: &'static str,
    /// A log prefix under which `<DEV> buffer size = ...` names the weights' buffers without
    /// "model" (ik_llama.cpp's `llm_load_tensors:`).
    pub weights_buffer_prefix: Option<&'static str>,
}

/// Every engine's log dialect.
fn dialects() -> impl Iterator<Item = LogDialect> {
    crate::config::EngineKind::ALL
        .into_iter()
        .map(|k| super::of(k).log_dialect())
}

/// True when one log line says the server rejected its command line.
pub fn is_bad_flag_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    dialects().any(|d| d.bad_flag.iter().any(|p| l.contains(p)))
}

/// True when one log line reports a failed allocation.
pub fn is_oom_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    dialects().any(|d| d.oom.iter().any(|p| l.contains(p)))
        && !dialects().any(|d| d.oom_benign.iter().any(|p| l.contains(p)))
}

/// True when one log line says the server is aborting (any engine's line).
pub fn is_abort_line(line: &str) -> bool {
    dialects().any(|d| d.abort.iter().any(|p| line.contains(p)))
}

/// Whether one log line says the server could not listen on its port (any engine's line).
pub fn is_bind_failed_line(line: &str) -> bool {
    dialects().any(|d| line.contains(d.bind_failed))
}

/// Parse every memory figure llama-server printed. Output buffers count as compute.
pub fn parse_reported_memory(log: &str) -> ReportedMemory {
    let mut rep = ReportedMemory::default();
    let mut output: BTreeMap<String, f64> = BTreeMap::new();
    let mut seen_buffer_line = false;
    let mut table = ReportedMemory::default();
    // Compute buffers of the contexts before the latest: a second context over the same
    // model (`--spec-type draft-mtp`'s) holds its own beside the main one's.
    let mut earlier_contexts: BTreeMap<String, f64> = BTreeMap::new();
    for line in log.lines() {
        if line.contains("load_tensors: loading model tensors") {
            // A new load starts: forget the previous one.
            rep = ReportedMemory::default();
            output.clear();
            earlier_contexts.clear();
            seen_buffer_line = false;
            continue;
        }
        if line.contains("llama_context: constructing llama_context") {
            for (dev, mib) in std::mem::take(&mut rep.compute_mib) {
                *earlier_contexts.entry(dev).or_insert(0.0) += mib;
            }
            continue;
        }
        if let Some((dev, kind, mib)) = parse_buffer_line(line) {
            seen_buffer_line = true;
            match kind {
                BufferKind::Model => *rep.model_mib.entry(dev).or_insert(0.0) += mib,
                BufferKind::Kv => *rep.kv_mib.entry(dev).or_insert(0.0) += mib,
                BufferKind::Rs => *rep.recurrent_mib.entry(dev).or_insert(0.0) += mib,
                BufferKind::Output => *output.entry(dev).or_insert(0.0) += mib,
                // A re-reserve replaces the previous compute buffer of that device.
                BufferKind::Compute => {
                    rep.compute_mib.insert(dev, mib);
                }
            }
            continue;
        }
        if let Some((dev, model, context, compute)) = parse_breakdown_row(line) {
            // The table is printed more than once (fit probe, exit): keep the latest.
            table.model_mib.insert(dev.clone(), model);
            table.kv_mib.insert(dev.clone(), context);
            table.compute_mib.insert(dev, compute);
        }
    }
    if !seen_buffer_line {
        return table;
    }
    for (dev, mib) in output.into_iter().chain(earlier_contexts) {
        *rep.compute_mib.entry(dev).or_insert(0.0) += mib;
    }
    rep
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BufferKind {
    Model,
    Kv,
    Rs,
    Output,
    Compute,
}

/// `... <DEV> <kind> buffer size = <x> MiB` → (device, kind, MiB).
fn parse_buffer_line(line: &str) -> Option<(String, BufferKind, f64)> {
    const KINDS: [(&str, BufferKind); 5] = [
        (" model buffer size", BufferKind::Model),
        (" KV buffer size", BufferKind::Kv),
        (" RS buffer size", BufferKind::Rs),
        (" output buffer size", BufferKind::Output),
        (" compute buffer size", BufferKind::Compute),
    ];
    let (at, kind, marker) = KINDS
        .iter()
        .find_map(|(m, k)| line.find(m).map(|at| (at, *k, *m)))
        .or_else(|| {
            // An engine that names its weights' buffers without "model" (ik_llama.cpp:
            // `llm_load_tensors:        CPU buffer size =   101.21 MiB`).
            let m = " buffer size";
            dialects()
                .filter_map(|d| d.weights_buffer_prefix)
                .any(|p| line.contains(p))
                .then(|| line.find(m))
                .flatten()
                .map(|at| (at, BufferKind::Model, m))
        })?;
    let dev = line[..at].split_whitespace().last()?.trim_end_matches(':');
    if dev.is_empty() || dev.ends_with(':') {
        return None;
    }
    let rest = &line[at + marker.len()..];
    let rest = rest.trim_start().strip_prefix('=')?.trim_start();
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v: f64 = num.parse().ok()?;
    let unit = rest[num.len()..].trim_start();
    let mib = if unit.starts_with("MiB") {
        v
    } else if unit.starts_with("GiB") {
        v * 1024.0
    } else if unit.starts_with("KiB") {
        v / 1024.0
    } else if unit.starts_with('B') {
        v / (1024.0 * 1024.0)
    } else {
        return None;
    };
    Some((dev.to_string(), kind, mib))
}

/// A device row of the "memory breakdown [MiB]" table → (name, model, context, compute).
fn parse_breakdown_row(line: &str) -> Option<(String, f64, f64, f64)> {
    let start = line.find("|   - ").or_else(|| line.find("| - "))?;
    let row = &line[start + 1..];
    let mut cells = row.split('|');
    let name_cell = cells.next()?.trim().strip_prefix("- ")?.trim();
    let dev = name_cell.split_whitespace().next()?.to_string();
    let nums_cell = cells.next()?;
    // Numbers in order; GPU rows: total free self model context compute unaccounted,
    // host / extra rows: self model context compute.
    let nums: Vec<f64> = nums_cell
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter(|s| !s.is_empty() && *s != "-")
        .filter_map(|s| s.parse().ok())
        .collect();
    match nums.len() {
        7 => Some((dev, nums[3], nums[4], nums[5])),
        4 => Some((dev, nums[1], nums[2], nums[3])),
        _ => None,
    }
}

/// Is this reported device name host memory (CPU, CPU_Mapped, CPU_REPACK, CUDA_Host, Host)?
pub fn is_host_device(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("cpu") || n.ends_with("_host") || n == "host"
}

/// Sum over GPU devices of everything reported (model + KV + recurrent + compute), MiB.
pub fn gpu_total_mib(r: &ReportedMemory) -> f64 {
    total(r, |d| !is_host_device(d))
}

/// Model weights the server put on GPU devices, MiB (KV, recurrent state and compute buffers
/// left out: how much of the model runs on the card).
pub fn gpu_model_mib(r: &ReportedMemory) -> f64 {
    r.model_mib
        .iter()
        .filter(|(d, _)| !is_host_device(d))
        .map(|(_, v)| v)
        .sum()
}

/// Sum over host buffers of everything reported, MiB.
pub fn host_total_mib(r: &ReportedMemory) -> f64 {
    total(r, is_host_device)
}

fn total(r: &ReportedMemory, pick: impl Fn(&str) -> bool) -> f64 {
    let sum = |m: &BTreeMap<String, f64>| -> f64 {
        m.iter().filter(|(k, _)| pick(k)).map(|(_, v)| v).sum()
    };
    sum(&r.model_mib) + sum(&r.kv_mib) + sum(&r.recurrent_mib) + sum(&r.compute_mib)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU_LOG: &str = "\
0.00.081.549 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.00.081.569 I common_memory_breakdown_print: |   - Host               |                  153 =    92 +      45 +      16                |
0.00.152.652 I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
0.00.813.375 I load_tensors:   CPU_Mapped model buffer size =    56.04 MiB
0.00.813.395 I load_tensors:   CPU_REPACK model buffer size =     3.71 MiB
0.00.819.469 I llama_context:        CPU  output buffer size =     0.58 MiB
0.00.819.511 I llama_kv_cache:        CPU KV buffer size =     1.00 MiB
0.00.184.934 I llama_kv_cache: size =   45.00 MiB (  2048 cells,  30 layers,  1/1 seqs), K (f16):   22.50 MiB, V (f16):   22.50 MiB
0.00.819.626 I llama_memory_recurrent:        CPU RS buffer size =     0.21 MiB
0.00.826.293 I sched_reserve:        CPU compute buffer size =     7.52 MiB
0.03.730.943 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.03.730.975 I common_memory_breakdown_print: |   - Host               |                   64 =    56 +       1 +       7                |
";

    #[test]
    fn cpu_buffer_lines() {
        let r = parse_reported_memory(CPU_LOG);
        assert_eq!(r.model_mib["CPU_Mapped"], 56.04);
        assert_eq!(r.model_mib["CPU_REPACK"], 3.71);
        assert_eq!(r.kv_mib["CPU"], 1.00);
        assert_eq!(r.recurrent_mib["CPU"], 0.21);
        assert!((r.compute_mib["CPU"] - 8.10).abs() < 1e-9);
        assert!((host_total_mib(&r) - (56.04 + 3.71 + 1.0 + 0.21 + 8.10)).abs() < 1e-9);
        assert_eq!(gpu_total_mib(&r), 0.0);
    }

    /// `--spec-type draft-mtp` (the pinned CPU server, tiny-qwen35moe with its MTP layer): a
    /// second context over the model, with its own KV, output and compute buffers (reserved
    /// twice); its compute buffer adds to the main context's, a re-reserve replaces its own.
    #[test]
    fn an_mtp_draft_context_adds_its_buffers() {
        let log = "\
0.05.445.507 I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
0.05.446.712 I load_tensors:   CPU_Mapped model buffer size =    57.22 MiB
0.05.478.383 I llama_context: constructing llama_context
0.05.478.469 I llama_context:        CPU  output buffer size =     0.58 MiB
0.05.478.560 I llama_kv_cache:        CPU KV buffer size =     2.00 MiB
0.05.478.964 I llama_memory_recurrent:        CPU RS buffer size =     0.82 MiB
0.05.510.834 I sched_reserve:        CPU compute buffer size =     9.52 MiB
0.07.554.004 I common_speculative_init_result: creating MTP draft context against the target model 'tiny.gguf'
0.07.554.055 I llama_context: constructing llama_context
0.07.554.156 I llama_context:        CPU  output buffer size =     0.58 MiB
0.07.554.233 I llama_kv_cache:        CPU KV buffer size =     2.00 MiB
0.07.594.449 I sched_reserve:        CPU compute buffer size =     7.02 MiB
0.07.603.130 I sched_reserve:        CPU compute buffer size =     7.02 MiB
";
        let r = parse_reported_memory(log);
        assert_eq!(r.kv_mib["CPU"], 4.00);
        assert!(
            (r.compute_mib["CPU"] - (9.52 + 7.02 + 2.0 * 0.58)).abs() < 1e-9,
            "{r:?}"
        );
    }

    /// ik_llama.cpp's buffer lines (its CPU server and tiny-qwen3moe): the weights' line
    /// has no "model".
    #[test]
    fn ik_llama_buffer_lines() {
        let log = "\
llm_load_tensors: ggml ctx size =    0.02 MiB
llm_load_tensors:        CPU buffer size =    55.41 MiB
llama_kv_cache_init:        CPU KV buffer size =     4.00 MiB
llama_init_from_model:        CPU  output buffer size =     0.58 MiB
llama_init_from_model:        CPU compute buffer size =   297.25 MiB
";
        let r = parse_reported_memory(log);
        assert_eq!(r.model_mib["CPU"], 55.41);
        assert_eq!(r.kv_mib["CPU"], 4.00);
        assert!((r.compute_mib["CPU"] - (297.25 + 0.58)).abs() < 1e-9);
        assert_eq!(r.model_mib.len(), 1, "{r:?}");
    }

    #[test]
    fn cuda_lines_and_table_fallback() {
        let log = "\
llama_model_loader: loaded meta data
load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors: offloaded 41/41 layers to GPU
load_tensors:        CUDA0 model buffer size = 14874.12 MiB
load_tensors:   CPU_Mapped model buffer size =  5120.50 MiB
llama_context:  CUDA_Host  output buffer size =     0.95 MiB
llama_kv_cache:      CUDA0 KV buffer size =   640.00 MiB
llama_memory_recurrent:      CUDA0 RS buffer size =    62.81 MiB
sched_reserve:      CUDA0 compute buffer size =   493.00 MiB
sched_reserve:  CUDA_Host compute buffer size =    24.01 MiB
";
        let r = parse_reported_memory(log);
        assert_eq!(r.model_mib["CUDA0"], 14874.12);
        assert_eq!(r.kv_mib["CUDA0"], 640.0);
        assert_eq!(r.recurrent_mib["CUDA0"], 62.81);
        assert_eq!(r.compute_mib["CUDA0"], 493.0);
        assert!((r.compute_mib["CUDA_Host"] - 24.96).abs() < 1e-9);
        assert!((gpu_total_mib(&r) - (14874.12 + 640.0 + 62.81 + 493.0)).abs() < 1e-6);
        assert!(is_host_device("CUDA_Host"));
        assert!(!is_host_device("CUDA0"));

        let table = "\
common_memory_breakdown_print: | memory breakdown [MiB] | total    free     self   model   context   compute    unaccounted |
common_memory_breakdown_print: |   - CUDA0 (H200)       | 143771 = 120000 + (16070 = 14874 +     703 +     493) +        7701 |
common_memory_breakdown_print: |   - Host               |                   5145 =  5120 +       0 +      24                |
";
        let t = parse_reported_memory(table);
        assert_eq!(t.model_mib["CUDA0"], 14874.0);
        assert_eq!(t.kv_mib["CUDA0"], 703.0);
        assert_eq!(t.compute_mib["CUDA0"], 493.0);
        assert_eq!(t.model_mib["Host"], 5120.0);
        assert_eq!(t.compute_mib["Host"], 24.0);
    }

    #[test]
    fn only_the_last_load_counts_and_garbage_is_ignored() {
        let log = "\
load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors:        CUDA0 model buffer size = 99999.00 MiB
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 99999.00 MiB on device 0: cudaMalloc failed: out of memory
load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors:        CUDA0 model buffer size = 100.00 MiB
random line with buffer size = lots
";
        let r = parse_reported_memory(log);
        assert_eq!(r.model_mib.len(), 1);
        assert_eq!(r.model_mib["CUDA0"], 100.0);
        assert_eq!(parse_reported_memory(""), ReportedMemory::default());
    }
}
