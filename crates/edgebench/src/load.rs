//! Load generators: `edgeload` (the project's own, JSON results) and `wrk` (for
//! comparison runs and machines where edgeload is not built).
//!
//! How it fits: the runner hands a [`LoadSpec`] (one cell's shape) to
//! [`LoadGen::run`], which starts the generator as a pinned child process, waits for it
//! (interruptibly, bounded by the duration plus [`EXIT_SLACK`]), and parses its output
//! into a [`LoadResult`]. Several paths become a `--mix` file for edgeload or a small Lua
//! script for wrk.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::cpus::CpuSet;
use crate::error::{Context, Error, Result};
use crate::experiment::{id_range, zipf_of, UrlGroup};
use crate::process::{SpawnSpec, Spawned};

/// Time a load run may take beyond its duration (start-up, connection drain).
pub const EXIT_SLACK: Duration = Duration::from_secs(30);
/// Most lines an edgeload `--mix` file may have.
pub const EDGELOAD_MAX_MIX_LINES: usize = 256;
/// Percentiles every result carries, in this order (edgeload JSON names).
pub const PERCENTILES: [&str; 6] = ["p50", "p75", "p90", "p99", "p99.9", "p99.99"];

/// Which generator.
#[derive(Debug, Clone)]
pub enum LoadGen {
    Edgeload(PathBuf),
    Wrk(PathBuf),
}

/// One cell's load.
#[derive(Debug, Clone)]
pub struct LoadSpec<'a> {
    pub target: SocketAddr,
    /// The URL groups as written in the experiment.
    pub groups: &'a [UrlGroup],
    /// (path, weight), expanded; one entry means a single URL.
    pub paths: &'a [(String, u32)],
    pub connections: u32,
    pub threads: u32,
    pub duration: Duration,
    pub keepalive: bool,
    pub rate: Option<u64>,
    pub headers: &'a [String],
    pub cpus: Option<CpuSet>,
    /// edgeload `--requests`: stop after this many.
    pub requests: Option<u64>,
    /// edgeload `--histogram`: its log2 latency histogram is kept in the result.
    pub histogram: bool,
    /// edgeload `--timeout` (per request).
    pub timeout: Option<&'a str>,
}

/// A load run started by [`LoadGen::start`]; [`PendingLoad::finish`] waits for it.
pub struct PendingLoad<'g> {
    gen: &'g LoadGen,
    proc: Spawned,
    name: String,
    json_path: PathBuf,
    limit: Duration,
}

/// What one load run measured.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct LoadResult {
    pub requests: u64,
    pub duration_s: f64,
    pub bytes: u64,
    pub rps: f64,
    /// Sum of every error counter (connect, read, write, timeout, status, verify...).
    pub errors: u64,
    pub error_detail: BTreeMap<String, u64>,
    /// Latency percentiles in µs, keyed by [`PERCENTILES`] names (those the tool gave),
    /// and edgeload's `min`, `mean`, `stdev` and `max`.
    pub latency_us: BTreeMap<String, f64>,
    /// edgeload's `--histogram` text (the `Values min: ...` line and the log2 bars).
    #[serde(default)]
    pub histogram: Option<String>,
}

impl LoadResult {
    pub fn mb_per_s(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.bytes as f64 / self.duration_s / 1e6
        } else {
            0.0
        }
    }
    pub fn pct(&self, name: &str) -> Option<f64> {
        self.latency_us.get(name).copied()
    }
}

