//! The experiment file as written: the serde structs of `bench/experiments/*.toml`
//! and their defaults (`docs/edgebench.md` is the schema). Nothing here is checked or
//! resolved: [`super::validate`] checks a file, [`super::plan`] resolves it.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::DEFAULT_CONNECTIONS;
use crate::kind::ServerKind;

/// What a workload's responses are expected to be after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// Cache hits: the runner warns when a cell did not produce HITs or reached the origin.
    #[default]
    Hit,
    /// Anything goes (collapse experiments): no hit check.
    Any,
    /// Every request a miss (`fill`): the load generator draws each workload's ids from
    /// a range too large to list (edgeload `--paths N`, N up to 2^32 - 1, so a run's
    /// requests practically never repeat an id), the fill and the probe use id 0, which
    /// it never draws, and the runner warns when a cell's requests did not reach the
    /// origin.
    Miss,
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Measured time per cell, e.g. "10s".
    pub duration: String,
    /// Load run before each measured cell and thrown away (connections, CPU frequency).
    #[serde(default)]
    pub warmup: Option<String>,
    /// How many times every path is fetched once before the first cell of a workload.
    #[serde(default = "one")]
    pub warm_passes: u32,
    #[serde(default)]
    pub expect: Expect,
    #[serde(default)]
    pub origin: OriginSpec,
    #[serde(rename = "server")]
    pub servers: Vec<ServerSpec>,
    #[serde(rename = "workload")]
    pub workloads: Vec<WorkloadSpec>,
    #[serde(default)]
    pub quick: QuickSpec,
    /// Before each measured cell: `sync; echo 3 > /proc/sys/vm/drop_caches` (needs root).
    #[serde(default)]
    pub drop_caches: bool,
    /// Every server runs in its own cgroup v1 memory cgroup with this limit ("192m").
    #[serde(default)]
    pub memory_limit: Option<String>,
    /// Optional disk ceiling: one fio run per workload.
    #[serde(default)]
    pub fio: Option<FioSpec>,
    /// Prometheus metric-name prefixes read from edgecache's admin `/metrics` around
    /// each cell (counters as deltas, gauges as the value after the cell).
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Claims the report checks (met / missed).
    #[serde(default, rename = "target")]
    pub targets: Vec<TargetSpec>,
}

/// `[fio]`: the disk's random-read ceiling, measured once per workload with the
/// workload's object size as the block size and its connections as the queue depth.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FioSpec {
    /// `io_uring` or `libaio` (another engine is passed through as written).
    #[serde(default = "default_fio_engine")]
    pub ioengine: String,
    /// Size of the file read (laid out once in the run directory).
    #[serde(default = "default_fio_size")]
    pub size: String,
    /// O_DIRECT (default true: the page cache would make it a memory benchmark).
    #[serde(default = "yes")]
    pub direct: bool,
    /// Run time; default: the workload's cell duration.
    #[serde(default)]
    pub runtime: Option<String>,
}

fn default_fio_engine() -> String {
    "io_uring".into()
}
fn default_fio_size() -> String {
    "1g".into()
}

/// A second load run alongside a workload's main load, on a few objects kept hot, whose
/// latency shows what the main (cold) load does to everyone else.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    #[serde(default = "two")]
    pub connections: u32,
    #[serde(default = "one")]
    pub threads: u32,
    /// Open-loop rate (req/s); absent: closed loop.
    #[serde(default)]
    pub rate: Option<u64>,
    pub urls: Vec<UrlGroup>,
    /// Passes over the probe's paths right before each cell (after drop_caches).
    #[serde(default = "three")]
    pub warm_passes: u32,
}

/// The figure a target compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Rps,
    Mbps,
    Cpu,
    P50,
    P99,
    HotP50,
    HotP99,
    HotP999,
}

impl Metric {
    /// Whether a larger value is better (throughput) or worse (CPU, latency).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Rps | Metric::Mbps)
    }
    pub fn label(self) -> &'static str {
        match self {
            Metric::Rps => "req/s",
            Metric::Mbps => "MB/s",
            Metric::Cpu => "CPU µs/req",
            Metric::P50 => "p50 µs",
            Metric::P99 => "p99 µs",
            Metric::HotP50 => "hot p50 µs",
            Metric::HotP99 => "hot p99 µs",
            Metric::HotP999 => "hot p99.9 µs",
        }
    }
}

/// One server name or several (then the best of them by the metric counts).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn names(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// `[[target]]`: "this metric of (the best of) these servers, divided by that of `vs`,
/// is at least `min` / at most `max`". `vs = "fio"` divides MB/s by the disk ceiling.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    pub label: String,
    pub workload: String,
    pub metric: Metric,
    pub server: OneOrMany,
    /// With several servers: choose the best by this metric (default: `metric`), then
    /// compare its `metric` ("the mode with the best MB/s has hot p99 ≤ ...").
    #[serde(default)]
    pub pick_by: Option<Metric>,
    pub vs: String,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
}

