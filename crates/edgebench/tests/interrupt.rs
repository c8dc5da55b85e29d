//! Ctrl-C stops everything edgebench started. Runs in its own test process because the
//! interrupt flag is process-global.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use edge_testkit::bin;

/// The handler turns a real signal into the flag instead of killing the process.
/// (SIGHUP, not SIGINT, so a developer's Ctrl-C still stops `cargo test`.)
#[test]
fn a_signal_sets_the_flag() {
    edgebench::interrupt::install().unwrap();
    assert!(!edgebench::interrupt::interrupted());
    // SAFETY: raise() signals this thread; the installed handler only stores an atomic.
    assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
    assert!(edgebench::interrupt::interrupted());
    assert!(edgebench::interrupt::check().is_err());
    assert!(edgebench::interrupt::sleep(Duration::from_secs(5)).is_err());
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn sigint_mid_run_stops_every_child_and_exits_130() {
    let out = tempfile::tempdir().unwrap();
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    let mut child = Command::new(bin("edgebench"))
        .args(["hits", "--quick", "--duration", "60s", "--bench-dir"])
        .arg(&bench)
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the load generator runs: origin, server and load are all up then.
    let start = Instant::now();
    let tree = loop {
        let t: Vec<u32> = edgebench::procstat::tree(pid)
            .into_iter()
            .filter(|&p| p != pid)
            .collect();
        if t.iter().any(|&p| comm(p) == "edgeload") {
            break t;
        }
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("edgebench exited early ({st}):\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "edgeload never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let names: Vec<String> = tree.iter().map(|&p| comm(p)).collect();
    assert!(
        names.iter().any(|n| n == "edgeorigin") && names.iter().any(|n| n == "edgecache"),
        "{names:?}"
    );

    // SAFETY: kill(2) on the child we spawned.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "edgebench ignored SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let start = Instant::now();
    for p in tree {
        while alive(p) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "pid {p} survived edgebench's Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(
        !out.path().join("hits.md").exists(),
        "an interrupted run writes no report"
    );
}
