//! The report: `<out>/<experiment>.md` with the machine, the exact command, a table per
//! workload and the plots; `<experiment>-{rps,cpu,latency}.svg`; and `<experiment>.json`
//! with every raw cell.
//!
//! How it fits: [`write`] is the last step of a run and only reads [`Results`]. Every
//! figure is median (min–max) over the repetitions. The ratio columns compare each row
//! with the best *peer* of the same workload (highest req/s, lowest CPU per request),
//! so the edgecache row reads directly as "edgecache ÷ best peer".

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Context, Result};
use crate::load::PERCENTILES;
use crate::runner::{Cell, Results, ServerState};
use crate::servers::ServerKind;
use crate::stats::Summary;
use crate::svg::{self, BarPanel, LinePanel};

/// The figures of one (workload, server) row.
#[derive(Debug, Clone)]
pub struct Row {
    pub server: String,
    pub kind: ServerKind,
    pub rps: Option<Summary>,
    pub mbps: Option<Summary>,
    pub p50: Option<Summary>,
    pub p99: Option<Summary>,
    pub cpu: Option<Summary>,
    pub rss_mib: Option<Summary>,
    pub origin: Option<u64>,
    pub errors: u64,
    pub requests: u64,
}

fn summarize(cells: &[&Cell], f: impl Fn(&Cell) -> Option<f64>) -> Option<Summary> {
    Summary::of(cells.iter().filter_map(|c| f(c)))
}

/// One row per server that ran, for workload `w`.
pub fn rows(res: &Results, w: &str) -> Vec<Row> {
    res.ran()
        .into_iter()
        .map(|s| {
            let cells: Vec<&Cell> = res.cells_for(w, &s.name).collect();
            Row {
                server: s.name.clone(),
                kind: s.kind,
                rps: summarize(&cells, |c| Some(c.load.rps)),
                mbps: summarize(&cells, |c| Some(c.load.mb_per_s())),
                p50: summarize(&cells, |c| c.load.pct("p50")),
                p99: summarize(&cells, |c| c.load.pct("p99")),
                cpu: summarize(&cells, |c| {
                    (c.load.requests > 0).then_some(c.cpu_us_per_req)
                }),
                rss_mib: summarize(&cells, |c| Some(c.rss_bytes as f64 / (1024.0 * 1024.0))),
                origin: cells.iter().map(|c| c.origin_requests).sum(),
                errors: cells.iter().map(|c| c.load.errors).sum(),
                requests: cells.iter().map(|c| c.load.requests).sum(),
            }
        })
        .collect()
}

/// The best peer's (name, median): highest for req/s, lowest for CPU.
fn best_peer(
    rows: &[Row],
    f: impl Fn(&Row) -> Option<Summary>,
    higher_is_better: bool,
) -> Option<(String, f64)> {
    rows.iter()
        .filter(|r| r.kind != ServerKind::Edgecache)
        .filter_map(|r| f(r).map(|s| (r.server.clone(), s.median)))
        .filter(|(_, v)| *v > 0.0)
        .reduce(|a, b| {
            if (b.1 > a.1) == higher_is_better {
                b
            } else {
                a
            }
        })
}

fn fig(s: Option<Summary>, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.n == 1 => format!("{:.*}", digits, s.median),
        Some(s) => format!(
            "{:.*} ({:.*}–{:.*})",
            digits, s.median, digits, s.min, digits, s.max
        ),
    }
}

fn ratio(v: Option<Summary>, best: &Option<(String, f64)>) -> String {
    match (v, best) {
        (Some(v), Some((_, b))) if *b > 0.0 => format!("{:.2}×", v.median / b),
        _ => "–".into(),
    }
}

fn cache_cell(res: &Results, w: &str, row: &Row) -> String {
    let probe = res
        .probe(w, &row.server)
        .and_then(|p| p.cache_status.clone());
    let header = probe.unwrap_or_else(|| "no header".into());
    match row.origin {
        Some(o) => format!("{header}, origin {o}"),
        None => header,
    }
}

