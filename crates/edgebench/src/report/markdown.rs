//! The Markdown report: the machine and the exact command, a table per workload
//! (figures, ratios to the best peer, cache verification), targets, latency detail,
//! server metrics and the plots by file name.

use std::fmt::Write as _;

use super::rows::{best_peer, evaluate, rows, summarize, Row};
use crate::experiment::Expect;
use crate::runner::{Cell, Results, ServerState};
use crate::servers::ServerKind;
use crate::stats::Summary;

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

pub(super) fn ratio(v: Option<Summary>, best: &Option<(String, f64)>) -> String {
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

/// True when every request of the row's cells reached the origin (all but 1% and a few
/// in flight): what `expect = "miss"` promises.
fn miss_verified(row: &Row) -> bool {
    row.origin
        .is_none_or(|o| o as f64 + 10.0 >= row.requests as f64 * 0.99)
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
                let caveat = match p.expect {
                    Expect::Miss if miss_verified(r) => "",
                    Expect::Miss => {
                        " **Not verified as misses** (see Warnings): some requests did not reach the origin."
                    }
                    _ if hit_verified(res, &w.name, r) => "",
                    _ => " **Not verified as cache hits** (see Warnings): this row may measure the proxy path.",
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

    if !p.targets.is_empty() {
        let _ = writeln!(m, "## Targets\n");
        let _ = writeln!(
            m,
            "Each target divides medians of this run (for a list of servers, the best of them).\n"
        );
        let _ = writeln!(m, "| target | measured | verdict |\n|---|---|---|");
        for t in &p.targets {
            let o = evaluate(res, t);
            let verdict = match o.met {
                Some(true) => "**met**",
                Some(false) => "**missed**",
                None => "not measured",
            };
            let _ = writeln!(m, "| {} | {} | {verdict} |", t.label, o.measured);
        }
        let _ = writeln!(m);
    }

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
    if p.drop_caches || p.memory_limit.is_some() {
        let mut what = Vec::new();
        if p.drop_caches {
            what.push(
                "`sync; echo 3 > /proc/sys/vm/drop_caches` before every measured cell".to_string(),
            );
        }
        if let Some(l) = p.memory_limit {
            what.push(format!(
                "every server in its own cgroup v1 memory cgroup limited to {} MiB (page cache included)",
                l >> 20
            ));
        }
        let _ = writeln!(m, "| Cold cache | {} |", what.join("; "));
    }
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
                let program = s
                    .program
                    .as_ref()
                    .map(|p| format!(", `{p}`"))
                    .unwrap_or_default();
                let _ = writeln!(m, "- **{}** ({}{program}){v}", s.name, s.kind.name());
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
        let popularity =
            |groups: &[crate::experiment::UrlGroup]| match crate::experiment::zipf_of(groups) {
                Ok(Some(a)) => format!(" (Zipf {a} popularity, id 1 the most popular)"),
                _ => String::new(),
            };
        let requests = w
            .requests
            .map(|n| format!(", at most {n} requests"))
            .unwrap_or_default();
        let _ = writeln!(
            m,
            "### {} (`{}`)\n\n{} connections, {} load thread(s), {ka}{rate}, {} path(s){}, {} cells{requests}.\n",
            w.label,
            w.name,
            w.connections,
            w.threads,
            w.paths.len(),
            popularity(&w.groups),
            fmt_duration(w.duration.as_secs_f64())
        );
        if w.warm_passes == 0 {
            let _ = writeln!(
                m,
                "No cache fill before this workload (`warm_passes = 0`): it starts from the caches as the workloads before it left them.\n"
            );
        }
        if let Some(b) = &w.before {
            let _ = writeln!(
                m,
                "Before each measured cell (after the warm-up load), a discarded load: {} connection(s), {} path(s){}{}, at most {}.\n",
                b.connections,
                b.paths.len(),
                popularity(&b.groups),
                b.requests
                    .map(|n| format!(", {n} requests"))
                    .unwrap_or_default(),
                fmt_duration(b.duration.as_secs_f64())
            );
        }
        if let Some(pr) = &w.probe {
            let rate = pr
                .rate
                .map(|r| format!("open loop at {r} req/s"))
                .unwrap_or_else(|| "closed loop".into());
            let _ = writeln!(
                m,
                "Hot probe, alongside the main load for the whole cell: {} connection(s), {rate}, {} path(s) fetched {} times right before each cell (the \"hot\" columns).\n",
                pr.connections,
                pr.paths.len(),
                pr.warm_passes
            );
        }
        let fio = res.fio_for(&w.name);
        if let Some(f) = fio {
            let _ = writeln!(
                m,
                "Disk ceiling: **{:.1} MB/s** ({:.0} IOPS) — fio randread, bs {} KiB, iodepth {}, {}{}, {:.0} s, on the run directory's filesystem after dropping the page cache.\n",
                f.mb_per_s,
                f.iops,
                f.bs >> 10,
                f.iodepth,
                f.ioengine,
                if f.direct { ", O_DIRECT" } else { "" },
                f.runtime_s
            );
        }
        let hot = w.probe.is_some();
        let best_hot = if hot {
            best_peer(&rows, |r| r.hot_p99, false)
        } else {
            None
        };
        let mut head = String::from(
            "| server | req/s | MB/s | p50 µs | p99 µs | CPU µs/req | RSS MiB | errors | cache |",
        );
        let cold = p.drop_caches || p.memory_limit.is_some();
        if cold {
            head.push_str(" CPU sys % |");
        }
        if hot {
            head.push_str(" hot p50 µs | hot p99 µs | hot p99.9 µs |");
        }
        if fio.is_some() {
            head.push_str(" MB/s vs disk |");
        }
        head.push_str(" req/s vs best peer | CPU/req vs best peer |");
        if hot {
            head.push_str(" hot p99 vs best peer |");
        }
        let cols = head.matches('|').count() - 1;
        let _ = writeln!(m, "{head}");
        let _ = writeln!(m, "|{}", "---|".repeat(cols));
        for r in &rows {
            let mut line = format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.server,
                fig(r.rps, 0),
                fig(r.mbps, 1),
                fig(r.p50, 0),
                fig(r.p99, 0),
                fig(r.cpu, 1),
                fig(r.rss_mib, 0),
                r.errors,
                cache_cell(res, &w.name, r),
            );
            if cold {
                let _ = write!(line, " {} |", fig(r.sys_pct, 0));
            }
            if hot {
                let _ = write!(
                    line,
                    " {} | {} | {} |",
                    fig(r.hot_p50, 0),
                    fig(r.hot_p99, 0),
                    fig(r.hot_p999, 0)
                );
            }
            if let Some(f) = fio {
                let v = match r.mbps {
                    Some(s) if f.mb_per_s > 0.0 => {
                        format!("{:.0}%", s.median * 100.0 / f.mb_per_s)
                    }
                    _ => "–".into(),
                };
                let _ = write!(line, " {v} |");
            }
            let _ = write!(
                line,
                " {} | {} |",
                ratio(r.rps, &best_rps),
                ratio(r.cpu, &best_cpu)
            );
            if hot {
                let _ = write!(line, " {} |", ratio(r.hot_p99, &best_hot));
            }
            let _ = writeln!(m, "{line}");
        }
        let _ = writeln!(m);
        metrics_table(&mut m, res, &w.name);
        if w.latency_detail {
            latency_detail(&mut m, res, &w.name);
        }
    }

    if !svg_names.is_empty() {
        let _ = writeln!(m, "## Plots\n");
        for (file, alt) in svg_names {
            let _ = writeln!(m, "![{alt}]({file})\n");
        }
    }

    let _ = writeln!(m, "## Warnings\n");
    if res.warnings.is_empty() && p.expect == Expect::Miss {
        let _ = writeln!(
            m,
            "None: every cell completed, and every cell's requests reached the origin (misses).\n"
        );
    } else if res.warnings.is_empty() {
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

/// The whole latency distribution per server (median over repetitions of each figure)
/// and the first repetition's log2 histogram: for tail experiments, where the spread
/// matters more than p50.
fn latency_detail(m: &mut String, res: &Results, w: &str) {
    let _ = writeln!(
        m,
        "Latency distribution (µs; each figure the median over repetitions; stdev is edgeload's over all requests of a cell):\n"
    );
    let cols = ["min", "mean", "p50", "p99", "max", "stdev"];
    let _ = writeln!(m, "| server | {} |", cols.join(" | "));
    let _ = writeln!(m, "|---|{}", "---|".repeat(cols.len()));
    let mut hists = Vec::new();
    for s in res.ran() {
        let cells: Vec<&Cell> = res.cells_for(w, &s.name).collect();
        if cells.is_empty() {
            continue;
        }
        let vals: Vec<String> = cols
            .iter()
            .map(
                |k| match summarize(&cells, |c| c.load.latency_us.get(*k).copied()) {
                    Some(v) => format!("{:.0}", v.median),
                    None => "–".into(),
                },
            )
            .collect();
        let _ = writeln!(m, "| {} | {} |", s.name, vals.join(" | "));
        if let Some(h) = cells.iter().find_map(|c| c.load.histogram.as_deref()) {
            hists.push((s.name.clone(), h.to_string()));
        }
    }
    let _ = writeln!(m);
    for (name, h) in hists {
        let _ = writeln!(
            m,
            "{name} (log2 buckets of latency in ms, first repetition):\n"
        );
        let _ = writeln!(m, "```\n{}```\n", h);
    }
}

/// Per workload, the `metrics` families each edgecache row reported (median over
/// repetitions of the per-cell delta; gauges: the value after the cell).
fn metrics_table(m: &mut String, res: &Results, w: &str) {
    let p = &res.plan;
    if p.metrics.is_empty() {
        return;
    }
    let servers: Vec<&str> = res.ran().iter().map(|s| s.name.as_str()).collect();
    let mut names: Vec<String> = Vec::new();
    for c in res.cells.iter().filter(|c| c.workload == w) {
        for k in c.metrics.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    if names.is_empty() {
        return;
    }
    let _ = writeln!(
        m,
        "Server metrics during the cells (`/metrics`, summed over workers; counters: the cell's increase, gauges: the value after; median over repetitions):\n"
    );
    let short: Vec<&str> = names
        .iter()
        .map(|n| crate::runner::short_metric(n, &p.metrics))
        .collect();
    let _ = writeln!(m, "| server | {} |", short.join(" | "));
    let _ = writeln!(m, "|---|{}", "---|".repeat(names.len()));
    for s in servers {
        let cells: Vec<&Cell> = res
            .cells_for(w, s)
            .filter(|c| !c.metrics.is_empty())
            .collect();
        if cells.is_empty() {
            continue;
        }
        let vals: Vec<String> = names
            .iter()
            .map(|n| match summarize(&cells, |c| c.metrics.get(n).copied()) {
                Some(v) => format!("{:.0}", v.median),
                None => "–".into(),
            })
            .collect();
        let _ = writeln!(m, "| {s} | {} |", vals.join(" | "));
    }
    let _ = writeln!(m);
}