/// Extra `edgeorigin` flags (the runner adds `--listen`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginSpec {
    #[serde(default)]
    pub args: Vec<String>,
}

/// One server configuration: a row of the report.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Row label, unique in the file: "edgecache", "nginx aio threads".
    pub name: String,
    pub kind: ServerKind,
    /// Values for the `{{name}}` placeholders of the kind's template in `bench/peers/`.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// edgecache only: a TOML snippet deep-merged over `bench/peers/edgecache.toml`.
    #[serde(default)]
    pub config: Option<String>,
    /// edgecache only: the binary to run for this row instead of the one `--bin-dir`
    /// finds (another build, to compare two builds in one run); `$NAME` or `${NAME}`
    /// takes an environment variable's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Whether `--quick` keeps this row (when its kind is selected).
    #[serde(default = "yes")]
    pub quick: bool,
}

/// A group of URLs with one weight; `{id}` in `path` expands to 1..=ids.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct UrlGroup {
    pub path: String,
    #[serde(default)]
    pub ids: Option<u32>,
    #[serde(default = "one")]
    pub weight: u32,
    /// Zipf popularity over the ids (edgeload `--zipf`): P(id) ∝ id^-zipf, id 1 the most
    /// popular; absent: uniform. Needs the `/{id}` shape (see [`zipf_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zipf: Option<f64>,
}

/// `before = {...}`: a load run right before each measured cell (after the warm-up load)
/// and thrown away, e.g. a scan over the whole catalogue, so that every cell measures
/// what survived it.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BeforeSpec {
    #[serde(default = "default_connections")]
    pub connections: u32,
    #[serde(default = "one")]
    pub threads: u32,
    pub urls: Vec<UrlGroup>,
    /// Stop after this many requests (edgeload `--requests`); the duration bounds it.
    #[serde(default)]
    pub requests: Option<u64>,
    /// Default: the workload's cell duration.
    #[serde(default)]
    pub duration: Option<String>,
}

/// One load shape: a column group of the report.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default = "default_connections")]
    pub connections: u32,
    #[serde(default = "one")]
    pub threads: u32,
    #[serde(default = "yes")]
    pub keepalive: bool,
    /// Open-loop request rate (req/s); absent means closed loop, as fast as possible.
    #[serde(default)]
    pub rate: Option<u64>,
    #[serde(default)]
    pub headers: Vec<String>,
    /// Overrides the experiment's duration for this workload.
    #[serde(default)]
    pub duration: Option<String>,
    pub urls: Vec<UrlGroup>,
    /// A concurrent probe load on hot objects (its latency gets its own columns).
    #[serde(default)]
    pub probe: Option<ProbeSpec>,
    /// Object size for `[fio]` ("256k"); default: the first path segment that reads as
    /// a size (`/obj/256k/{id}` → 256 KiB).
    #[serde(default)]
    pub object_size: Option<String>,
    /// edgeload's per-request timeout (`--timeout`), e.g. "10s" for slow cold reads.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Stop each cell after this many requests (edgeload `--requests`); the duration
    /// still bounds it.
    #[serde(default)]
    pub requests: Option<u64>,
    /// Report the whole latency distribution (min, mean, median, p99, max, stdev) and
    /// edgeload's log2 histogram per server, not only p50/p99.
    #[serde(default)]
    pub latency_detail: bool,
    /// Overrides the experiment's `warm_passes` for this workload; 0 skips the fill (the
    /// workload measures the caches as the previous workloads left them).
    #[serde(default)]
    pub warm_passes: Option<u32>,
    /// A discarded load right before each measured cell (a scan, say).
    #[serde(default)]
    pub before: Option<BeforeSpec>,
}

/// What `--quick` changes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuickSpec {
    /// Workload names kept; absent keeps all.
    #[serde(default)]
    pub workloads: Option<Vec<String>>,
    #[serde(default)]
    pub duration: Option<String>,
    #[serde(default)]
    pub repetitions: Option<u32>,
    #[serde(default)]
    pub warmup: Option<String>,
    /// Caps every URL group's `ids` (a smaller object set for a quick run).
    #[serde(default)]
    pub max_ids: Option<u32>,
}

fn one() -> u32 {
    1
}
fn two() -> u32 {
    2
}
fn three() -> u32 {
    3
}
fn yes() -> bool {
    true
}
fn default_connections() -> u32 {
    DEFAULT_CONNECTIONS
}