/// True when the row's probe said HIT and its cells sent (almost) nothing to the origin.
fn hit_verified(res: &Results, w: &str, row: &Row) -> bool {
    let probe_hit = res
        .probe(w, &row.server)
        .and_then(|p| p.cache_status.as_deref())
        == Some("HIT");
    let origin_ok = row
        .origin
        .is_none_or(|o| o as f64 <= 10.0 + row.requests as f64 * 0.01);
    probe_hit && origin_ok
}

fn fmt_duration(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

/// The Markdown text (plots referenced by file name, next to it).
pub fn markdown(res: &Results, svg_names: &[(String, String)]) -> String {
    let p = &res.plan;
    let mut m = String::new();
    let _ = writeln!(m, "# {}\n", p.title);
    if !p.description.trim().is_empty() {
        let _ = writeln!(m, "{}\n", p.description.trim());
    }
    let _ = writeln!(
        m,
        "Produced by this command, on {} ({:.0} s in all):\n",
        res.date, res.elapsed_s
    );
    let _ = writeln!(m, "```sh\n{}\n```\n", res.command);
    if p.quick {
        let _ = writeln!(m, "**Quick run** (`--quick`): a reduced matrix to prove the runner works; not for conclusions.\n");
    }

    let _ = writeln!(m, "## Headline\n");
    let mut any = false;
    for w in &p.workloads {
        let rows = rows(res, &w.name);
        let best_rps = best_peer(&rows, |r| r.rps, true);
        let best_cpu = best_peer(&rows, |r| r.cpu, false);
        for r in rows.iter().filter(|r| r.kind == ServerKind::Edgecache) {
            if let (Some(v), Some((bn, b))) = (r.rps, &best_rps) {
                any = true;
                let cpu = match (r.cpu, &best_cpu) {
                    (Some(c), Some((cn, cb))) => {
                        format!("; CPU per request {:.2}× of {cn}'s", c.median / cb)
                    }
                    _ => String::new(),
                };
                let caveat = if hit_verified(res, &w.name, r) {
                    ""
                } else {
                    " **Not verified as cache hits** (see Warnings): this row may measure the proxy path."
                };
                let _ = writeln!(
                    m,
                    "- **{}**, {}: {:.2}× the req/s of the best peer ({bn}){cpu}.{caveat}",
                    w.label,
                    r.server,
                    v.median / b
                );
            }
        }
    }
    if !any {
        let _ = writeln!(
            m,
            "No peer ran, so there is no ratio: this run only shows edgecache's own figures."
        );
    }
    let _ = writeln!(m);
    let _ = writeln!(
        m,
        "Ratios come from servers measured side by side in this one run, alternating (A B A B) on the same pinned CPU. \
         The machine may be shared and noisy: compare ratios, not absolute figures, and look at the min–max spread.\n"
    );

    let _ = writeln!(m, "## Machine\n");
    let mc = &res.machine;
    let _ = writeln!(m, "| | |\n|---|---|");
    let _ = writeln!(
        m,
        "| CPU | {} ({} online, allowed {:?}) |",
        mc.cpu_model, mc.online_cpus, mc.allowed_cpus
    );
    let _ = writeln!(m, "| Kernel | {} |", mc.kernel);
    let _ = writeln!(m, "| Memory | {} GiB |", mc.memory_gib);
    let _ = writeln!(
        m,
        "| Disks | {} |",
        if mc.disks.is_empty() {
            "unknown".into()
        } else {
            mc.disks.join("; ")
        }
    );
    let _ = writeln!(m, "| Root filesystem | {} |", mc.root_fs);
    let _ = writeln!(m, "| Pinning | {} |", res.cpus);
    let _ = writeln!(m, "| Load generator | {} |", res.loadgen);
    let _ = writeln!(
        m,
        "| Matrix | {} workloads × {} servers × {} repetitions; per-cell warm-up load {} |\n",
        p.workloads.len(),
        res.ran().len(),
        p.repetitions,
        fmt_duration(p.warmup.as_secs_f64())
    );

    let _ = writeln!(m, "## Servers\n");
    for s in &res.servers {
        let v = s
            .version
            .clone()
            .map(|v| format!(" — `{v}`"))
            .unwrap_or_default();
        match &s.state {
            ServerState::Ran => {
                let _ = writeln!(m, "- **{}** ({}){v}", s.name, s.kind.name());
            }
            ServerState::Missing(why) => {
                let _ = writeln!(m, "- **{}**: not run — {why}", s.name);
            }
            ServerState::Failed(why) => {
                let _ = writeln!(
                    m,
                    "- **{}**: failed to start, not run:\n\n```\n{}\n```",
                    s.name, why
                );
            }
        }
    }
    let _ = writeln!(m, "\nConfigs: `bench/peers/` templates with the variables set in `bench/experiments/{}.toml`.\n", p.name);

    let _ = writeln!(m, "## Results\n");
    let _ = writeln!(
        m,
        "Each figure is the median (min–max) over {} repetition(s). \"vs best peer\" divides this row's median by the best peer's \
         (highest req/s; lowest CPU per request). CPU is the server's user+system time (all processes and threads, from /proc) \
         divided by the requests served. \"cache\" is the `X-Cache-Status` of a probe after warm-up and the requests the origin \
         saw during the measured cells.\n",
        p.repetitions
    );
    for w in &p.workloads {
        let rows = rows(res, &w.name);
        let best_rps = best_peer(&rows, |r| r.rps, true);
        let best_cpu = best_peer(&rows, |r| r.cpu, false);
        let ka = if w.keepalive {
            "keep-alive"
        } else {
            "a new connection per request"
        };
        let rate = w
            .rate
            .map(|r| format!(", open loop at {r} req/s"))
            .unwrap_or_default();
        let _ = writeln!(
            m,
            "### {} (`{}`)\n\n{} connections, {} load thread(s), {ka}{rate}, {} path(s), {} cells.\n",
            w.label,
            w.name,
            w.connections,
            w.threads,
            w.paths.len(),
            fmt_duration(w.duration.as_secs_f64())
        );
        let _ = writeln!(
            m,
            "| server | req/s | MB/s | p50 µs | p99 µs | CPU µs/req | RSS MiB | errors | cache | req/s vs best peer | CPU/req vs best peer |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &rows {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.server,
                fig(r.rps, 0),
                fig(r.mbps, 1),
                fig(r.p50, 0),
                fig(r.p99, 0),
                fig(r.cpu, 1),
                fig(r.rss_mib, 0),
                r.errors,
                cache_cell(res, &w.name, r),
                ratio(r.rps, &best_rps),
                ratio(r.cpu, &best_cpu),
            );
        }
        let _ = writeln!(m);
    }

    if !svg_names.is_empty() {
        let _ = writeln!(m, "## Plots\n");
        for (file, alt) in svg_names {
            let _ = writeln!(m, "![{alt}]({file})\n");
        }
    }

    let _ = writeln!(m, "## Warnings\n");
    if res.warnings.is_empty() {
        let _ = writeln!(m, "None: every cell completed, every hit probe said HIT, and no hit cell reached the origin.\n");
    } else {
        for w in &res.warnings {
            let _ = writeln!(m, "- {}", w.replace('\n', " "));
        }
        let _ = writeln!(m);
    }

    let _ = writeln!(m, "## Reproduce\n");
    let _ = writeln!(
        m,
        "```sh\nsudo bench/peers/install.sh          # nginx, varnish, trafficserver, wrk (from Debian)\n\
         cargo build --release -p edgecache -p edgeorigin -p edgeload -p edgebench\n{}\n```\n",
        res.command
    );
    let _ = writeln!(
        m,
        "Raw per-cell data: [`{0}.json`]({0}.json). Guide: `docs/edgebench.md`.",
        p.name
    );
    m
}

