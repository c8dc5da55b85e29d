//! Experiments are data: one TOML file per experiment under `bench/experiments/`.
//!
//! How it fits: the runner knows nothing experiment-specific. A file names the servers
//! to compare (edgecache config snippets, peer template variables), the workloads (URL
//! groups, connections, keep-alive, rate), how to warm, how long and how often to run
//! each cell, and what `--quick` reduces. [`Experiment::plan`] turns the file plus the
//! command-line options into a [`Plan`]: the exact matrix the runner executes. Adding an
//! experiment means adding a file; see `docs/edgebench.md` for the schema.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::kind::ServerKind;

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

/// Command-line choices that shape the plan.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub quick: bool,
    /// `--duration`: overrides every cell's measured time.
    pub duration: Option<Duration>,
    /// `--repetitions`.
    pub repetitions: Option<u32>,
    /// `--peers`: peer kinds to include besides edgecache; None = the file's default.
    pub peers: Option<Vec<ServerKind>>,
}

/// A workload with its paths expanded and durations resolved.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Workload {
    pub name: String,
    pub label: String,
    pub connections: u32,
    pub threads: u32,
    pub keepalive: bool,
    pub rate: Option<u64>,
    pub headers: Vec<String>,
    #[serde(with = "secs")]
    pub duration: Duration,
    /// The URL groups as written (load generators that expand `{id}` themselves use them).
    pub groups: Vec<UrlGroup>,
    /// (path, weight), every group expanded, in file order (warm-up uses these). Not in
    /// the report's JSON: `groups` says the same in a few lines (thousands of ids).
    #[serde(skip_serializing)]
    pub paths: Vec<(String, u32)>,
    pub probe: Option<ProbePlan>,
    /// Bytes per object, when known (fio's block size).
    pub object_size: Option<u64>,
    /// edgeload `--timeout` value, validated.
    pub timeout: Option<String>,
    pub requests: Option<u64>,
    pub latency_detail: bool,
    /// Passes of the cache fill before the workload's first cell (0: no fill).
    pub warm_passes: u32,
    pub before: Option<BeforePlan>,
}

/// A `before` load with its paths expanded and its duration resolved.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BeforePlan {
    pub connections: u32,
    pub threads: u32,
    pub groups: Vec<UrlGroup>,
    #[serde(skip_serializing)]
    pub paths: Vec<(String, u32)>,
    pub requests: Option<u64>,
    #[serde(with = "secs")]
    pub duration: Duration,
}

/// A probe with its paths expanded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbePlan {
    pub connections: u32,
    pub threads: u32,
    pub rate: Option<u64>,
    pub groups: Vec<UrlGroup>,
    #[serde(skip_serializing)]
    pub paths: Vec<(String, u32)>,
    pub warm_passes: u32,
}

/// `[fio]` resolved.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FioPlan {
    pub ioengine: String,
    pub size: u64,
    pub direct: bool,
    /// None: each workload's duration.
    #[serde(with = "opt_secs")]
    pub runtime: Option<Duration>,
}

/// Exactly what the runner will do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub name: String,
    pub title: String,
    pub description: String,
    pub quick: bool,
    pub repetitions: u32,
    #[serde(with = "secs")]
    pub warmup: Duration,
    pub warm_passes: u32,
    pub expect: Expect,
    pub origin_args: Vec<String>,
    pub servers: Vec<ServerSpec>,
    pub workloads: Vec<Workload>,
    pub drop_caches: bool,
    /// Bytes; every server in its own memory cgroup with this limit.
    pub memory_limit: Option<u64>,
    pub fio: Option<FioPlan>,
    pub metrics: Vec<String>,
    pub targets: Vec<TargetSpec>,
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

