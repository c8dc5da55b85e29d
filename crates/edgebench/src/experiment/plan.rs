//! The plan: an experiment file plus the command-line options ([`PlanOptions`])
//! resolved into exactly what the runner executes ([`Plan`]): servers, workloads with
//! their paths expanded and durations resolved, fio and probes.

use std::time::Duration;

use super::spec::{Expect, Experiment, ServerSpec, TargetSpec, UrlGroup};
use super::units::{guess_object_size, opt_secs, parse_duration, parse_size, secs};
use super::urls::{expand_paths, workload_paths};
use super::MAX_REPETITIONS;
use crate::error::{Error, Result};
use crate::kind::ServerKind;

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

impl Experiment {
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
