//! The figures of a report: one [`Row`] per (workload, server), each the median
//! (min–max) over the repetitions, the best peer of a workload, and a `[[target]]`
//! evaluated against them ([`evaluate`]).

use crate::experiment::{Metric, TargetSpec};
use crate::runner::{Cell, Results};
use crate::servers::ServerKind;
use crate::stats::Summary;

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
    /// Kernel share of the server's CPU time, in percent.
    pub sys_pct: Option<Summary>,
    pub rss_mib: Option<Summary>,
    /// The probe load's latency (hot objects), when the workload has a probe.
    pub hot_p50: Option<Summary>,
    pub hot_p99: Option<Summary>,
    pub hot_p999: Option<Summary>,
    pub origin: Option<u64>,
    pub errors: u64,
    pub requests: u64,
}

pub(super) fn summarize(cells: &[&Cell], f: impl Fn(&Cell) -> Option<f64>) -> Option<Summary> {
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
                sys_pct: summarize(&cells, |c| {
                    (c.server_cpu_s > 0.0).then(|| c.server_sys_s * 100.0 / c.server_cpu_s)
                }),
                rss_mib: summarize(&cells, |c| Some(c.rss_bytes as f64 / (1024.0 * 1024.0))),
                hot_p50: summarize(&cells, |c| c.probe.as_ref().and_then(|p| p.pct("p50"))),
                hot_p99: summarize(&cells, |c| c.probe.as_ref().and_then(|p| p.pct("p99"))),
                hot_p999: summarize(&cells, |c| c.probe.as_ref().and_then(|p| p.pct("p99.9"))),
                origin: cells.iter().map(|c| c.origin_requests).sum(),
                errors: cells.iter().map(|c| c.load.errors).sum(),
                requests: cells.iter().map(|c| c.load.requests).sum(),
            }
        })
        .collect()
}

/// The best peer's (name, median): highest for req/s, lowest for CPU.
pub(super) fn best_peer(
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

impl Row {
    /// The row's figure for a target's metric.
    pub fn metric(&self, m: Metric) -> Option<Summary> {
        match m {
            Metric::Rps => self.rps,
            Metric::Mbps => self.mbps,
            Metric::Cpu => self.cpu,
            Metric::P50 => self.p50,
            Metric::P99 => self.p99,
            Metric::HotP50 => self.hot_p50,
            Metric::HotP99 => self.hot_p99,
            Metric::HotP999 => self.hot_p999,
        }
    }
}

/// A target's measured ratio and whether it holds (None: not measured).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub measured: String,
    pub met: Option<bool>,
}

/// Evaluates one `[[target]]` against the medians of this run.
pub fn evaluate(res: &Results, t: &TargetSpec) -> Outcome {
    let not = |why: String| Outcome {
        measured: why,
        met: None,
    };
    let rows = rows(res, &t.workload);
    let pick = t.pick_by.unwrap_or(t.metric);
    let hib = pick.higher_is_better();
    let names = t.server.names();
    let best = rows
        .iter()
        .filter(|r| names.contains(&r.server))
        .filter_map(|r| Some((r, r.metric(pick)?.median, r.metric(t.metric)?.median)))
        .reduce(|a, b| if (b.1 > a.1) == hib { b } else { a })
        .map(|(r, _, v)| (r.server.clone(), v));
    let Some((who, v)) = best else {
        return not(format!("not measured ({} did not run)", names.join(", ")));
    };
    let (vs_name, base) = if t.vs == "fio" {
        match res.fio_for(&t.workload) {
            Some(f) => (format!("the disk ceiling (fio {})", f.ioengine), f.mb_per_s),
            None => return not("not measured (no fio result)".into()),
        }
    } else {
        match rows
            .iter()
            .find(|r| r.server == t.vs)
            .and_then(|r| r.metric(t.metric))
        {
            Some(s) => (t.vs.clone(), s.median),
            None => return not(format!("not measured ({} did not run)", t.vs)),
        }
    };
    if base <= 0.0 {
        return not(format!("not measured ({vs_name} measured 0)"));
    }
    let ratio = v / base;
    let (met, bound) = match (t.min, t.max) {
        (Some(min), _) => (ratio >= min, format!("≥ {min}×")),
        (None, Some(max)) => (ratio <= max, format!("≤ {max}×")),
        (None, None) => (false, "?".into()),
    };
    let digits = if matches!(t.metric, Metric::Cpu) {
        1
    } else {
        0
    };
    Outcome {
        measured: format!(
            "{who} {v:.digits$} ÷ {vs_name} {base:.digits$} {} = **{ratio:.2}×** (target {bound})",
            t.metric.label()
        ),
        met: Some(met),
    }
}