mod opt_secs {
    pub fn serialize<S: serde::Serializer>(
        d: &Option<std::time::Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

/// Parses "192m", "4k", "1g", "512" (binary suffixes k/m/g/t, case-insensitive,
/// optional "b"/"ib"). Zero is refused.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad size {s:?} (use 4k, 192m, 1g)"))?;
    if n == 0 {
        return Err(format!("size {s:?} must be more than zero"));
    }
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// The first path segment that reads as a size with a unit: `/obj/256k/{id}` → 262144.
pub fn guess_object_size(path: &str) -> Option<u64> {
    path.split('/')
        .filter(|seg| {
            seg.len() > 1
                && seg.as_bytes()[0].is_ascii_digit()
                && seg.ends_with(|c: char| "kKmMgG".contains(c))
        })
        .find_map(|seg| parse_size(seg).ok())
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// Parses "500ms", "2s", "1.5s", "3m", "1h" (a bare number means seconds).
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    let (num, mult_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        (t, 1000.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?} (use 500ms, 2s, 3m)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("bad duration {s:?}"));
    }
    let d = Duration::from_secs_f64(v * mult_ms / 1000.0);
    if d > MAX_CELL {
        return Err(format!(
            "duration {s:?} is over the {}s limit",
            MAX_CELL.as_secs()
        ));
    }
    Ok(d)
}

impl Experiment {
    /// Reads and validates `path`. Errors name the file.
    pub fn load(path: &Path) -> Result<Experiment> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::usage(format!("{}: cannot read experiment: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|e| Error::usage(format!("{}: {e}", path.display())))
    }

    /// Parses and validates an experiment from TOML text.
    pub fn parse(text: &str) -> std::result::Result<Experiment, String> {
        let exp: Experiment = toml::from_str(text).map_err(|e| e.to_string())?;
        exp.validate()?;
        Ok(exp)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.servers.is_empty() || self.workloads.is_empty() {
            return Err("an experiment needs at least one [[server]] and one [[workload]]".into());
        }
        if self.repetitions == 0 || self.repetitions > MAX_REPETITIONS {
            return Err(format!("repetitions must be 1..={MAX_REPETITIONS}"));
        }
        parse_duration(&self.duration).map_err(|e| format!("duration: {e}"))?;
        if let Some(w) = &self.warmup {
            parse_duration(w).map_err(|e| format!("warmup: {e}"))?;
        }
        let mut names = BTreeSet::new();
        for s in &self.servers {
            if !names.insert(s.name.as_str()) {
                return Err(format!("server name {:?} appears twice", s.name));
            }
            if s.config.is_some() && s.kind != ServerKind::Edgecache {
                return Err(format!(
                    "server {:?}: `config` applies to kind = \"edgecache\" only; use `vars`",
                    s.name
                ));
            }
        }
        if !self.servers.iter().any(|s| s.kind == ServerKind::Edgecache) {
            return Err("an experiment needs at least one server of kind \"edgecache\"".into());
        }
        let mut wnames = BTreeSet::new();
        for w in &self.workloads {
            if !wnames.insert(w.name.as_str()) {
                return Err(format!("workload name {:?} appears twice", w.name));
            }
            if w.connections == 0 || w.threads == 0 || w.threads > w.connections {
                return Err(format!(
                    "workload {:?}: need 1 <= threads <= connections",
                    w.name
                ));
            }
            if let Some(d) = &w.duration {
                parse_duration(d).map_err(|e| format!("workload {:?}: duration: {e}", w.name))?;
            }
            workload_paths(&w.urls, self.expect)
                .map_err(|e| format!("workload {:?}: {e}", w.name))?;
            zipf_of(&w.urls).map_err(|e| format!("workload {:?}: {e}", w.name))?;
            if let Some(b) = &w.before {
                let what = format!("workload {:?}: before", w.name);
                if b.connections == 0 || b.threads == 0 || b.threads > b.connections {
                    return Err(format!("{what}: need 1 <= threads <= connections"));
                }
                if b.requests == Some(0) {
                    return Err(format!("{what}: requests must be at least 1"));
                }
                if let Some(d) = &b.duration {
                    parse_duration(d).map_err(|e| format!("{what}: duration: {e}"))?;
                }
                expand_paths(&b.urls).map_err(|e| format!("{what}: {e}"))?;
                zipf_of(&b.urls).map_err(|e| format!("{what}: {e}"))?;
            }
            if let Some(p) = &w.probe {
                if p.connections == 0 || p.threads == 0 || p.threads > p.connections {
                    return Err(format!(
                        "workload {:?}: probe: need 1 <= threads <= connections",
                        w.name
                    ));
                }
                if p.rate == Some(0) {
                    return Err(format!("workload {:?}: probe: rate must be > 0", w.name));
                }
                expand_paths(&p.urls).map_err(|e| format!("workload {:?}: probe: {e}", w.name))?;
                zipf_of(&p.urls).map_err(|e| format!("workload {:?}: probe: {e}", w.name))?;
            }
            if let Some(s) = &w.object_size {
                parse_size(s).map_err(|e| format!("workload {:?}: object_size: {e}", w.name))?;
            }
            if let Some(t) = &w.timeout {
                parse_duration(t).map_err(|e| format!("workload {:?}: timeout: {e}", w.name))?;
            }
        }
        if let Some(m) = &self.memory_limit {
            let b = parse_size(m).map_err(|e| format!("memory_limit: {e}"))?;
            if b < 16 << 20 {
                return Err(format!(
                    "memory_limit {m:?} is under 16m: no server starts in that"
                ));
            }
        }
        if let Some(f) = &self.fio {
            parse_size(&f.size).map_err(|e| format!("[fio] size: {e}"))?;
            if let Some(r) = &f.runtime {
                parse_duration(r).map_err(|e| format!("[fio] runtime: {e}"))?;
            }
            if f.ioengine.is_empty()
                || !f
                    .ioengine
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(format!(
                    "[fio] ioengine {:?}: expected io_uring or libaio",
                    f.ioengine
                ));
            }
        }
        if self.metrics.iter().any(|m| m.is_empty()) {
            return Err("metrics: an empty prefix would match everything".into());
        }
        let snames: BTreeSet<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
        for t in &self.targets {
            let what = format!("target {:?}", t.label);
            if !wnames.contains(t.workload.as_str()) {
                return Err(format!("{what}: unknown workload {:?}", t.workload));
            }
            let names = t.server.names();
            if names.is_empty() {
                return Err(format!("{what}: `server` names no server"));
            }
            for n in &names {
                if !snames.contains(n.as_str()) {
                    return Err(format!("{what}: unknown server {n:?}"));
                }
            }
            if t.vs == "fio" {
                if t.metric != Metric::Mbps {
                    return Err(format!(
                        "{what}: vs = \"fio\" compares metric = \"mbps\" only"
                    ));
                }
                if self.fio.is_none() {
                    return Err(format!("{what}: vs = \"fio\" needs a [fio] section"));
                }
            } else if !snames.contains(t.vs.as_str()) {
                return Err(format!("{what}: unknown server {:?} in `vs`", t.vs));
            }
            match (t.min, t.max) {
                (Some(x), None) | (None, Some(x)) if x.is_finite() && x > 0.0 => {}
                _ => {
                    return Err(format!(
                        "{what}: give exactly one of `min` or `max` (a ratio > 0)"
                    ))
                }
            }
        }
        if let Some(q) = &self.quick.workloads {
            for n in q {
                if !wnames.contains(n.as_str()) {
                    return Err(format!("[quick] workloads names unknown workload {n:?}"));
                }
            }
        }
        for d in [&self.quick.duration, &self.quick.warmup]
            .into_iter()
            .flatten()
        {
            parse_duration(d).map_err(|e| format!("[quick]: {e}"))?;
        }
        Ok(())
    }