/// The three plots as (file name, alt text, SVG text).
pub fn plots(res: &Results) -> Vec<(String, String, String)> {
    let p = &res.plan;
    let series: Vec<String> = res.ran().iter().map(|s| s.name.clone()).collect();
    let per_workload = |f: &dyn Fn(&Row) -> Option<Summary>| -> Vec<BarPanel> {
        p.workloads
            .iter()
            .map(|w| BarPanel {
                title: w.label.clone(),
                values: rows(res, &w.name).iter().map(f).collect(),
            })
            .collect()
    };
    let rps = svg::bar_chart(
        &format!("{}: requests per second (median, min–max)", p.name),
        "req/s",
        &series,
        &per_workload(&|r| r.rps),
    );
    let cpu = svg::bar_chart(
        &format!(
            "{}: server CPU per request (median, min–max; lower is better)",
            p.name
        ),
        "CPU µs / request",
        &series,
        &per_workload(&|r| r.cpu),
    );
    let x: Vec<String> = PERCENTILES
        .iter()
        .map(|s| s.trim_start_matches('p').to_string() + "%")
        .collect();
    let lat_panels: Vec<LinePanel> = p
        .workloads
        .iter()
        .map(|w| LinePanel {
            title: w.label.clone(),
            lines: res
                .ran()
                .iter()
                .map(|s| {
                    let cells: Vec<&Cell> = res.cells_for(&w.name, &s.name).collect();
                    PERCENTILES
                        .iter()
                        .map(|pc| summarize(&cells, |c| c.load.pct(pc)).map(|s| s.median))
                        .collect()
                })
                .collect(),
        })
        .collect();
    let lat = svg::log_line_chart(
        &format!(
            "{}: latency percentiles (median over repetitions, log scale)",
            p.name
        ),
        "latency µs",
        &series,
        &x,
        &lat_panels,
    );
    vec![
        (
            format!("{}-rps.svg", p.name),
            "requests per second by workload and server".into(),
            rps,
        ),
        (
            format!("{}-cpu.svg", p.name),
            "server CPU per request".into(),
            cpu,
        ),
        (
            format!("{}-latency.svg", p.name),
            "latency percentiles".into(),
            lat,
        ),
    ]
}

