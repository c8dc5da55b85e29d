//! What a run is asked: the plan and where to write ([`RunOptions`]), and the load
//! generator ([`LoadChoice`]).

use std::path::PathBuf;

use crate::bins::Bins;
use crate::cpus::Placement;
use crate::experiment::Plan;

/// Which load generator `--loadgen` chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadChoice {
    Edgeload,
    Wrk,
}

/// Everything the command line decided.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: Plan,
    pub bench_dir: PathBuf,
    pub placement: Placement,
    pub bins: Bins,
    pub loadgen: LoadChoice,
    /// The exact command line, for the report.
    pub command: String,
    /// Keep the run directory (configs, logs, load JSON) instead of deleting it.
    pub keep_dir: bool,
}
