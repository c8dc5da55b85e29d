//! The command line: `edgebench <experiment> [--quick] [--peers nginx,varnish,ats]
//! [--out docs/results] [--duration D] [--cpus SERVER:CLIENT] ...`.
//!
//! How it fits: [`Cli`] is parsed by clap in `main`, then [`Cli::options`] resolves the
//! experiment file, the plan and the CPU placement into [`RunOptions`]. Usage errors
//! exit 2 (docs/contracts.md "Exit codes").

use std::path::{Path, PathBuf};

use clap::Parser;

use crate::bins::Bins;
use crate::cpus::{self, Placement};
use crate::error::{Error, Result};
use crate::experiment::{parse_duration, Experiment, PlanOptions};
use crate::runner::{LoadChoice, RunOptions};
use crate::servers::ServerKind;

/// Runs an experiment (bench/experiments/<name>.toml): edgecache side by side with
/// nginx, Varnish and Apache Traffic Server, written up as Markdown with SVG plots.
#[derive(Debug, Parser)]
#[command(name = "edgebench", version)]
pub struct Cli {
    /// Experiment name (hits, ..., or tier: a script, see `scripted`) or path to an
    /// experiment TOML file.
    pub experiment: String,
    /// Reduced matrix (the file's [quick] section; edgecache alone unless --peers).
    #[arg(long)]
    pub quick: bool,
    /// Peers to compare with, comma separated: nginx,varnish,ats. Default: every peer in
    /// the experiment (none with --quick). "none" runs edgecache alone.
    #[arg(long, value_name = "LIST")]
    pub peers: Option<String>,
    /// Directory for <experiment>.md, its SVG plots and raw JSON.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    /// Measured time per cell (overrides the file), e.g. 10s.
    #[arg(long, value_name = "D")]
    pub duration: Option<String>,
    /// Repetitions per cell (overrides the file).
    #[arg(long, alias = "reps", value_name = "N")]
    pub repetitions: Option<u32>,
    /// CPUs for the server under test and the load generator (lists allowed: 0-1:2,3).
    /// Default: the first two CPUs this process may use (0:1 on most machines).
    #[arg(long, value_name = "SERVER:CLIENT")]
    pub cpus: Option<String>,
    /// Load generator: edgeload (default) or wrk.
    #[arg(long, default_value = "edgeload", value_name = "NAME")]
    pub loadgen: String,
    /// Directory of edgecache/edgeorigin/edgeload (default: next to this executable;
    /// env EDGEBENCH_BIN_DIR; per binary EDGEBENCH_EDGECACHE etc.).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// The bench/ directory with experiments/ and peers/ (default: ./bench, else the
    /// one of the source tree this binary was built from).
    #[arg(long, value_name = "DIR")]
    pub bench_dir: Option<PathBuf>,
    /// Keep the run directory (generated configs, server logs, load JSON).
    #[arg(long)]
    pub keep: bool,
    /// Adds a row running another edgecache build, named NAME, beside the experiment's
    /// edgecache row (a copy of it with `program = PROGRAM`; `$VAR` expands). Repeatable.
    #[arg(long = "also", value_name = "NAME=PROGRAM")]
    pub also: Vec<String>,
}

/// Quotes an argument for a copy-pasteable shell command.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

