//! The report's figures, targets, Markdown and plots on made-up results.

use super::markdown::ratio;
use super::rows::best_peer;
use super::*;
use crate::experiment::Expect;
use crate::experiment::{Experiment, PlanOptions};
use crate::load::LoadResult;
use crate::machine::Machine;
use crate::runner::{Cell, Probe, ServerState, ServerStatus};
use crate::servers::ServerKind;

fn results() -> Results {
    let exp = Experiment::parse(
        r#"name = "t"
title = "T"
duration = "1s"
repetitions = 2
[[server]]
name = "edgecache"
kind = "edgecache"
[[server]]
name = "nginx"
kind = "nginx"
[[server]]
name = "varnish"
kind = "varnish"
[[server]]
name = "ats"
kind = "ats"
[[workload]]
name = "1k"
label = "1 KiB"
urls = [{ path = "/obj/1k/1" }]
"#,
    )
    .unwrap();
    let plan = exp.plan(&PlanOptions::default()).unwrap();
    let mut cells = Vec::new();
    for (server, rps, cpu) in [
        ("edgecache", 90.0, 12.0),
        ("nginx", 60.0, 16.0),
        ("varnish", 45.0, 24.0),
    ] {
        for rep in 0..2 {
            let mut latency_us = std::collections::BTreeMap::new();
            latency_us.insert("p50".to_string(), 100.0 + rep as f64);
            latency_us.insert("p99".to_string(), 900.0);
            cells.push(Cell {
                workload: "1k".into(),
                server: server.into(),
                rep,
                load: LoadResult {
                    requests: 1000,
                    duration_s: 1.0,
                    bytes: 2_000_000,
                    rps: rps + rep as f64,
                    latency_us,
                    ..Default::default()
                },
                server_cpu_s: 0.01,
                server_sys_s: 0.0,
                cpu_us_per_req: cpu,
                rss_bytes: 10 << 20,
                origin_requests: Some(0),
                probe: None,
                metrics: Default::default(),
                cgroup_bytes: None,
            });
        }
    }
    let status = |n: &str, k, state| ServerStatus {
        name: n.into(),
        kind: k,
        state,
        version: None,
        program: None,
    };
    Results {
        plan,
        machine: Machine::describe(),
        command: "edgebench t".into(),
        date: "2026-01-01 00:00:00 UTC".into(),
        cpus: "server 0 · client 1 · origin 1".into(),
        loadgen: "edgeload".into(),
        servers: vec![
            status("edgecache", ServerKind::Edgecache, ServerState::Ran),
            status("nginx", ServerKind::Nginx, ServerState::Ran),
            status("varnish", ServerKind::Varnish, ServerState::Ran),
            status(
                "ats",
                ServerKind::Ats,
                ServerState::Missing("ats not installed".into()),
            ),
        ],
        probes: vec![Probe {
            workload: "1k".into(),
            server: "edgecache".into(),
            cache_status: Some("HIT".into()),
            status: Some(200),
        }],
        cells,
        fio: vec![],
        warnings: vec!["something odd".into()],
        origin_total_requests: Some(3),
        elapsed_s: 12.0,
    }
}

#[test]
fn ratios_compare_with_the_best_peer() {
    let res = results();
    let r = rows(&res, "1k");
    assert_eq!(r.len(), 3, "missing servers get no row");
    let best = best_peer(&r, |r| r.rps, true).unwrap();
    assert_eq!(best, ("nginx".to_string(), 60.5));
    let best_cpu = best_peer(&r, |r| r.cpu, false).unwrap();
    assert_eq!(best_cpu.0, "nginx");
    assert_eq!(ratio(r[0].rps, &Some(best)), "1.50×");
}

