//! qtune's integration tests, as one test binary (`it`), as ripgrep keeps its own: one link of
//! the crate instead of one per test file (issue 55). Each file here was a test binary of its
//! own; now it is a module, and its tests are named `FILE::TEST`.
//!
//! A new test file goes here: write `tests/it/NAME.rs` (it reaches the shared helpers with
//! `use crate::support;`, the speed model's replay with `use crate::support::replay;`) and
//! add a `mod NAME;` line below, in alphabetical order. A test file written as its own binary
//! (`tests/NAME.rs` with `mod support;`) moves here mechanically: `git mv tests/NAME.rs
//! tests/it/`, its `mod support;` becomes `use crate::support;` (a `#[path =
//! "support/replay.rs"] mod replay;` becomes `use crate::support::replay;`), and its `mod` line
//! goes below. A test that re-runs this binary on one of its own tests (`--exact`) names it with
//! its module path (see trial_interrupt.rs).
//!
//! Run one file's tests with `cargo test --test it NAME::`, one test with
//! `cargo test --test it NAME::TEST`.
//!
//! Tests share this process, so none may change what is process-wide (an environment variable
//! with `std::env::set_var`, the current directory, signal handlers, a global allocator): pass
//! environment to the child `Command` instead. Two test files stay test binaries of their own,
//! in tests/: `hostile_fuzz.rs` (it reads its own process's peak memory, RUSAGE_SELF) and
//! `tune_cli.rs` (its real tunes on a minutes budget run with no other test's llama-server
//! beside them, which only a process of their own guarantees; it reaches `tests/it/support/`
//! through a `#[path]`).

mod support;

mod budget_stop;
mod busy_between_launches;
mod busy_box;
mod compare_cli;
mod hardware_cli;
mod hostile_budget;
mod hostile_files;
mod hostile_gguf;
mod hostile_links;
mod hostile_model_changed;
mod hostile_numbers;
mod hostile_pipes;
mod hostile_record;
mod hostile_replay;
mod hostile_rpc;
mod hostile_run_values;
mod hostile_server_replies;
mod hostile_text;
mod ik_engine;
mod model_errors;
mod model_gpu_calibration;
mod model_layout;
mod model_memory;
mod model_placement;
mod model_synth;
mod multigpu_card_experts;
mod multigpu_replay;
mod multigpu_resplit;
mod newcomer;
mod objective_first;
mod one_number;
mod placement_real;
mod plan_box;
mod plan_header;
mod plan_replay;
mod profile_hostile;
mod profile_plan;
mod profile_roundtrip;
mod quality_real;
mod report_script;
mod report_workloads;
mod rpc_link;
mod rpc_workers;
mod run_dir_faults;
mod run_dir_hostile;
mod search_replay;
mod search_vram_overhead;
mod server_backend;
mod session_workload;
mod spec_mtp;
mod spec_predict;
mod spec_shapes;
mod speed_replay;
mod split_model;
mod stats_race;
mod subagents_replay;
mod traffic_record;
mod traffic_session;
mod traffic_show;
mod trial_faults;
mod trial_hostile;
mod trial_interrupt;
mod trial_real;
mod tune_replay;
mod workload_replay;
mod workload_trace;