    /// The matrix to run, given the command-line options.
    pub fn plan(&self, opts: &PlanOptions) -> Result<Plan> {
        let bad = |e: String| Error::usage(format!("experiment {}: {e}", self.name));
        let q = &self.quick;
        let reps = opts
            .repetitions
            .or(if opts.quick { q.repetitions } else { None })
            .unwrap_or(self.repetitions);
        if reps == 0 || reps > MAX_REPETITIONS {
            return Err(Error::usage(format!(
                "--repetitions must be 1..={MAX_REPETITIONS}"
            )));
        }
        let warmup_s = if opts.quick {
            q.warmup.as_ref().or(self.warmup.as_ref())
        } else {
            self.warmup.as_ref()
        };
        let warmup = match warmup_s {
            Some(s) => parse_duration(s).map_err(bad)?,
            None => Duration::ZERO,
        };
        let base_duration = if opts.quick {
            q.duration.as_ref().unwrap_or(&self.duration)
        } else {
            &self.duration
        };
        let base_duration = parse_duration(base_duration).map_err(bad)?;

        let mut workloads = Vec::new();
        for w in &self.workloads {
            if opts.quick {
                if let Some(keep) = &q.workloads {
                    if !keep.contains(&w.name) {
                        continue;
                    }
                }
            }
            let cap = |groups: &[UrlGroup]| -> Vec<UrlGroup> {
                groups
                    .iter()
                    .map(|g| {
                        let mut g = g.clone();
                        if let (true, Some(max), Some(n)) = (opts.quick, q.max_ids, g.ids) {
                            g.ids = Some(n.min(max.max(1)));
                        }
                        g
                    })
                    .collect()
            };
            let groups = cap(&w.urls);
            let probe = match &w.probe {
                Some(p) => {
                    let pg = cap(&p.urls);
                    Some(ProbePlan {
                        connections: p.connections,
                        threads: p.threads,
                        rate: p.rate,
                        paths: expand_paths(&pg).map_err(bad)?,
                        groups: pg,
                        warm_passes: p.warm_passes,
                    })
                }
                None => None,
            };
            let object_size = match &w.object_size {
                Some(s) => Some(parse_size(s).map_err(bad)?),
                None => w.urls.first().and_then(|g| guess_object_size(&g.path)),
            };
            let duration = match (opts.duration, &w.duration, opts.quick) {
                (Some(d), _, _) => d,
                (None, Some(d), false) => parse_duration(d).map_err(bad)?,
                _ => base_duration,
            };
            let before = match &w.before {
                Some(b) => {
                    let bg = cap(&b.urls);
                    Some(BeforePlan {
                        connections: b.connections,
                        threads: b.threads,
                        paths: expand_paths(&bg).map_err(bad)?,
                        groups: bg,
                        requests: b.requests,
                        duration: match &b.duration {
                            Some(d) => parse_duration(d).map_err(bad)?,
                            None => duration,
                        },
                    })
                }
                None => None,
            };
            workloads.push(Workload {
                name: w.name.clone(),
                label: w.label.clone().unwrap_or_else(|| w.name.clone()),
                connections: w.connections,
                threads: w.threads,
                keepalive: w.keepalive,
                rate: w.rate,
                headers: w.headers.clone(),
                duration,
                paths: workload_paths(&groups, self.expect).map_err(bad)?,
                groups,
                probe,
                object_size,
                timeout: w.timeout.clone(),
                requests: w.requests,
                latency_detail: w.latency_detail,
                warm_passes: w.warm_passes.unwrap_or(self.warm_passes),
                before,
            });
        }

        let servers = self
            .servers
            .iter()
            .filter(|s| {
                let kind_selected = match &opts.peers {
                    _ if s.kind == ServerKind::Edgecache => true,
                    Some(list) => list.contains(&s.kind),
                    // Without --peers a quick run is edgecache alone (CI has no peers).
                    None => !opts.quick,
                };
                kind_selected && (!opts.quick || s.quick)
            })
            .cloned()
            .collect();

        Ok(Plan {
            name: self.name.clone(),
            title: self.title.clone(),
            description: self.description.clone(),
            quick: opts.quick,
            repetitions: reps,
            warmup,
            warm_passes: self.warm_passes,
            expect: self.expect,
            origin_args: self.origin.args.clone(),
            servers,
            workloads,
            drop_caches: self.drop_caches,
            memory_limit: self
                .memory_limit
                .as_deref()
                .map(parse_size)
                .transpose()
                .map_err(bad)?,
            fio: match &self.fio {
                Some(f) => Some(FioPlan {
                    ioengine: f.ioengine.clone(),
                    size: parse_size(&f.size).map_err(bad)?,
                    direct: f.direct,
                    runtime: f
                        .runtime
                        .as_deref()
                        .map(parse_duration)
                        .transpose()
                        .map_err(bad)?,
                }),
                None => None,
            },
            metrics: self.metrics.clone(),
            targets: self.targets.clone(),
        })
    }
}

/// A workload's paths for the fill and the probe: every one ([`expand_paths`]), or with
/// `expect = "miss"` one per group with id 0 (the load generator draws the ids itself,
/// from 1).
fn workload_paths(
    groups: &[UrlGroup],
    expect: Expect,
) -> std::result::Result<Vec<(String, u32)>, String> {
    if expect != Expect::Miss {
        return expand_paths(groups);
    }
    if id_range(groups).is_none() {
        return Err(
            "with expect = \"miss\" every URL group must end in \"/{id}\" with the \
                    same `ids` (edgeload draws the ids)"
                .into(),
        );
    }
    let zero: Vec<UrlGroup> = groups
        .iter()
        .map(|g| UrlGroup {
            ids: None,
            path: g.path.replace("{id}", "0"),
            ..g.clone()
        })
        .collect();
    expand_paths(&zero)
}

/// Expands `{id}` templates into concrete (path, weight) pairs, bounded by [`MAX_PATHS`].
fn expand_paths(groups: &[UrlGroup]) -> std::result::Result<Vec<(String, u32)>, String> {
    if groups.is_empty() {
        return Err("needs at least one [[workload.urls]] entry".into());
    }
    let mut out = Vec::new();
    for g in groups {
        if !g.path.starts_with('/')
            || g.path
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(format!(
                "path {:?} must start with '/' and have no spaces",
                g.path
            ));
        }
        if g.weight == 0 {
            return Err(format!("path {:?}: weight must be at least 1", g.path));
        }
        match (g.path.contains("{id}"), g.ids) {
            (true, Some(n)) if n > 0 => {
                if out.len() + n as usize > MAX_PATHS {
                    return Err(format!("more than {MAX_PATHS} paths"));
                }
                for id in 1..=n {
                    out.push((g.path.replace("{id}", &id.to_string()), g.weight));
                }
            }
            (true, _) => {
                return Err(format!(
                    "path {:?} has {{id}} but no `ids = N` (N >= 1)",
                    g.path
                ))
            }
            (false, Some(_)) => {
                return Err(format!(
                    "path {:?} has `ids` but no {{id}} placeholder",
                    g.path
                ))
            }
            (false, None) => out.push((g.path.clone(), g.weight)),
        }
    }
    Ok(out)
}