/// Writes the report, plots and raw JSON into `out`; returns the Markdown path.
pub fn write(res: &Results, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).ctx(format!("creating {}", out.display()))?;
    let plots = plots(res);
    for (name, _, text) in &plots {
        let p = out.join(name);
        std::fs::write(&p, text).ctx(format!("writing {}", p.display()))?;
    }
    let names: Vec<(String, String)> = plots
        .iter()
        .map(|(n, a, _)| (n.clone(), a.clone()))
        .collect();
    let md = out.join(format!("{}.md", res.plan.name));
    std::fs::write(&md, markdown(res, &names)).ctx(format!("writing {}", md.display()))?;
    let json = out.join(format!("{}.json", res.plan.name));
    let text = serde_json::to_string_pretty(res)
        .map_err(|e| crate::error::Error::runtime(e.to_string()))?;
    std::fs::write(&json, text).ctx(format!("writing {}", json.display()))?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{Experiment, PlanOptions};
    use crate::load::LoadResult;
    use crate::machine::Machine;
    use crate::runner::{Probe, ServerStatus};

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
                    cpu_us_per_req: cpu,
                    rss_bytes: 10 << 20,
                    origin_requests: Some(0),
                });
            }
        }
        let status = |n: &str, k, state| ServerStatus {
            name: n.into(),
            kind: k,
            state,
            version: None,
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
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap())
                .unwrap();
        assert_eq!(j["cells"].as_array().unwrap().len(), 6);
    }
}