/// The `--histogram` block of an edgeload report: from the `Values min:` line to the
/// end of its bars (lines that start with a bucket edge).
pub fn log2_histogram(report: &str) -> Option<String> {
    let start = report.find("Values min:")?;
    let mut out = String::new();
    for (i, line) in report[start..].lines().enumerate() {
        let bar =
            line.contains(" |") && line.trim_start().starts_with(|c: char| c.is_ascii_digit());
        if i > 0 && !bar {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    Some(out)
}

impl LoadGen {
    pub fn name(&self) -> &'static str {
        match self {
            LoadGen::Edgeload(_) => "edgeload",
            LoadGen::Wrk(_) => "wrk",
        }
    }

    pub fn program(&self) -> &Path {
        match self {
            LoadGen::Edgeload(p) | LoadGen::Wrk(p) => p,
        }
    }

    /// Runs one load in `dir` (which receives the mix/script, JSON and log files).
    pub fn run(&self, spec: &LoadSpec, dir: &Path, tag: &str) -> Result<LoadResult> {
        self.start(spec, dir, tag)?.finish()
    }

    /// Starts one load in `dir` without waiting (several may run at once).
    pub fn start(&self, spec: &LoadSpec, dir: &Path, tag: &str) -> Result<PendingLoad<'_>> {
        let args = self.args(spec, dir, tag)?;
        let name = format!("{}-{tag}", self.name());
        let proc = Spawned::spawn(&SpawnSpec {
            name: name.clone(),
            program: self.program().to_path_buf(),
            args,
            dir: dir.to_path_buf(),
            cpus: spec.cpus.clone(),
            env: vec![],
            cgroup: None,
        })?;
        Ok(PendingLoad {
            gen: self,
            proc,
            name,
            json_path: dir.join(format!("{tag}.json")),
            limit: spec.duration + EXIT_SLACK,
        })
    }

    fn args(&self, spec: &LoadSpec, dir: &Path, tag: &str) -> Result<Vec<String>> {
        let secs = format!("{}s", spec.duration.as_secs_f64().max(1.0).round() as u64);
        let mut a: Vec<String> = vec![
            "-t".into(),
            spec.threads.to_string(),
            "-c".into(),
            spec.connections.to_string(),
            "-d".into(),
            secs,
            "--latency".into(),
        ];
        for h in spec.headers {
            a.push("-H".into());
            a.push(h.clone());
        }
        let base = format!("http://{}", spec.target);
        match self {
            LoadGen::Edgeload(_) => {
                a.push("--json".into());
                a.push(dir.join(format!("{tag}.json")).display().to_string());
                if !spec.keepalive {
                    a.push("--no-keepalive".into());
                }
                if let Some(r) = spec.rate {
                    a.push("-R".into());
                    a.push(r.to_string());
                }
                if let Some(t) = spec.timeout {
                    a.push("--timeout".into());
                    a.push(t.to_string());
                }
                if let Some(n) = spec.requests {
                    a.push("--requests".into());
                    a.push(n.to_string());
                }
                if spec.histogram {
                    a.push("--histogram".into());
                }
                let t = edgeload_targets(spec.groups, spec.paths)?;
                if let Some(n) = t.paths {
                    a.push("--paths".into());
                    a.push(n.to_string());
                }
                if let Some(z) = t.zipf {
                    a.push("--zipf".into());
                    a.push(z.to_string());
                }
                if let Some(text) = t.mix {
                    let mix = dir.join(format!("{tag}.mix"));
                    std::fs::write(&mix, text).ctx(format!("writing {}", mix.display()))?;
                    a.push("--mix".into());
                    a.push(mix.display().to_string());
                }
                a.push(format!("{base}{}", t.url_path));
                return Ok(a);
            }
            LoadGen::Wrk(_) => {
                if spec.rate.is_some() {
                    return Err(Error::usage(
                        "wrk has no open-loop rate (-R); use edgeload for this workload",
                    ));
                }
                if zipf_of(spec.groups).map_err(Error::usage)?.is_some() {
                    return Err(Error::usage(
                        "wrk cannot draw Zipf ids (`zipf` in a URL group); use edgeload for this workload",
                    ));
                }
                if id_range(spec.groups).is_some_and(|n| n as usize > spec.paths.len()) {
                    return Err(Error::usage(
                        "wrk cannot draw ids from a range it is not given path by path (expect = \"miss\"); use edgeload for this workload",
                    ));
                }
                if !spec.keepalive {
                    a.push("-H".into());
                    a.push("Connection: close".into());
                }
                if let Some(t) = spec.timeout {
                    a.push("--timeout".into());
                    a.push(t.to_string());
                }
                if spec.paths.len() > 1 {
                    let script = dir.join(format!("{tag}.lua"));
                    std::fs::write(&script, wrk_script(spec.paths))
                        .ctx(format!("writing {}", script.display()))?;
                    a.push("-s".into());
                    a.push(script.display().to_string());
                }
            }
        }
        a.push(format!("{base}{}", spec.paths[0].0));
        Ok(a)
    }
}