#[test]
fn markdown_has_every_section_and_row() {
    let res = results();
    let names = vec![("t-rps.svg".to_string(), "rps".to_string())];
    let md = markdown(&res, &names);
    for needle in [
        "# T",
        "```sh\nedgebench t\n```",
        "## Machine",
        "| edgecache | 90 (90–91) |",
        "| nginx | 60 (60–61) |",
        "1.50×",
        "0.75×",
        "HIT, origin 0",
        "**ats**: not run — ats not installed",
        "![rps](t-rps.svg)",
        "- something odd",
        "1.50× the req/s of the best peer (nginx)",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
}

#[test]
fn a_miss_experiment_flags_rows_that_did_not_reach_the_origin() {
    let mut res = results();
    res.plan.expect = Expect::Miss;
    res.warnings.clear();
    for c in &mut res.cells {
        c.origin_requests = Some(c.load.requests);
    }
    let md = markdown(&res, &[]);
    assert!(!md.contains("Not verified"), "{md}");
    assert!(
        md.contains("every cell's requests reached the origin"),
        "{md}"
    );
    res.cells[0].origin_requests = Some(0);
    assert!(markdown(&res, &[]).contains("Not verified as misses"));
}

#[test]
fn headline_flags_rows_that_were_not_hits() {
    let mut res = results();
    assert!(!markdown(&res, &[]).contains("Not verified as cache hits"));
    res.probes[0].cache_status = None;
    assert!(markdown(&res, &[]).contains("Not verified as cache hits"));
    let mut res = results();
    res.cells[0].origin_requests = Some(1000);
    assert!(
        markdown(&res, &[]).contains("Not verified as cache hits"),
        "origin traffic alone flags it"
    );
}

/// A cold-disk run: probe columns, the disk ceiling, metrics and targets.
fn cold_results() -> Results {
    let exp = Experiment::parse(
        r#"name = "c"
title = "C"
duration = "1s"
drop_caches = true
metrics = ["edgecache_aio_"]
[fio]
[[server]]
name = "edgecache off"
kind = "edgecache"
[[server]]
name = "edgecache auto"
kind = "edgecache"
[[server]]
name = "nginx aio threads"
kind = "nginx"
[[workload]]
name = "256k"
label = "cold 256 KiB"
connections = 64
urls = [{ path = "/obj/256k/{id}", ids = 4096 }]
probe = { connections = 2, rate = 200, urls = [{ path = "/obj/1k/{id}", ids = 8 }] }
[[target]]
label = "best ≥ 1.3× nginx"
workload = "256k"
metric = "mbps"
server = ["edgecache off", "edgecache auto"]
vs = "nginx aio threads"
min = 1.3
[[target]]
label = "hot p99 of the best by MB/s ≤ 0.5× nginx"
workload = "256k"
metric = "hot_p99"
pick_by = "mbps"
server = ["edgecache off", "edgecache auto"]
vs = "nginx aio threads"
max = 0.5
[[target]]
label = "auto ≥ 85% of the disk"
workload = "256k"
metric = "mbps"
server = "edgecache auto"
vs = "fio"
min = 0.85
"#,
    )
    .unwrap();
    let plan = exp.plan(&PlanOptions::default()).unwrap();
    let mut cells = Vec::new();
    // (server, MB/s, hot p99)
    for (server, mbps, hot99) in [
        ("edgecache off", 500.0, 90_000.0),
        ("edgecache auto", 900.0, 2_000.0),
        ("nginx aio threads", 600.0, 8_000.0),
    ] {
        let mut hot = LoadResult {
            requests: 2000,
            duration_s: 10.0,
            ..Default::default()
        };
        hot.latency_us.insert("p50".into(), hot99 / 10.0);
        hot.latency_us.insert("p99".into(), hot99);
        hot.latency_us.insert("p99.9".into(), hot99 * 2.0);
        let mut metrics = std::collections::BTreeMap::new();
        if server.starts_with("edgecache") {
            metrics.insert("edgecache_aio_handoffs_total".to_string(), 1234.0);
            metrics.insert("edgecache_aio_overflows_total".to_string(), 0.0);
        }
        cells.push(Cell {
            workload: "256k".into(),
            server: server.into(),
            rep: 0,
            load: LoadResult {
                requests: 1000,
                duration_s: 1.0,
                bytes: (mbps * 1e6) as u64,
                rps: 1000.0,
                ..Default::default()
            },
            server_cpu_s: 0.01,
            server_sys_s: 0.005,
            cpu_us_per_req: 10.0,
            rss_bytes: 10 << 20,
            origin_requests: Some(0),
            probe: Some(hot),
            metrics,
            cgroup_bytes: Some(150 << 20),
        });
    }
    let mut res = results();
    res.plan = plan;
    res.cells = cells;
    res.servers = ["edgecache off", "edgecache auto", "nginx aio threads"]
        .iter()
        .map(|n| ServerStatus {
            name: n.to_string(),
            kind: if n.starts_with("nginx") {
                ServerKind::Nginx
            } else {
                ServerKind::Edgecache
            },
            state: ServerState::Ran,
            version: None,
            program: None,
        })
        .collect();
    res.probes.clear();
    res.fio = vec![crate::fio::FioResult {
        workload: "256k".into(),
        bs: 256 << 10,
        iodepth: 64,
        ioengine: "io_uring".into(),
        direct: true,
        runtime_s: 10.0,
        mb_per_s: 1000.0,
        iops: 3814.0,
        clat_p50_us: None,
        clat_p99_us: None,
    }];
    res
}

#[test]
fn cold_runs_report_the_probe_the_disk_metrics_and_targets() {
    let res = cold_results();
    let md = markdown(&res, &[]);
    for needle in [
        "hot p50 µs | hot p99 µs | hot p99.9 µs |",
        "| 50 | 200 | 2000 | 4000 |",
        "CPU sys % |",
        "| Cold cache | `sync; echo 3 > /proc/sys/vm/drop_caches` before every measured cell |",
        "Disk ceiling: **1000.0 MB/s** (3814 IOPS) — fio randread, bs 256 KiB, iodepth 64, io_uring, O_DIRECT",
        "| 90% |",
        "hot p99 vs best peer |",
        "0.25×",
        "| server | handoffs_total | overflows_total |",
        "| edgecache auto | 1234 | 0 |",
        "## Targets",
        "edgecache auto 900 ÷ nginx aio threads 600 MB/s = **1.50×** (target ≥ 1.3×) | **met** |",
        "edgecache auto 2000 ÷ nginx aio threads 8000 hot p99 µs = **0.25×** (target ≤ 0.5×) | **met** |",
        "edgecache auto 900 ÷ the disk ceiling (fio io_uring) 1000 MB/s = **0.90×** (target ≥ 0.85×) | **met** |",
        "Hot probe, alongside the main load",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    let names: Vec<String> = plots(&res).into_iter().map(|p| p.0).collect();
    assert!(names.contains(&"c-hot.svg".to_string()), "{names:?}");
    assert!(names.contains(&"c-mbps.svg".to_string()), "{names:?}");
}

#[test]
fn targets_say_missed_and_not_measured() {
    let mut res = cold_results();
    let t = res.plan.targets[0].clone();
    // auto slower: the best of the list is still auto at 700 → 1.17× < 1.3.
    for c in res
        .cells
        .iter_mut()
        .filter(|c| c.server == "edgecache auto")
    {
        c.load.bytes = 700_000_000;
    }
    let o = evaluate(&res, &t);
    assert_eq!(o.met, Some(false), "{}", o.measured);
    assert!(o.measured.contains("1.17×"), "{}", o.measured);
    res.cells.retain(|c| !c.server.starts_with("nginx"));
    let o = evaluate(&res, &t);
    assert_eq!(o.met, None);
    assert!(o.measured.contains("not measured"), "{}", o.measured);
    res.fio.clear();
    let o = evaluate(&res, &res.plan.targets[2].clone());
    assert!(o.measured.contains("no fio result"), "{}", o.measured);
    assert!(markdown(&res, &[]).contains("| not measured |"));
}

#[test]
fn writes_files() {
    let res = results();
    let dir = tempfile::tempdir().unwrap();
    let md = write(&res, dir.path()).unwrap();
    assert!(md.ends_with("t.md"));
    for f in ["t-rps.svg", "t-cpu.svg", "t-latency.svg", "t.json"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap()).unwrap();
    assert_eq!(j["cells"].as_array().unwrap().len(), 6);
}
