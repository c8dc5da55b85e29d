//! Experiments that are not a matrix of cells: `edgebench tier` (one edge and three
//! parents, a parent killed and restarted mid-run) needs four servers under test at once
//! and a fault in the middle of a phase, which the cell runner does not model. Such an
//! experiment is a script under `bench/` that writes its report to `--out` itself;
//! edgebench finds it, hands it the binaries it would use and maps its own flags:
//! `--quick` (a short run), `--duration` (the time of each phase), `--out`, `--keep`.
//!
//! How it fits: `main_with` asks [`lookup`] before resolving an experiment file.

use std::path::Path;
use std::process::Command;

use crate::bins::Bins;
use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::experiment::parse_duration;

/// (experiment name, script under bench/, arguments for --quick).
const SCRIPTED: &[(&str, &str, &[&str])] = &[(
    "tier",
    "tier.py",
    &["--seconds", "4", "--rate", "400", "--ids", "500"],
)];

/// The names of the scripted experiments.
pub fn names() -> impl Iterator<Item = &'static str> {
    SCRIPTED.iter().map(|(n, _, _)| *n)
}

/// The script for `name`, if it is a scripted experiment.
pub fn lookup(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    SCRIPTED
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, s, q)| (*s, *q))
}

/// The command that runs a scripted experiment (not started).
pub fn command(cli: &Cli, bench_dir: &Path, script: &str, quick: &[&str]) -> Result<Command> {
    if cli
        .peers
        .as_deref()
        .is_some_and(|p| p != "none" && !p.is_empty())
    {
        return Err(Error::usage(format!(
            "{}: every node is edgecache; --peers does not apply",
            cli.experiment
        )));
    }
    let bins = Bins::new(cli.bin_dir.clone());
    for b in ["edgecache", "edgeorigin", "edgeload"] {
        bins.ours(b).map_err(Error::usage)?;
    }
    let mut cmd = Command::new("python3");
    cmd.arg(bench_dir.join(script));
    if cli.quick {
        cmd.args(quick);
    }
    if let Some(d) = cli.duration.as_deref() {
        let d = parse_duration(d).map_err(|e| Error::usage(format!("--duration: {e}")))?;
        cmd.arg("--seconds").arg(d.as_secs().max(1).to_string());
    }
    if cli.keep {
        cmd.arg("--keep");
    }
    cmd.arg("--out").arg(&cli.out);
    cmd.env("EDGEBENCH_BIN_DIR", &bins.dir);
    Ok(cmd)
}

/// Runs a scripted experiment; returns the exit code.
pub fn run(cli: &Cli, bench_dir: &Path, script: &str, quick: &[&str]) -> i32 {
    let mut cmd = match command(cli, bench_dir, script, quick) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("edgebench: {e}");
            return e.exit_code();
        }
    };
    match cmd.status() {
        Ok(s) if s.success() => {
            eprintln!(
                "edgebench: report written to {}",
                cli.out.join(format!("{}.md", cli.experiment)).display()
            );
            0
        }
        Ok(s) => {
            eprintln!("edgebench: {script} failed ({s})");
            1
        }
        Err(e) => {
            eprintln!("edgebench: cannot start python3 {script}: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn tier_maps_its_flags_onto_the_script() {
        let bench = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench"));
        assert!(bench.join("tier.py").is_file());
        let (script, quick) = lookup("tier").unwrap();
        assert!(lookup("hits").is_none());
        // The binaries: point at a directory holding stand-ins.
        let dir = tempfile::tempdir().unwrap();
        for b in ["edgecache", "edgeorigin", "edgeload"] {
            let p = dir.path().join(b);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let d = dir.path().to_str().unwrap();
        let cli = Cli::parse_from([
            "edgebench",
            "tier",
            "--quick",
            "--duration",
            "3s",
            "--out",
            "/tmp/r",
            "--bin-dir",
            d,
        ]);
        let cmd = command(&cli, bench, script, quick).unwrap();
        let args: Vec<_> = cmd.get_args().map(|a| a.to_str().unwrap()).collect();
        assert!(args[0].ends_with("bench/tier.py"));
        assert_eq!(
            &args[1..],
            [
                "--seconds",
                "4",
                "--rate",
                "400",
                "--ids",
                "500",
                "--seconds",
                "3",
                "--out",
                "/tmp/r"
            ]
        );
        let env: Vec<_> = cmd.get_envs().collect();
        assert_eq!(
            env,
            [(
                std::ffi::OsStr::new("EDGEBENCH_BIN_DIR"),
                Some(dir.path().as_os_str())
            )]
        );
        let peers = Cli::parse_from(["edgebench", "tier", "--peers", "nginx", "--bin-dir", d]);
        assert_eq!(
            command(&peers, bench, script, quick)
                .unwrap_err()
                .exit_code(),
            2
        );
    }
}
