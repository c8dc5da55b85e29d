//! `edgebench hits --quick` end to end, with the real edgeorigin, edgecache and edgeload
//! (found next to edgebench in target/<profile>/; `./test` builds them first).
//!
//! What CI proves with this: the runner starts everything, completes every cell, writes a
//! report with a row per cell and well-formed plots, and that traffic really went through
//! the origin. Speed is never asserted: the machine is shared and noisy.

use std::path::Path;
use std::process::Command;

use edge_testkit::bin;

fn bench_dir() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench")
        .display()
        .to_string()
}

fn run(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(bin("edgebench"));
    cmd.args(["hits", "--quick", "--out"])
        .arg(out)
        .args(["--bench-dir", &bench_dir()])
        .args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run edgebench");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn section<'a>(md: &'a str, heading: &str) -> &'a str {
    let start = md
        .find(heading)
        .unwrap_or_else(|| panic!("no section {heading:?} in:\n{md}"));
    let rest = &md[start + heading.len()..];
    &rest[..rest
        .find("\n###")
        .or_else(|| rest.find("\n## "))
        .unwrap_or(rest.len())]
}

#[test]
fn quick_hits_completes_and_reports_every_cell() {
    let out = tempfile::tempdir().unwrap();
    let (code, stderr) = run(out.path(), &[], &[]);
    assert_eq!(code, 0, "edgebench failed:\n{stderr}");

    let md = std::fs::read_to_string(out.path().join("hits.md")).expect("hits.md written");
    assert!(
        md.contains("edgebench hits --quick"),
        "the exact command is recorded:\n{md}"
    );
    assert!(
        md.contains("## Machine") && md.contains("| CPU |"),
        "machine description:\n{md}"
    );
    // hits.toml reads the large-body bytes by method from edgecache's /metrics.
    assert!(
        md.contains("| server | method=\"mapped\" | method=\"sendfile\" |"),
        "the metrics table:\n{md}"
    );
    // The quick matrix: edgecache alone, 1 KiB and 100 KiB, one repetition.
    for heading in ["### 1 KiB (`1k`)", "### 100 KiB (`100k`)"] {
        let s = section(&md, heading);
        // The results table, not the server metrics table under it.
        let table = s.split("Server metrics").next().unwrap_or(s);
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("| edgecache |"))
            .collect();
        assert_eq!(rows.len(), 1, "one edgecache row under {heading}:\n{s}");
        let cols: Vec<&str> = rows[0].split('|').map(str::trim).collect();
        // | server | req/s | MB/s | p50 | p99 | CPU µs/req | ...
        for (i, name) in [
            (2, "req/s"),
            (3, "MB/s"),
            (4, "p50"),
            (5, "p99"),
            (6, "CPU"),
        ] {
            assert!(
                cols[i].parse::<f64>().is_ok(),
                "{name} is a figure in {}",
                rows[0]
            );
        }
    }
    for f in ["hits-rps.svg", "hits-cpu.svg", "hits-latency.svg"] {
        let svg =
            std::fs::read_to_string(out.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{f} is not an SVG document"
        );
        assert_eq!(
            svg.matches("<text").count(),
            svg.matches("</text>").count(),
            "{f}: unbalanced <text>"
        );
        assert!(md.contains(&format!("]({f})")), "report links {f}");
    }

    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("hits.json")).unwrap())
            .unwrap();
    let cells = raw["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "2 workloads × 1 server × 1 repetition");
    for c in cells {
        assert!(
            c["load"]["requests"].as_u64().unwrap() > 0,
            "a cell served nothing: {c}"
        );
        assert!(c["server_cpu_s"].as_f64().unwrap() >= 0.0);
        assert!(
            c["rss_bytes"].as_u64().unwrap() > 0,
            "RSS of the server was read: {c}"
        );
    }
    // Warm-up fetched every path through edgecache, so the origin must have seen them.
    let origin = raw["origin_total_requests"]
        .as_u64()
        .expect("origin /stats read");
    assert!(
        origin >= 200,
        "the origin saw {origin} requests; warm-up alone fetches 2 × 100 paths"
    );
}

/// A peer that is not installed is reported as missing, and the run still succeeds.
#[test]
fn a_missing_peer_is_reported_not_fatal() {
    let out = tempfile::tempdir().unwrap();
    let (code, stderr) = run(
        out.path(),
        &["--peers", "ats", "--duration", "1s"],
        &[("EDGEBENCH_TRAFFIC_SERVER", "/nonexistent/traffic_server")],
    );
    assert_eq!(code, 0, "edgebench failed:\n{stderr}");
    assert!(
        stderr.contains("peer \"ats\" skipped: ats not installed"),
        "{stderr}"
    );
    let md = std::fs::read_to_string(out.path().join("hits.md")).unwrap();
    assert!(md.contains("**ats**: not run — ats not installed"), "{md}");
    assert!(
        !md.contains("| ats |"),
        "no row for a server that did not run:\n{md}"
    );
}

/// Two edgecache builds in one run: a row whose `program` names another binary (here a
/// wrapper that leaves a mark, then runs the same edgecache) runs that binary.
#[test]
fn a_row_with_its_own_program_runs_that_binary() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let wrapper = dir.path().join("other-edgecache");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            mark.display(),
            bin("edgecache").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exp = dir.path().join("two-builds.toml");
    std::fs::write(
        &exp,
        r#"name = "two-builds"
title = "Two builds"
repetitions = 1
duration = "1s"
[origin]
args = ["--sizes", "1k", "--count", "10", "--max-age", "3600"]
[[server]]
name = "edgecache"
kind = "edgecache"
[[server]]
name = "edgecache other build"
kind = "edgecache"
program = "${EDGEBENCH_TEST_OTHER_BUILD}"
[[workload]]
name = "1k"
urls = [{ path = "/obj/1k/{id}", ids = 10 }]
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let edgebench = |env: &[(&str, &std::path::Path)]| {
        let mut cmd = Command::new(bin("edgebench"));
        cmd.arg(&exp)
            .args(["--peers", "none", "--bench-dir", &bench_dir(), "--out"])
            .arg(&out);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run edgebench")
    };
    let o = edgebench(&[("EDGEBENCH_TEST_OTHER_BUILD", &wrapper)]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "edgebench failed:\n{stderr}");
    let md = std::fs::read_to_string(out.join("two-builds.md")).unwrap();
    for row in ["| edgecache |", "| edgecache other build |"] {
        assert!(md.contains(row), "a row {row} in:\n{md}");
    }
    let ran = std::fs::read_to_string(&mark).expect("the other build was started");
    assert!(ran.contains("-c "), "started with its config: {ran}");
    assert!(
        md.contains(&format!("(edgecache, `{}`)", wrapper.display())),
        "the report names the other build's binary:\n{md}"
    );

    // A program that is not there stops the run before anything starts.
    let o = edgebench(&[(
        "EDGEBENCH_TEST_OTHER_BUILD",
        &dir.path().join("no-such-edgecache"),
    )]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr.contains("no-such-edgecache not found"), "{stderr}");
}

#[test]
fn an_unknown_experiment_is_a_usage_error() {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(bin("edgebench"))
        .args(["no-such-experiment", "--bench-dir", &bench_dir(), "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown experiment") && err.contains("hits"),
        "{err}"
    );
}
