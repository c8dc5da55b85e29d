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
use crate::servers::ServerKind;

/// Upper bound on the distinct paths one workload may expand to (warm-up requests each).
pub const MAX_PATHS: usize = 100_000;
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
    /// Anything goes (miss/collapse experiments): no hit check.
    Any,
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
    /// (path, weight), every group expanded, in file order (warm-up uses these).
    pub paths: Vec<(String, u32)>,
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
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_connections() -> u32 {
    DEFAULT_CONNECTIONS
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
            expand_paths(&w.urls).map_err(|e| format!("workload {:?}: {e}", w.name))?;
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
            let duration = match (opts.duration, &w.duration, opts.quick) {
                (Some(d), _, _) => d,
                (None, Some(d), false) => parse_duration(d).map_err(bad)?,
                _ => base_duration,
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
                groups: w.urls.clone(),
                paths: expand_paths(&w.urls).map_err(bad)?,
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
        })
    }
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

    #[test]
    fn path_expansion_is_bounded() {
        let g = [UrlGroup {
            path: "/x/{id}".into(),
            ids: Some(MAX_PATHS as u32 + 1),
            weight: 1,
        }];
        assert!(expand_paths(&g).unwrap_err().contains("more than"));
    }
}
