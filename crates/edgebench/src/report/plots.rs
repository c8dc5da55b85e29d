//! The report's plots as SVG: req/s, CPU per request and latency percentiles per
//! workload and server, and MB/s and the hot probe's p99 when a workload has a probe.

use super::rows::{rows, summarize, Row};
use crate::load::PERCENTILES;
use crate::runner::{Cell, Results};
use crate::stats::Summary;
use crate::svg::{self, BarPanel, LinePanel};

/// The plots as (file name, alt text, SVG text): req/s, CPU, latency, and the hot
/// probe's p99 when a workload has a probe.
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
    let mut out = Vec::new();
    if p.workloads.iter().any(|w| w.probe.is_some()) {
        let mbps = svg::bar_chart(
            &format!("{}: MB/s (median, min–max)", p.name),
            "MB/s",
            &series,
            &per_workload(&|r| r.mbps),
        );
        out.push((
            format!("{}-mbps.svg", p.name),
            "MB/s by workload and server".to_string(),
            mbps,
        ));
        let hot = svg::bar_chart(
            &format!(
                "{}: hot-probe p99 latency during the load (median, min–max; lower is better)",
                p.name
            ),
            "hot p99 µs",
            &series,
            &per_workload(&|r| r.hot_p99),
        );
        out.push((
            format!("{}-hot.svg", p.name),
            "hot-probe p99 latency".to_string(),
            hot,
        ));
    }
    let mut base = vec![
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
    ];
    base.append(&mut out);
    base
}
