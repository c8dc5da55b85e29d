//! Experiments are data: one TOML file per experiment under `bench/experiments/`.
//!
//! How it fits: the runner knows nothing experiment-specific. A file names the servers
//! to compare (edgecache config snippets, peer template variables), the workloads (URL
//! groups, connections, keep-alive, rate), how to warm, how long and how often to run
//! each cell, and what `--quick` reduces. [`Experiment::plan`] turns the file plus the
//! command-line options into a [`Plan`]: the exact matrix the runner executes. Adding an
//! experiment means adding a file; see `docs/edgebench.md` for the schema.
//!
//! # Layout
//! - `spec.rs`: the file as written (the serde structs and their defaults).
//! - `units.rs`: sizes and durations as the file writes them.
//! - `urls.rs`: URL groups expanded into paths, and the shapes edgeload can draw from
//!   itself (`{id}` ranges, Zipf).
//! - `validate.rs`: [`Experiment::load`]: a file read and checked, with errors that say
//!   why.
//! - `plan.rs`: [`Experiment::plan`]: the file plus the command line resolved into the
//!   [`Plan`] the runner executes.

mod plan;
mod spec;
mod units;
mod urls;
mod validate;

pub use plan::{BeforePlan, FioPlan, Plan, PlanOptions, ProbePlan, Workload};
pub use spec::{
    BeforeSpec, Expect, Experiment, FioSpec, Metric, OneOrMany, OriginSpec, ProbeSpec, QuickSpec,
    ServerSpec, TargetSpec, UrlGroup, WorkloadSpec,
};
pub use units::{guess_object_size, parse_duration, parse_size};
pub use urls::{id_range, zipf_of};
pub use validate::expand_env;

use std::time::Duration;

/// Upper bound on the distinct paths one workload may expand to (warm-up requests each).
pub const MAX_PATHS: usize = 100_000;
/// Largest `zipf` exponent (edgeload's `--zipf` bound).
pub const MAX_ZIPF: f64 = 3.0;
/// Upper bound on repetitions, so a typo cannot run for a day.
pub const MAX_REPETITIONS: u32 = 100;
/// Upper bound on one cell's duration.
pub const MAX_CELL: Duration = Duration::from_secs(3600);
/// Default connections per workload: enough to keep one server core busy.
const DEFAULT_CONNECTIONS: u32 = 16;

#[cfg(test)]
mod tests;
