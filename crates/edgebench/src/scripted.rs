//! Experiments that are not a matrix of cells: `edgebench tier` (one edge and three
//! parents, a parent killed and restarted mid-run) needs four servers under test at once
//! and a fault in the middle of a phase, which the cell runner does not model; `edgebench
//! tls` (cache hits over TLS with h2load and edgeload, and handshakes) makes its own
//! certificates and drives two load generators; `edgebench limits` (rate limits under
//! attack) runs an attacker and 50 legitimate clients at once, from many loopback
//! addresses, in four phases per server; `edgebench video` (seeks into huge objects,
//! edgecache's slices against nginx's slice module) counts origin bytes, times the first
//! byte of 256 seek misses from its own clients and measures warm hits with `edgeload
//! --seek`; `edgebench h3` (cache hits and handshakes over HTTP/3 against Caddy) runs
//! Caddy from a Caddyfile of its own, two edgecache configurations (with and without
//! GSO) and two load generators (`edgeload --h3`, h2load). Such an experiment is a script under
//! `bench/` that writes its report to `--out` itself; edgebench finds it, hands it the
//! binaries it would use and maps its own flags: `--quick` (a short run), `--duration`
//! (the time of each phase or cell), `--repetitions` and `--cpus` (where the script
//! takes them), `--out`, `--keep`.
//!
//! How it fits: `main_with` asks [`lookup`] before resolving an experiment file.

use std::path::Path;
use std::process::Command;

use crate::bins::Bins;
use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::experiment::parse_duration;

/// One scripted experiment.
struct Scripted {
    /// The experiment's name (`edgebench <name>`); the report is `<out>/<name>.md`.
    name: &'static str,
    /// The script under bench/.
    script: &'static str,
    /// Its arguments for --quick.
    quick: &'static [&'static str],
    /// The peers the script always runs next to edgecache, whatever `--peers` says:
    /// `--peers` may name exactly these (or be left out). Empty: every server is
    /// edgecache, and `--peers` (other than `none`) is refused.
    peers: &'static [&'static str],
    /// The script takes `--repetitions N`: edgebench's `--repetitions` is passed on
    /// (else it is not used).
    repetitions: bool,
    /// The script takes `--cpus SERVER:CLIENT`: edgebench's `--cpus` is passed on (else
    /// it is not used).
    cpus: bool,
}

const SCRIPTED: &[Scripted] = &[
    Scripted {
        name: "tier",
        script: "tier.py",
        quick: &["--seconds", "4", "--rate", "400", "--ids", "500"],
        peers: &[],
        repetitions: false,
        cpus: false,
    },
    Scripted {
        name: "tls",
        script: "tls.py",
        quick: &["--quick"],
        peers: &["nginx"],
        repetitions: true,
        cpus: false,
    },
    Scripted {
        name: "limits",
        script: "limits.py",
        quick: &["--quick"],
        peers: &["nginx"],
        repetitions: true,
        cpus: true,
    },
    Scripted {
        name: "video",
        script: "video.py",
        quick: &["--quick"],
        peers: &["nginx"],
        repetitions: true,
        cpus: true,
    },
    Scripted {
        name: "h3",
        script: "h3.py",
        quick: &["--quick"],
        peers: &["caddy"],
        repetitions: true,
        cpus: false,
    },
];

/// The names of the scripted experiments.
pub fn names() -> impl Iterator<Item = &'static str> {
    SCRIPTED.iter().map(|s| s.name)
}

/// The script for `name`, if it is a scripted experiment.
pub fn lookup(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    SCRIPTED
        .iter()
        .find(|s| s.name == name)
        .map(|s| (s.script, s.quick))
}

/// Refuses a `--peers` the script cannot honour.
fn check_peers(cli: &Cli, entry: Option<&Scripted>) -> Result<()> {
    let Some(list) = cli.peers.as_deref() else {
        return Ok(());
    };
    let fixed = entry.map_or(&[][..], |e| e.peers);
    if fixed.is_empty() {
        if list == "none" || list.is_empty() {
            return Ok(());
        }
        return Err(Error::usage(format!(
            "{}: every node is edgecache; --peers does not apply",
            cli.experiment
        )));
    }
    let mut asked: Vec<&str> = list.split(',').map(str::trim).collect();
    asked.sort_unstable();
    asked.dedup();
    let mut want = fixed.to_vec();
    want.sort_unstable();
    if asked == want {
        return Ok(());
    }
    Err(Error::usage(format!(
        "{}: edgecache always runs next to {} in this experiment; --peers {list:?} does not apply",
        cli.experiment,
        fixed.join(" and ")
    )))
}

