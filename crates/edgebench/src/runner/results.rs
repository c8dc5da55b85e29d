//! What a run produced: every cell's figures, each server's state, the probes and the
//! fio ceilings ([`Results`]), which `crate::report` reads.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::experiment::Plan;
use crate::fio::FioResult;
use crate::load::LoadResult;
use crate::machine::Machine;
use crate::servers::ServerKind;

/// Whether a server took part.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum ServerState {
    Ran,
    /// Not installed: the reason says how to install it.
    Missing(String),
    /// Installed but would not start: the reason carries its log tail.
    Failed(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub kind: ServerKind,
    pub state: ServerState,
    pub version: Option<String>,
    /// The binary the experiment named for this row (`program`), when it named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
}

/// What a server answered to the first path of a workload after warm-up.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub workload: String,
    pub server: String,
    /// `X-Cache-Status` value, None when the header was absent.
    pub cache_status: Option<String>,
    pub status: Option<u16>,
}

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub workload: String,
    pub server: String,
    /// 0-based repetition.
    pub rep: u32,
    pub load: LoadResult,
    pub server_cpu_s: f64,
    /// The kernel's share of `server_cpu_s` (stime).
    #[serde(default)]
    pub server_sys_s: f64,
    pub cpu_us_per_req: f64,
    pub rss_bytes: u64,
    /// Requests the origin saw during the cell (None if `/stats` was unreadable).
    pub origin_requests: Option<u64>,
    /// The workload's probe load, run alongside the main load.
    #[serde(default)]
    pub probe: Option<LoadResult>,
    /// The plan's `metrics` families from the server's `/metrics` (edgecache): counters
    /// as the cell's delta, gauges as the value after.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Bytes charged to the server's memory cgroup after the cell (page cache included).
    #[serde(default)]
    pub cgroup_bytes: Option<u64>,
}

/// Everything a report needs.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub plan: Plan,
    pub machine: Machine,
    pub command: String,
    pub date: String,
    pub cpus: String,
    pub loadgen: String,
    pub servers: Vec<ServerStatus>,
    pub probes: Vec<Probe>,
    pub cells: Vec<Cell>,
    /// Disk ceilings, one per workload, for plans with `[fio]`.
    #[serde(default)]
    pub fio: Vec<FioResult>,
    pub warnings: Vec<String>,
    /// Requests the origin served over the whole run (warm-up included), from `/stats`.
    pub origin_total_requests: Option<u64>,
    pub elapsed_s: f64,
}

impl Results {
    /// Names of the servers that ran, in plan order.
    pub fn ran(&self) -> Vec<&ServerStatus> {
        self.servers
            .iter()
            .filter(|s| matches!(s.state, ServerState::Ran))
            .collect()
    }
    pub fn cells_for<'a>(
        &'a self,
        workload: &'a str,
        server: &'a str,
    ) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells
            .iter()
            .filter(move |c| c.workload == workload && c.server == server)
    }
    pub fn probe(&self, workload: &str, server: &str) -> Option<&Probe> {
        self.probes
            .iter()
            .find(|p| p.workload == workload && p.server == server)
    }
    pub fn fio_for(&self, workload: &str) -> Option<&FioResult> {
        self.fio.iter().find(|f| f.workload == workload)
    }
}

/// Shortens a metric name for logs and tables: the longest matching plan prefix goes.
pub fn short_metric<'a>(name: &'a str, prefixes: &[String]) -> &'a str {
    // One series asked for by its labels: the labels name the column.
    if let (Some(open), true) = (name.find('{'), prefixes.iter().any(|p| p == name)) {
        return name[open + 1..].trim_end_matches('}');
    }
    prefixes
        .iter()
        .filter(|p| name.starts_with(p.as_str()) && name.len() > p.len())
        .max_by_key(|p| p.len())
        .map_or(name, |p| &name[p.len()..])
}