pub fn find_bench_dir(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = flag {
        return if p.join("peers").is_dir() {
            Ok(p.to_path_buf())
        } else {
            Err(Error::usage(format!(
                "--bench-dir {}: no peers/ directory there",
                p.display()
            )))
        };
    }
    let candidates = [
        PathBuf::from("bench"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench"),
    ];
    candidates
        .into_iter()
        .find(|p| p.join("peers").is_dir())
        .ok_or_else(|| Error::usage("cannot find the bench/ directory (run from the repository root or pass --bench-dir)"))
}

impl Cli {
    /// Resolves everything the runner needs; `argv` is recorded as the exact command.
    /// `scripted`: the scripted experiments' names (`crate::scripted::names`), listed
    /// with the TOML ones when the experiment is unknown.
    pub fn options(&self, argv: &[String], scripted: &[&str]) -> Result<(RunOptions, PathBuf)> {
        let bench_dir = find_bench_dir(self.bench_dir.as_deref())?;
        let exp_path = if self.experiment.ends_with(".toml") || self.experiment.contains('/') {
            PathBuf::from(&self.experiment)
        } else {
            bench_dir
                .join("experiments")
                .join(format!("{}.toml", self.experiment))
        };
        if !exp_path.is_file() {
            let mut known: Vec<String> = std::fs::read_dir(bench_dir.join("experiments"))
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| {
                            e.file_name()
                                .to_str()
                                .and_then(|n| n.strip_suffix(".toml"))
                                .map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            known.extend(scripted.iter().map(|s| s.to_string()));
            known.sort();
            return Err(Error::usage(format!(
                "unknown experiment {:?} ({} does not exist); known: {}",
                self.experiment,
                exp_path.display(),
                known.join(", ")
            )));
        }
        let mut exp = Experiment::load(&exp_path)?;
        if !self.also.is_empty() {
            let builds = (self.also.iter())
                .map(|a| match a.split_once('=') {
                    Some((n, p)) if !n.trim().is_empty() && !p.trim().is_empty() => {
                        Ok((n.trim().to_string(), p.trim().to_string()))
                    }
                    _ => Err(Error::usage(format!(
                        "--also {a:?}: expected NAME=PROGRAM (\"edgecache before=/tmp/old/edgecache\")"
                    ))),
                })
                .collect::<Result<Vec<_>>>()?;
            exp.add_builds(&builds)
                .map_err(|e| Error::usage(format!("--also: {e}")))?;
        }
        let peers = match self.peers.as_deref() {
            None => None,
            Some("none") | Some("") => Some(vec![]),
            Some(list) => Some(
                list.split(',')
                    .map(ServerKind::parse)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(Error::usage)?,
            ),
        };
        let duration = self
            .duration
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(|e| Error::usage(format!("--duration: {e}")))?;
        let plan = exp.plan(&PlanOptions {
            quick: self.quick,
            duration,
            repetitions: self.repetitions,
            peers,
        })?;
        let allowed = cpus::allowed();
        let spec = self
            .cpus
            .clone()
            .unwrap_or_else(|| cpus::default_spec(&allowed));
        let placement = Placement::parse(&spec, &allowed).map_err(Error::usage)?;
        let loadgen = match self.loadgen.as_str() {
            "edgeload" => LoadChoice::Edgeload,
            "wrk" => LoadChoice::Wrk,
            other => {
                return Err(Error::usage(format!(
                    "--loadgen {other:?}: expected edgeload or wrk"
                )))
            }
        };
        let mut shown: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
        if let Some(first) = shown.first_mut() {
            // A bare program name reads better than an absolute target/ path.
            if first.ends_with("/edgebench") && !first.starts_with("target/") {
                *first = "target/release/edgebench".into();
            }
        }
        Ok((
            RunOptions {
                plan,
                bench_dir,
                placement,
                bins: Bins::new(self.bin_dir.clone()),
                loadgen,
                command: shown.join(" "),
                keep_dir: self.keep,
            },
            self.out.clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(
            shell_quote("--peers=nginx,varnish"),
            "--peers=nginx,varnish"
        );
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn the_shipped_hits_experiment_resolves() {
        let cli = Cli::parse_from([
            "edgebench",
            "hits",
            "--quick",
            "--bench-dir",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench"),
        ]);
        let (o, out) = cli
            .options(&["edgebench".into(), "hits".into(), "--quick".into()], &[])
            .unwrap();
        assert_eq!(out, PathBuf::from("docs/results"));
        assert_eq!(o.plan.name, "hits");
        assert!(o
            .plan
            .servers
            .iter()
            .all(|s| s.kind == ServerKind::Edgecache));
        assert_eq!(o.command, "edgebench hits --quick");
    }

    #[test]
    fn every_shipped_experiment_parses() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/experiments");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "toml") {
                let exp = Experiment::load(&p).unwrap_or_else(|e| panic!("{}", e.msg));
                exp.plan(&PlanOptions::default()).unwrap();
                exp.plan(&PlanOptions {
                    quick: true,
                    ..Default::default()
                })
                .unwrap();
                n += 1;
            }
        }
        assert!(n >= 3, "hits, aio-warm, aio");
    }

    #[test]
    fn the_shipped_tiers_experiment_resolves() {
        let bench = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench");
        let (o, _) = Cli::parse_from(["edgebench", "tiers", "--bench-dir", bench])
            .options(&[], &[])
            .unwrap();
        let p = &o.plan;
        assert_eq!(p.servers.len(), 5);
        assert_eq!(
            p.workloads
                .iter()
                .map(|w| w.name.as_str())
                .collect::<Vec<_>>(),
            ["zipf-0.8", "zipf-1.0", "scan", "after-scan", "1k", "100k"]
        );
        assert!(p.metrics.iter().any(|m| m == "edgecache_memory_cache_"));
        let w = |n: &str| p.workloads.iter().find(|w| w.name == n).unwrap();
        let t = crate::load::edgeload_targets(&w("zipf-0.8").groups, &[]).unwrap();
        assert_eq!(
            (t.url_path.as_str(), t.paths, t.zipf),
            ("/obj/10k", Some(20000), Some(0.8))
        );
        let t = crate::load::edgeload_targets(&w("scan").groups, &[]).unwrap();
        assert_eq!((t.paths, t.zipf), (Some(20000), None));
        assert_eq!(
            w("zipf-0.8").warm_passes,
            1,
            "the first 10 KiB workload fills"
        );
        assert!(["zipf-1.0", "scan", "after-scan"]
            .iter()
            .all(|n| w(n).warm_passes == 0));
        let b = w("after-scan").before.as_ref().unwrap();
        assert_eq!((b.paths.len(), b.requests), (20000, Some(20000)));
        // A bound on the run time: cells × (warm-up + cell) stays under ~6 minutes.
        let cells: f64 = p
            .workloads
            .iter()
            .map(|w| (p.warmup + w.duration).as_secs_f64())
            .sum::<f64>()
            * p.servers.len() as f64
            * p.repetitions as f64;
        assert!(cells <= 360.0, "{cells} s of cells");
        let (q, _) = Cli::parse_from(["edgebench", "tiers", "--quick", "--bench-dir", bench])
            .options(&[], &[])
            .unwrap();
        assert_eq!(q.plan.servers.len(), 4, "edgecache variants only");
        assert_eq!(q.plan.workloads[0].groups[0].ids, Some(5000));
    }

    #[test]
    fn usage_errors_exit_2() {
        let bench = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench");
        for args in [
            vec!["edgebench", "nope", "--bench-dir", bench],
            vec![
                "edgebench",
                "hits",
                "--peers",
                "squid",
                "--bench-dir",
                bench,
            ],
            vec!["edgebench", "hits", "--cpus", "0", "--bench-dir", bench],
            vec!["edgebench", "hits", "--duration", "x", "--bench-dir", bench],
            vec!["edgebench", "hits", "--loadgen", "ab", "--bench-dir", bench],
        ] {
            let e = Cli::parse_from(&args).options(&[], &[]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {}", e.msg);
        }
        // No `=`, no name, a name taken (by the nginx row).
        for also in ["before", "=/x/edgecache", "nginx=/x"] {
            let args = ["edgebench", "hits", "--also", also, "--bench-dir", bench];
            let e = Cli::parse_from(args).options(&[], &[]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "--also {also}: {}", e.msg);
        }
    }

    /// `--also`: another build beside the experiment's edgecache row, in the given order,
    /// with that row's config (fill-inline's edgecache rows differ only by config).
    #[test]
    fn also_adds_a_build_beside_the_edgecache_row() {
        let bench = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench");
        let (o, _) = Cli::parse_from([
            "edgebench",
            "hits",
            "--peers",
            "nginx",
            "--also",
            "before=/tmp/old/edgecache",
            "--also",
            "older = $HOME/edgecache",
            "--bench-dir",
            bench,
        ])
        .options(&[], &[])
        .unwrap();
        let rows: Vec<(&str, Option<&str>)> = (o.plan.servers.iter())
            .map(|s| (s.name.as_str(), s.program.as_deref()))
            .collect();
        assert_eq!(
            rows,
            [
                ("edgecache", None),
                ("before", Some("/tmp/old/edgecache")),
                ("older", Some("$HOME/edgecache")),
                ("nginx", None)
            ]
        );
        let (o, _) = Cli::parse_from([
            "edgebench",
            "fill-inline",
            "--also",
            "before=/tmp/old/edgecache",
            "--bench-dir",
            bench,
        ])
        .options(&[], &[])
        .unwrap();
        let (copy, of) = (&o.plan.servers[1], &o.plan.servers[0]);
        assert_eq!(
            (of.name.as_str(), copy.name.as_str()),
            ("edgecache", "before")
        );
        assert_eq!(
            (copy.config.as_deref(), &copy.vars),
            (of.config.as_deref(), &of.vars)
        );
    }
}