/// The command that runs a scripted experiment (not started).
pub fn command(cli: &Cli, bench_dir: &Path, script: &str, quick: &[&str]) -> Result<Command> {
    let entry = SCRIPTED.iter().find(|s| s.script == script);
    check_peers(cli, entry)?;
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
    if let Some(n) = cli
        .repetitions
        .filter(|_| entry.is_some_and(|e| e.repetitions))
    {
        if n == 0 {
            return Err(Error::usage("--repetitions: must be at least 1"));
        }
        cmd.arg("--repetitions").arg(n.to_string());
    }
    if let Some(c) = cli
        .cpus
        .as_deref()
        .filter(|_| entry.is_some_and(|e| e.cpus))
    {
        cmd.arg("--cpus").arg(c);
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

    fn bench_dir() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench"))
    }

    /// A directory holding stand-ins for the binaries (`--bin-dir`).
    fn stand_ins() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for b in ["edgecache", "edgeorigin", "edgeload"] {
            let p = dir.path().join(b);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    fn args(cmd: &Command) -> Vec<&str> {
        cmd.get_args().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn tier_maps_its_flags_onto_the_script() {
        let bench = bench_dir();
        assert!(bench.join("tier.py").is_file());
        let (script, quick) = lookup("tier").unwrap();
        assert!(lookup("hits").is_none());
        let dir = stand_ins();
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

    #[test]
    fn limits_maps_its_flags_onto_the_script() {
        let bench = bench_dir();
        assert!(bench.join("limits.py").is_file());
        let (script, quick) = lookup("limits").unwrap();
        assert_eq!((script, quick), ("limits.py", &["--quick"][..]));
        assert!(names().any(|n| n == "limits"));
        let dir = stand_ins();
        let d = dir.path().to_str().unwrap();
        let cli = Cli::parse_from([
            "edgebench",
            "limits",
            "--duration",
            "10s",
            "--reps",
            "5",
            "--cpus",
            "0-1:2",
            "--out",
            "/tmp/r",
            "--bin-dir",
            d,
        ]);
        let cmd = command(&cli, bench, script, quick).unwrap();
        let a = args(&cmd);
        assert!(a[0].ends_with("bench/limits.py"));
        assert_eq!(
            &a[1..],
            [
                "--seconds",
                "10",
                "--repetitions",
                "5",
                "--cpus",
                "0-1:2",
                "--out",
                "/tmp/r"
            ]
        );
        let full = Cli::parse_from(["edgebench", "limits", "--quick", "--bin-dir", d]);
        let cmd = command(&full, bench, script, quick).unwrap();
        assert_eq!(&args(&cmd)[1..], ["--quick", "--out", "docs/results"]);
        for bad in ["none", "varnish"] {
            let c = Cli::parse_from(["edgebench", "limits", "--peers", bad, "--bin-dir", d]);
            assert_eq!(
                command(&c, bench, script, quick).unwrap_err().exit_code(),
                2
            );
        }
        // tls takes no --cpus: edgebench's is not passed on.
        let (tls, tls_quick) = lookup("tls").unwrap();
        let t = Cli::parse_from(["edgebench", "tls", "--cpus", "0:1", "--bin-dir", d]);
        let cmd = command(&t, bench, tls, tls_quick).unwrap();
        assert!(!args(&cmd).contains(&"--cpus"));
    }

    #[test]
    fn video_maps_its_flags_onto_the_script() {
        let bench = bench_dir();
        assert!(bench.join("video.py").is_file());
        let (script, quick) = lookup("video").unwrap();
        assert_eq!((script, quick), ("video.py", &["--quick"][..]));
        assert!(names().any(|n| n == "video"));
        let dir = stand_ins();
        let d = dir.path().to_str().unwrap();
        let cli = Cli::parse_from([
            "edgebench",
            "video",
            "--quick",
            "--duration",
            "5s",
            "--reps",
            "2",
            "--cpus",
            "0:1",
            "--peers",
            "nginx",
            "--keep",
            "--out",
            "/tmp/r",
            "--bin-dir",
            d,
        ]);
        let cmd = command(&cli, bench, script, quick).unwrap();
        let a = args(&cmd);
        assert!(a[0].ends_with("bench/video.py"));
        assert_eq!(
            &a[1..],
            [
                "--quick",
                "--seconds",
                "5",
                "--repetitions",
                "2",
                "--cpus",
                "0:1",
                "--keep",
                "--out",
                "/tmp/r"
            ]
        );
        let full = Cli::parse_from(["edgebench", "video", "--bin-dir", d]);
        let cmd = command(&full, bench, script, quick).unwrap();
        assert_eq!(&args(&cmd)[1..], ["--out", "docs/results"]);
        // nginx's slice module is the comparison: no other peer, and not none.
        for bad in ["none", "varnish", "nginx,ats"] {
            let c = Cli::parse_from(["edgebench", "video", "--peers", bad, "--bin-dir", d]);
            assert_eq!(
                command(&c, bench, script, quick).unwrap_err().exit_code(),
                2,
                "--peers {bad:?}"
            );
        }
    }

    #[test]
    fn tls_maps_its_flags_onto_the_script() {
        let bench = bench_dir();
        assert!(bench.join("tls.py").is_file());
        let (script, quick) = lookup("tls").unwrap();
        assert_eq!((script, quick), ("tls.py", &["--quick"][..]));
        assert!(names().any(|n| n == "tls"));
        let dir = stand_ins();
        let d = dir.path().to_str().unwrap();
        let cli = Cli::parse_from([
            "edgebench",
            "tls",
            "--quick",
            "--duration",
            "3s",
            "--repetitions",
            "2",
            "--keep",
            "--out",
            "/tmp/r",
            "--bin-dir",
            d,
        ]);
        let cmd = command(&cli, bench, script, quick).unwrap();
        let a = args(&cmd);
        assert!(a[0].ends_with("bench/tls.py"));
        assert_eq!(
            &a[1..],
            [
                "--quick",
                "--seconds",
                "3",
                "--repetitions",
                "2",
                "--keep",
                "--out",
                "/tmp/r"
            ]
        );
        assert_eq!(
            cmd.get_envs().collect::<Vec<_>>(),
            [(
                std::ffi::OsStr::new("EDGEBENCH_BIN_DIR"),
                Some(dir.path().as_os_str())
            )]
        );
        // A full run: the script's defaults.
        let full = Cli::parse_from(["edgebench", "tls", "--bin-dir", d]);
        let cmd = command(&full, bench, script, quick).unwrap();
        assert_eq!(&args(&cmd)[1..], ["--out", "docs/results"]);
        // nginx is always in the run: --peers may say so, not ask for anything else.
        for ok in ["nginx", "nginx,nginx", " nginx "] {
            let c = Cli::parse_from(["edgebench", "tls", "--peers", ok, "--bin-dir", d]);
            assert!(command(&c, bench, script, quick).is_ok(), "--peers {ok:?}");
        }
        for bad in ["none", "", "varnish", "nginx,ats"] {
            let c = Cli::parse_from(["edgebench", "tls", "--peers", bad, "--bin-dir", d]);
            let e = command(&c, bench, script, quick).unwrap_err();
            assert_eq!(e.exit_code(), 2, "--peers {bad:?}");
        }
        let zero = Cli::parse_from(["edgebench", "tls", "--repetitions", "0", "--bin-dir", d]);
        assert_eq!(
            command(&zero, bench, script, quick)
                .unwrap_err()
                .exit_code(),
            2
        );
        // tier takes no --repetitions: edgebench's is not passed on.
        let (tier, tier_quick) = lookup("tier").unwrap();
        let t = Cli::parse_from(["edgebench", "tier", "--repetitions", "2", "--bin-dir", d]);
        let cmd = command(&t, bench, tier, tier_quick).unwrap();
        assert!(!args(&cmd).contains(&"--repetitions"));
    }

    #[test]
    fn h3_maps_its_flags_onto_the_script() {
        let bench = bench_dir();
        assert!(bench.join("h3.py").is_file());
        let (script, quick) = lookup("h3").unwrap();
        assert_eq!((script, quick), ("h3.py", &["--quick"][..]));
        assert!(names().any(|n| n == "h3"));
        let dir = stand_ins();
        let d = dir.path().to_str().unwrap();
        let cli = Cli::parse_from([
            "edgebench",
            "h3",
            "--quick",
            "--duration",
            "4s",
            "--reps",
            "2",
            "--cpus",
            "0:1",
            "--keep",
            "--out",
            "/tmp/r",
            "--bin-dir",
            d,
        ]);
        let cmd = command(&cli, bench, script, quick).unwrap();
        let a = args(&cmd);
        assert!(a[0].ends_with("bench/h3.py"));
        // h3 pins CPU 0 and CPU 1 itself, as tls: edgebench's --cpus is not passed on.
        assert_eq!(
            &a[1..],
            [
                "--quick",
                "--seconds",
                "4",
                "--repetitions",
                "2",
                "--keep",
                "--out",
                "/tmp/r"
            ]
        );
        assert_eq!(
            cmd.get_envs().collect::<Vec<_>>(),
            [(
                std::ffi::OsStr::new("EDGEBENCH_BIN_DIR"),
                Some(dir.path().as_os_str())
            )]
        );
        let full = Cli::parse_from(["edgebench", "h3", "--bin-dir", d]);
        let cmd = command(&full, bench, script, quick).unwrap();
        assert_eq!(&args(&cmd)[1..], ["--out", "docs/results"]);
        // Caddy is always the comparison: --peers may say so, not ask for anything else.
        for ok in ["caddy", " caddy ", "caddy,caddy"] {
            let c = Cli::parse_from(["edgebench", "h3", "--peers", ok, "--bin-dir", d]);
            assert!(command(&c, bench, script, quick).is_ok(), "--peers {ok:?}");
        }
        for bad in ["none", "", "nginx", "caddy,nginx"] {
            let c = Cli::parse_from(["edgebench", "h3", "--peers", bad, "--bin-dir", d]);
            assert_eq!(
                command(&c, bench, script, quick).unwrap_err().exit_code(),
                2,
                "--peers {bad:?}"
            );
        }
        let zero = Cli::parse_from(["edgebench", "h3", "--repetitions", "0", "--bin-dir", d]);
        assert_eq!(
            command(&zero, bench, script, quick)
                .unwrap_err()
                .exit_code(),
            2
        );
    }
}