/// `Some(ids)` when every group ends in `/{id}` (its only placeholder) with the same
/// `ids`: the shape edgeload draws itself (`--paths ids`, the prefixes in a `--mix`).
pub fn id_range(groups: &[UrlGroup]) -> Option<u32> {
    let ids = groups.first().and_then(|g| g.ids)?;
    groups
        .iter()
        .all(|g| {
            g.ids == Some(ids) && g.path.ends_with("/{id}") && g.path.matches("{id}").count() == 1
        })
        .then_some(ids)
}

/// The workload's Zipf exponent (None: no group sets `zipf`, ids are uniform). edgeload
/// draws the id itself, one law for every mix line, so `zipf` needs every group in the
/// [`id_range`] shape and the same `zipf` on each; anything else is refused here rather
/// than silently run uniform.
pub fn zipf_of(groups: &[UrlGroup]) -> std::result::Result<Option<f64>, String> {
    let Some(first) = groups.iter().find_map(|g| g.zipf) else {
        return Ok(None);
    };
    for g in groups {
        if let Some(a) = g.zipf {
            if !(a.is_finite() && a > 0.0 && a <= MAX_ZIPF) {
                return Err(format!(
                    "path {:?}: zipf = {a} must be in (0, {MAX_ZIPF}]",
                    g.path
                ));
            }
        }
    }
    if id_range(groups).is_none() {
        return Err(format!(
            "zipf needs every URL group of the workload to end in \"/{{id}}\" with the same `ids` \
             (edgeload draws the id itself over 1..=ids); here: {}",
            groups
                .iter()
                .map(|g| match g.ids {
                    Some(n) => format!("{:?} ids {n}", g.path),
                    None => format!("{:?} no ids", g.path),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(g) = groups.iter().find(|g| g.zipf != Some(first)) {
        return Err(format!(
            "zipf must be the same on every URL group of the workload (edgeload draws one \
             law for all of them): {:?} has {}, not {first}",
            g.path,
            g.zipf.map_or("none".to_string(), |a| a.to_string())
        ));
    }
    Ok(Some(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
name = "t"
title = "T"
repetitions = 3
duration = "5s"
warmup = "1s"
[origin]
args = ["--sizes", "1k"]
[[server]]
name = "edgecache"
kind = "edgecache"
config = "workers = 1"
[[server]]
name = "nginx"
kind = "nginx"
[[server]]
name = "nginx aio"
kind = "nginx"
vars = { location_extra = "aio threads;" }
quick = false
[[server]]
name = "varnish"
kind = "varnish"
[[workload]]
name = "1k"
urls = [{ path = "/obj/1k/{id}", ids = 3 }]
[[workload]]
name = "mix"
duration = "9s"
urls = [{ path = "/a", weight = 2 }, { path = "/b/{id}", ids = 2 }]
[quick]
workloads = ["1k"]
duration = "2s"
repetitions = 1
"#;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("3m").unwrap(), Duration::from_secs(180));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        for bad in ["", "x", "-1s", "2d", "NaNs", "2h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn full_plan_keeps_everything() {
        let e = Experiment::parse(SAMPLE).unwrap();
        let p = e.plan(&PlanOptions::default()).unwrap();
        assert_eq!(p.repetitions, 3);
        assert_eq!(p.servers.len(), 4);
        assert_eq!(p.workloads.len(), 2);
        assert_eq!(
            p.workloads[0].paths,
            vec![
                ("/obj/1k/1".into(), 1),
                ("/obj/1k/2".into(), 1),
                ("/obj/1k/3".into(), 1)
            ]
        );
        assert_eq!(
            p.workloads[1].paths,
            vec![("/a".into(), 2), ("/b/1".into(), 1), ("/b/2".into(), 1)]
        );
        assert_eq!(p.workloads[0].duration, Duration::from_secs(5));
        assert_eq!(p.workloads[1].duration, Duration::from_secs(9));
        assert_eq!(p.warmup, Duration::from_secs(1));
        assert_eq!(p.workloads[0].connections, DEFAULT_CONNECTIONS);
    }

    #[test]
    fn quick_plan_is_edgecache_alone_unless_peers_are_named() {
        let e = Experiment::parse(SAMPLE).unwrap();
        let p = e
            .plan(&PlanOptions {
                quick: true,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            p.servers
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["edgecache"]
        );
        assert_eq!(p.workloads.len(), 1);
        assert_eq!(p.workloads[0].duration, Duration::from_secs(2));
        assert_eq!(p.repetitions, 1);
        let p = e
            .plan(&PlanOptions {
                quick: true,
                peers: Some(vec![ServerKind::Nginx]),
                ..Default::default()
            })
            .unwrap();
        // "nginx aio" has quick = false.
        assert_eq!(
            p.servers
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["edgecache", "nginx"]
        );
    }

    #[test]
    fn command_line_overrides_win() {
        let e = Experiment::parse(SAMPLE).unwrap();
        let opts = PlanOptions {
            duration: Some(Duration::from_secs(1)),
            repetitions: Some(2),
            peers: Some(vec![ServerKind::Varnish]),
            ..Default::default()
        };
        let p = e.plan(&opts).unwrap();
        assert!(p
            .workloads
            .iter()
            .all(|w| w.duration == Duration::from_secs(1)));
        assert_eq!(p.repetitions, 2);
        assert_eq!(
            p.servers
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["edgecache", "varnish"]
        );
    }

    #[test]
    fn invalid_files_say_why() {
        let cases = [
            (
                SAMPLE.replace("kind = \"varnish\"", "kind = \"squid\""),
                "squid",
            ),
            (
                SAMPLE.replace("repetitions = 3", "repetitions = 0"),
                "repetitions",
            ),
            (SAMPLE.replace("ids = 3", "ids = 0"), "ids"),
            (
                SAMPLE.replace("duration = \"5s\"", "duration = \"fast\""),
                "duration",
            ),
            (
                SAMPLE.replace("name = \"nginx aio\"", "name = \"nginx\""),
                "twice",
            ),
            (
                SAMPLE.replace("workloads = [\"1k\"]", "workloads = [\"2k\"]"),
                "2k",
            ),
            (
                SAMPLE.replace("path = \"/a\"", "path = \"a b\""),
                "start with",
            ),
            (
                SAMPLE.replace(
                    "name = \"varnish\"\nkind = \"varnish\"",
                    "name = \"v\"\nkind = \"varnish\"\nconfig = \"x\"",
                ),
                "edgecache",
            ),
            (
                SAMPLE.replace("title = \"T\"", "title = \"T\"\nbogus = 1"),
                "bogus",
            ),
            (
                SAMPLE.replace("kind = \"edgecache\"", "kind = \"nginx\""),
                "edgecache",
            ),
        ];
        for (text, needle) in cases {
            let err = Experiment::parse(&text).unwrap_err();
            assert!(err.contains(needle), "expected {needle:?} in {err:?}");
        }
    }

    const COLD: &str = r#"
name = "cold"
title = "C"
duration = "10s"
drop_caches = true
memory_limit = "192m"
metrics = ["edgecache_aio_"]
[fio]
ioengine = "libaio"
[[server]]
name = "edgecache off"
kind = "edgecache"
[[server]]
name = "edgecache auto"
kind = "edgecache"
[[server]]
name = "nginx"
kind = "nginx"
[[workload]]
name = "256k"
connections = 64
timeout = "10s"
urls = [{ path = "/obj/256k/{id}", ids = 4096 }]
probe = { connections = 2, rate = 200, urls = [{ path = "/obj/1k/{id}", ids = 8 }] }
[[workload]]
name = "odd"
object_size = "4k"
urls = [{ path = "/x/{id}", ids = 3 }]
[[target]]
label = "best ≥ 1.3× nginx"
workload = "256k"
metric = "mbps"
server = ["edgecache off", "edgecache auto"]
vs = "nginx"
min = 1.3
[[target]]
label = "disk"
workload = "256k"
metric = "mbps"
server = "edgecache auto"
vs = "fio"
min = 0.85
[quick]
max_ids = 100
"#;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("192m").unwrap(), 192 << 20);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("512").unwrap(), 512);
        for bad in ["", "m", "0", "-1m", "1.5g", "1x"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(guess_object_size("/obj/256k/{id}"), Some(256 << 10));
        assert_eq!(guess_object_size("/txt/1m/7"), Some(1 << 20));
        assert_eq!(guess_object_size("/a/{id}"), None);
    }

    #[test]
    fn cold_disk_fields_reach_the_plan() {
        let e = Experiment::parse(COLD).unwrap();
        let p = e.plan(&PlanOptions::default()).unwrap();
        assert!(p.drop_caches);
        assert_eq!(p.memory_limit, Some(192 << 20));
        let f = p.fio.as_ref().unwrap();
        assert_eq!(
            (f.ioengine.as_str(), f.size, f.direct),
            ("libaio", 1 << 30, true)
        );
        assert_eq!(p.metrics, ["edgecache_aio_"]);
        assert_eq!(p.targets.len(), 2);
        let w = &p.workloads[0];
        assert_eq!(w.paths.len(), 4096, "thousands of ids");
        assert_eq!(w.object_size, Some(256 << 10));
        assert_eq!(w.timeout.as_deref(), Some("10s"));
        let pr = w.probe.as_ref().unwrap();
        assert_eq!((pr.connections, pr.rate, pr.warm_passes), (2, Some(200), 3));
        assert_eq!(pr.paths.len(), 8);
        assert_eq!(
            p.workloads[1].object_size,
            Some(4096),
            "explicit object_size"
        );
        // --quick caps the ids.
        let q = e
            .plan(&PlanOptions {
                quick: true,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(q.workloads[0].paths.len(), 100);
        assert_eq!(q.workloads[0].groups[0].ids, Some(100));
        assert_eq!(q.workloads[0].probe.as_ref().unwrap().paths.len(), 8);
    }

    #[test]
    fn invalid_cold_disk_fields_say_why() {
        let cases = [
            (
                COLD.replace("memory_limit = \"192m\"", "memory_limit = \"1m\""),
                "16m",
            ),
            (
                COLD.replace("memory_limit = \"192m\"", "memory_limit = \"lots\""),
                "memory_limit",
            ),
            (COLD.replace("rate = 200", "rate = 0"), "probe"),
            (
                COLD.replace("connections = 2,", "connections = 0,"),
                "probe",
            ),
            (COLD.replace("ids = 8", "ids = 0"), "probe"),
            (
                COLD.replace("ioengine = \"libaio\"", "ioengine = \"x; rm\""),
                "ioengine",
            ),
            (
                COLD.replace("object_size = \"4k\"", "object_size = \"big\""),
                "object_size",
            ),
            (
                COLD.replace("timeout = \"10s\"", "timeout = \"soon\""),
                "timeout",
            ),
            (
                COLD.replace("vs = \"nginx\"", "vs = \"varnish\""),
                "varnish",
            ),
            (
                COLD.replace(
                    "workload = \"256k\"\nmetric = \"mbps\"\nserver = [",
                    "workload = \"1k\"\nmetric = \"mbps\"\nserver = [",
                ),
                "1k",
            ),
            (
                COLD.replace("min = 1.3", "min = 1.3\nmax = 2.0"),
                "exactly one",
            ),
            (
                COLD.replace(
                    "metric = \"mbps\"\nserver = \"edgecache auto\"",
                    "metric = \"rps\"\nserver = \"edgecache auto\"",
                ),
                "fio",
            ),
            (
                COLD.replace(
                    "metric = \"mbps\"\nserver = [",
                    "metric = \"speed\"\nserver = [",
                ),
                "speed",
            ),
            (
                COLD.replace("metrics = [\"edgecache_aio_\"]", "metrics = [\"\"]"),
                "metrics",
            ),
        ];
        for (text, needle) in cases {
            assert_ne!(text, COLD, "replacement for {needle:?} did not apply");
            let err = Experiment::parse(&text).unwrap_err();
            assert!(err.contains(needle), "expected {needle:?} in {err:?}");
        }
        let no_fio = COLD.replace("[fio]\nioengine = \"libaio\"\n", "");
        assert!(Experiment::parse(&no_fio).unwrap_err().contains("[fio]"));
    }

    const TIERS: &str = r#"
name = "t"
title = "T"
duration = "3s"
warm_passes = 2
[[server]]
name = "edgecache"
kind = "edgecache"
[[workload]]
name = "zipf"
urls = [{ path = "/obj/10k/{id}", ids = 20000, zipf = 0.8 }]
[[workload]]
name = "after"
warm_passes = 0
requests = 20000
urls = [{ path = "/obj/10k/{id}", ids = 20000, zipf = 1.0 }]
before = { urls = [{ path = "/obj/10k/{id}", ids = 20000 }], requests = 20000 }
[quick]
max_ids = 5000
duration = "1s"
"#;

    #[test]
    fn zipf_warm_passes_and_before_reach_the_plan() {
        let e = Experiment::parse(TIERS).unwrap();
        let p = e.plan(&PlanOptions::default()).unwrap();
        let (z, a) = (&p.workloads[0], &p.workloads[1]);
        assert_eq!(z.groups[0].zipf, Some(0.8));
        assert_eq!(zipf_of(&z.groups), Ok(Some(0.8)));
        assert_eq!(z.paths.len(), 20000, "the fill still covers every id");
        assert_eq!((z.warm_passes, a.warm_passes), (2, 0));
        assert!(z.before.is_none());
        let b = a.before.as_ref().unwrap();
        assert_eq!((b.connections, b.threads, b.requests), (16, 1, Some(20000)));
        assert_eq!(b.paths.len(), 20000);
        assert_eq!(
            b.duration,
            Duration::from_secs(3),
            "the workload's duration"
        );
        assert_eq!(zipf_of(&b.groups), Ok(None));
        // --quick caps every group alike: the shape (and so zipf) survives.
        let q = e
            .plan(&PlanOptions {
                quick: true,
                ..Default::default()
            })
            .unwrap();
        let a = &q.workloads[1];
        assert_eq!(a.groups[0].ids, Some(5000));
        assert_eq!(zipf_of(&a.groups), Ok(Some(1.0)));
        let b = a.before.as_ref().unwrap();
        assert_eq!((b.paths.len(), b.duration), (5000, Duration::from_secs(1)));
        // The report's JSON keeps zipf on the groups that have it.
        let j = serde_json::to_value(&q).unwrap();
        assert_eq!(j["workloads"][1]["groups"][0]["zipf"], 1.0);
        assert!(j["workloads"][1]["before"]["groups"][0]
            .get("zipf")
            .is_none());
    }

    #[test]
    fn zipf_that_cannot_be_honoured_is_a_config_error() {
        let z = "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }]";
        assert!(TIERS.contains(z));
        let cases = [
            (
                TIERS.replace(
                    z,
                    "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }, { path = \"/a\" }]",
                ),
                "end in \"/{id}\" with the same `ids`",
            ),
            (
                TIERS.replace(
                    z,
                    "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }, { path = \"/obj/1k/{id}\", ids = 100, zipf = 0.8 }]",
                ),
                "same `ids`",
            ),
            (
                TIERS.replace(
                    z,
                    "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }, { path = \"/obj/1k/{id}\", ids = 20000 }]",
                ),
                "same on every URL group",
            ),
            (
                TIERS.replace(z, "urls = [{ path = \"/obj/{id}/x\", ids = 9, zipf = 0.8 }]"),
                "end in",
            ),
            (TIERS.replace("zipf = 0.8", "zipf = 0"), "(0, 3]"),
            (TIERS.replace("zipf = 0.8", "zipf = 3.5"), "(0, 3]"),
            (TIERS.replace("zipf = 0.8", "zipf = -1"), "(0, 3]"),
            (
                TIERS.replace("ids = 20000 }], requests", "ids = 20000, zipf = 9 }], requests"),
                "before",
            ),
            (
                TIERS.replace("requests = 20000 }", "requests = 0 }"),
                "before: requests",
            ),
            (
                TIERS.replace("requests = 20000 }", "requests = 20000, duration = \"x\" }"),
                "before: duration",
            ),
            (
                TIERS.replace("requests = 20000 }", "requests = 1, threads = 2, connections = 1 }"),
                "before: need",
            ),
            (TIERS.replace("warm_passes = 0", "warm_passes = \"no\""), "warm_passes"),
        ];
        for (text, needle) in cases {
            assert_ne!(text, TIERS, "replacement for {needle:?} did not apply");
            let err = Experiment::parse(&text).unwrap_err();
            assert!(err.contains(needle), "expected {needle:?} in {err:?}");
        }
    }

    #[test]
    fn a_miss_workload_lets_edgeload_draw_ids_it_never_lists() {
        let text = SAMPLE
            .replace("warmup = \"1s\"", "warmup = \"1s\"\nexpect = \"miss\"")
            .replace(
                "urls = [{ path = \"/obj/1k/{id}\", ids = 3 }]",
                "urls = [{ path = \"/obj/1k/{id}\", ids = 4294967295 }]",
            )
            .replace(
                "urls = [{ path = \"/a\", weight = 2 }, { path = \"/b/{id}\", ids = 2 }]",
                "urls = [{ path = \"/a/{id}\", ids = 9 }, { path = \"/b/{id}\", ids = 9 }]",
            );
        let p = Experiment::parse(&text)
            .unwrap()
            .plan(&PlanOptions::default())
            .unwrap();
        assert_eq!(p.expect, Expect::Miss);
        let w = &p.workloads[0];
        assert_eq!(
            w.paths,
            vec![("/obj/1k/0".into(), 1)],
            "fill and probe: id 0"
        );
        let t = crate::load::edgeload_targets(&w.groups, &w.paths).unwrap();
        assert_eq!(
            (t.url_path.as_str(), t.paths),
            ("/obj/1k", Some(4294967295))
        );
        assert_eq!(
            p.workloads[1].paths,
            vec![("/a/0".into(), 1), ("/b/0".into(), 1)]
        );
        // A shape edgeload cannot draw is refused, not listed.
        let listed = text.replace("{ path = \"/a/{id}\", ids = 9 }", "{ path = \"/a\" }");
        let err = Experiment::parse(&listed).unwrap_err();
        assert!(err.contains("expect = \"miss\""), "{err}");
    }

    #[test]
    fn path_expansion_is_bounded() {
        let g = [UrlGroup {
            path: "/x/{id}".into(),
            ids: Some(MAX_PATHS as u32 + 1),
            weight: 1,
            zipf: None,
        }];
        assert!(expand_paths(&g).unwrap_err().contains("more than"));
    }
}