impl PendingLoad<'_> {
    /// Waits for the run (bounded by its duration plus [`EXIT_SLACK`]) and parses it.
    pub fn finish(mut self) -> Result<LoadResult> {
        let st = self.proc.wait(self.limit)?;
        let name = &self.name;
        let log = std::fs::read_to_string(self.proc.log_path()).unwrap_or_default();
        if !st.success() {
            return Err(Error::runtime(format!(
                "{name} failed ({st}); its output:\n{}",
                self.proc.log_tail()
            )));
        }
        match self.gen {
            LoadGen::Edgeload(_) => {
                let text = std::fs::read_to_string(&self.json_path)
                    .ctx(format!("reading {}", self.json_path.display()))?;
                let mut r = parse_edgeload_json(&text)
                    .map_err(|e| Error::runtime(format!("{}: {e}", self.json_path.display())))?;
                r.histogram = log2_histogram(&log);
                Ok(r)
            }
            LoadGen::Wrk(_) => parse_wrk(&log)
                .map_err(|e| Error::runtime(format!("{name}: {e}; its output:\n{log}"))),
        }
    }
}

/// How edgeload is told what to request.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeloadTargets {
    /// Path of the main URL.
    pub url_path: String,
    /// `--paths N`: edgeload appends `/1..N` to every path itself.
    pub paths: Option<u32>,
    /// `--mix` file contents (`WEIGHT PATH` lines).
    pub mix: Option<String>,
    /// `--zipf ALPHA`: ids drawn with Zipf popularity over `--paths`.
    pub zipf: Option<f64>,
}

/// Groups whose paths all end in `/{id}` with the same `ids` map onto edgeload's own
/// `--paths N` (prefixes in the mix file), with `--zipf` when the groups set `zipf`;
/// anything else is listed path by path, up to [`EDGELOAD_MAX_MIX_LINES`] (and cannot
/// carry `zipf`: [`zipf_of`] refuses it).
pub fn edgeload_targets(groups: &[UrlGroup], paths: &[(String, u32)]) -> Result<EdgeloadTargets> {
    let zipf = zipf_of(groups).map_err(Error::usage)?;
    let ids = id_range(groups);
    let uniform = ids.is_some();
    let lines: Vec<(String, u32)> = if uniform {
        groups
            .iter()
            .map(|g| (g.path.trim_end_matches("/{id}").to_string(), g.weight))
            .collect()
    } else {
        paths.to_vec()
    };
    if lines.len() > EDGELOAD_MAX_MIX_LINES {
        return Err(Error::usage(format!(
            "edgeload takes at most {EDGELOAD_MAX_MIX_LINES} mix lines and this workload lists {} paths; \
             write its groups as \"/prefix/{{id}}\" with one `ids` count",
            lines.len()
        )));
    }
    let mix = (lines.len() > 1).then(|| {
        let mut s = String::from("# generated by edgebench: weight path\n");
        for (p, w) in &lines {
            let _ = writeln!(s, "{w} {p}");
        }
        s
    });
    Ok(EdgeloadTargets {
        url_path: lines[0].0.clone(),
        paths: ids,
        mix,
        zipf,
    })
}

/// A wrk Lua script that cycles through the paths, each repeated by its weight.
fn wrk_script(paths: &[(String, u32)]) -> String {
    let mut s = String::from("-- generated by edgebench\nlocal paths = {\n");
    for (p, w) in paths {
        for _ in 0..*w {
            let _ = writeln!(s, "  {p:?},");
        }
    }
    s.push_str("}\nlocal i = 0\nrequest = function()\n  i = i % #paths + 1\n  return wrk.format(nil, paths[i])\nend\n");
    s
}

fn num(v: &serde_json::Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// Parses edgeload's `--json` output (`requests`, `duration_s`, `bytes`, `rps`,
/// `errors{...}`, `latency_us{p50...}`). Unknown fields are ignored.
pub fn parse_edgeload_json(text: &str) -> std::result::Result<LoadResult, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("bad edgeload JSON: {e}"))?;
    let field = |k: &str| {
        v.get(k)
            .and_then(num)
            .ok_or_else(|| format!("edgeload JSON has no numeric {k:?}"))
    };
    let requests = field("requests")? as u64;
    let duration_s = field("duration_s")?;
    let bytes = field("bytes")? as u64;
    let rps = v.get("rps").and_then(num).unwrap_or(if duration_s > 0.0 {
        requests as f64 / duration_s
    } else {
        0.0
    });
    let mut error_detail = BTreeMap::new();
    match v.get("errors") {
        Some(serde_json::Value::Object(m)) => {
            for (k, x) in m {
                if let Some(n) = num(x) {
                    error_detail.insert(k.clone(), n as u64);
                }
            }
        }
        Some(x) => {
            if let Some(n) = num(x) {
                error_detail.insert("total".into(), n as u64);
            }
        }
        None => {}
    }
    let mut latency_us = BTreeMap::new();
    if let Some(serde_json::Value::Object(m)) = v.get("latency_us") {
        for p in PERCENTILES.iter().chain(&["min", "mean", "stdev", "max"]) {
            if let Some(x) = m.get(*p).and_then(num) {
                latency_us.insert(p.to_string(), x);
            }
        }
    }
    Ok(LoadResult {
        requests,
        duration_s,
        bytes,
        rps,
        errors: error_detail.values().sum(),
        error_detail,
        latency_us,
        histogram: None,
    })
}

/// "1.23ms" / "800.00us" / "2.5s" / "1.10m" → µs.
fn wrk_time_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let (n, mult) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600e6)
    } else {
        return None;
    };
    n.parse::<f64>().ok().map(|x| x * mult)
}

/// "12.34MB" → bytes (wrk's binary units).
fn wrk_bytes(s: &str) -> Option<f64> {
    let s = s.trim();
    let units = [
        ("TB", 1u64 << 40),
        ("GB", 1 << 30),
        ("MB", 1 << 20),
        ("KB", 1 << 10),
        ("B", 1),
    ];
    for (u, m) in units {
        if let Some(n) = s.strip_suffix(u) {
            return n.parse::<f64>().ok().map(|x| x * m as f64);
        }
    }
    None
}

/// Parses wrk's text report (run with `--latency`).
pub fn parse_wrk(text: &str) -> std::result::Result<LoadResult, String> {
    let mut r = LoadResult::default();
    let mut in_dist = false;
    let mut saw_summary = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("Latency Distribution") {
            in_dist = true;
            continue;
        }
        if in_dist {
            let mut it = t.split_whitespace();
            match (
                it.next().and_then(|p| p.strip_suffix('%')),
                it.next().and_then(wrk_time_us),
            ) {
                (Some(p), Some(us)) => {
                    let name = match p {
                        "50" | "50.000" => "p50",
                        "75" | "75.000" => "p75",
                        "90" | "90.000" => "p90",
                        "99" | "99.000" => "p99",
                        _ => continue,
                    };
                    r.latency_us.insert(name.into(), us);
                    continue;
                }
                _ => in_dist = false,
            }
        }
        if let Some(rest) = t.strip_suffix(" read") {
            // "123456 requests in 5.00s, 1.23GB read"
            let (req, rest) = rest.split_once(" requests in ").ok_or("bad summary line")?;
            let (dur, bytes) = rest.split_once(", ").ok_or("bad summary line")?;
            r.requests = req.trim().parse().map_err(|_| "bad request count")?;
            r.duration_s = wrk_time_us(dur).ok_or("bad duration")? / 1e6;
            r.bytes = wrk_bytes(bytes).ok_or("bad byte count")? as u64;
            saw_summary = true;
        } else if let Some(rest) = t.strip_prefix("Socket errors:") {
            for part in rest.split(',') {
                let mut it = part.split_whitespace();
                if let (Some(k), Some(v)) =
                    (it.next(), it.next().and_then(|v| v.parse::<u64>().ok()))
                {
                    r.error_detail.insert(k.to_string(), v);
                }
            }
        } else if let Some(rest) = t.strip_prefix("Non-2xx or 3xx responses:") {
            r.error_detail
                .insert("status".into(), rest.trim().parse().unwrap_or(0));
        } else if let Some(rest) = t.strip_prefix("Requests/sec:") {
            r.rps = rest.trim().parse().map_err(|_| "bad Requests/sec")?;
        }
    }
    if !saw_summary {
        return Err("no 'N requests in Ts, X read' line".into());
    }
    r.errors = r.error_detail.values().sum();
    Ok(r)
}

#[cfg(test)]
mod tests;
