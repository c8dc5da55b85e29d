//! The printed report, laid out like wrk 4.x so that scripts grepping wrk's output keep
//! working, plus edgeload's additions (Connect/Delay distributions, URL classes, verify
//! line, log2 histogram).
//!
//! How it fits: [`crate::run`] prints [`header`] before the test starts and [`render`]
//! after it ends (or on Ctrl-C), both from merged [`ThreadStats`]. Lines wrk prints only
//! when non-zero (Socket errors, Non-2xx) follow the same rule here.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::cli::Config;
use crate::stats::{Summary, ThreadStats};
use crate::tls::Verify;
use crate::units;

/// Width of the longest bar of `--histogram`.
const BAR_WIDTH: u64 = 50;
/// Longest URL-class name shown before it is cut.
const MAX_CLASS_NAME: usize = 40;

/// "Running 10s test @ URL" and the threads/connections line.
pub fn header(cfg: &Config) -> String {
    let secs = cfg.duration.as_secs_f64();
    // wrk only knows whole seconds; keep its form for those, say "500.00ms" otherwise.
    let length = if secs >= 1.0 {
        units::time_s(secs)
    } else {
        units::time_us(secs * 1e6)
    };
    let mut out = format!(
        "Running {} test @ {}\n  {} threads and {} connections\n",
        length,
        cfg.url.to_url_string(),
        cfg.threads,
        cfg.connections
    );
    if cfg.h3 {
        out.push_str("  HTTP/3 (QUIC)\n");
    }
    if let Some(o) = cfg.open_loop {
        let _ = writeln!(
            out,
            "  Open loop at {:.2} requests/sec (latency from intended send times)",
            o.rate
        );
    }
    if let Some(r) = cfg.ramp {
        let _ = writeln!(out, "  Ramp: {r:.2} connections/sec");
    }
    if let Some(s) = &cfg.source {
        let _ = writeln!(
            out,
            "  Source addresses: {} ({}), round robin",
            s.len(),
            short(&s.spec, MAX_CLASS_NAME)
        );
    }
    if let (Some(a), Some(n)) = (cfg.zipf, cfg.paths) {
        let _ = writeln!(out, "  Zipf {a:.2} popularity over paths 1..{n}");
    }
    if let (true, Some(n)) = (cfg.sequential, cfg.paths) {
        let _ = writeln!(out, "  Paths 1..{n} in order");
    }
    if let Some(t) = &cfg.tls {
        let verify = match &t.options.verify {
            Verify::System => "certificates checked against the system roots".to_string(),
            Verify::CaFile(p) => format!("certificates checked against {}", p.display()),
            Verify::Off => "certificates not checked (--insecure)".to_string(),
        };
        let resume = if t.options.resume { "on" } else { "off" };
        let _ = writeln!(out, "  TLS: {verify}, session resumption {resume}");
    }
    out
}

fn stats_row(out: &mut String, name: &str, s: &Summary, fmt: fn(f64) -> String) {
    let _ = write!(out, "    {name:<10}");
    out.push_str(&units::padded(&fmt(s.mean), 8));
    out.push_str(&units::padded(&fmt(s.stdev), 10));
    out.push_str(&units::padded(&fmt(s.max as f64), 9));
    let _ = writeln!(out, "{:8.2}%", s.within_stdev);
}

fn distribution(out: &mut String, title: &str, s: &Summary) {
    let _ = writeln!(out, "  {title} Distribution");
    for (label, v) in s.percentiles() {
        let _ = writeln!(
            out,
            "{label:>7}%{}",
            units::padded(&units::time_us(v as f64), 10)
        );
    }
}

/// The report after the run. `runtime`: how long the test actually ran.
pub fn render(cfg: &Config, st: &ThreadStats, runtime: Duration) -> String {
    let mut out = String::new();
    let latency = Summary::of(&st.latency);
    let _ = writeln!(
        out,
        "  Thread Stats{:>6}{:>11}{:>8}{:>12}",
        "Avg", "Stdev", "Max", "+/- Stdev"
    );
    stats_row(&mut out, "Latency", &latency, units::time_us);
    stats_row(
        &mut out,
        "Req/Sec",
        &Summary::of(&st.req_rate),
        units::metric,
    );
    if cfg.latency {
        distribution(&mut out, "Latency", &latency);
    }
    if cfg.ramp.is_some() {
        distribution(&mut out, "Connect", &Summary::of(&st.connect));
    }
    if cfg.tls.is_some() && (cfg.ramp.is_some() || cfg.latency) {
        distribution(&mut out, "TLS Handshake", &Summary::of(&st.tls_handshake));
    }
    if cfg.ramp.is_some() {
        distribution(&mut out, "Delay", &Summary::of(&st.delay));
    }
    if cfg.show_classes {
        classes(&mut out, cfg, st);
    }
    if cfg.histogram {
        out.push_str(&histogram(&st.latency));
    }
    let secs = runtime.as_secs_f64().max(1e-9);
    let _ = writeln!(
        out,
        "  {} requests in {}, {}B read",
        st.completed,
        units::time_us(runtime.as_micros() as f64),
        units::binary(st.bytes as f64)
    );
    if cfg.tls.is_some() {
        let t = &st.tls;
        let _ = write!(
            out,
            "  TLS handshakes: {} ({} resumed)",
            t.handshakes, t.resumed
        );
        if t.failed > 0 {
            let _ = write!(out, ", {} failed", t.failed);
        }
        out.push('\n');
    }
    let e = &st.errors;
    if e.connect + e.connect_timeout + e.read + e.write + e.timeout > 0 {
        let _ = writeln!(
            out,
            "  Socket errors: connect {}, read {}, write {}, timeout {}",
            e.connect + e.connect_timeout,
            e.read,
            e.write,
            e.timeout
        );
    }
    if cfg.ramp.is_some() || e.connect_timeout + e.delay_timeout > 0 {
        let _ = writeln!(
            out,
            "  Ramp timeouts: connect_timeout {}, delay_timeout {}",
            e.connect_timeout, e.delay_timeout
        );
    }
    if e.status > 0 {
        let _ = writeln!(out, "  Non-2xx or 3xx responses: {}", e.status);
        out.push_str(&status_line(st));
    }
    if cfg.verify {
        let v = &st.verify;
        let _ = writeln!(
            out,
            "  Verify: {} ok, {} mismatched, {} without checksum",
            v.ok, v.mismatched, v.without_checksum
        );
    }
    let _ = writeln!(out, "Requests/sec: {:9.2}", st.completed as f64 / secs);
    let _ = writeln!(
        out,
        "Transfer/sec: {:>10}B",
        units::binary(st.bytes as f64 / secs)
    );
    out
}

/// `  Status codes: 200 1012, 429 98765` (every code seen, ascending), printed under the
/// Non-2xx line so that a run that is mostly rejected (429s from a rate limit) says
/// how many of each it got; the JSON has the same counts under `status`.
fn status_line(st: &ThreadStats) -> String {
    let mut line = String::from("  Status codes:");
    let mut first = true;
    for (code, n) in st.status.iter().enumerate().filter(|(_, n)| **n > 0) {
        let _ = write!(line, "{} {code} {n}", if first { "" } else { "," });
        first = false;
    }
    line.push('\n');
    line
}

/// `s` cut to `max` characters, with `...` when cut.
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max).collect();
    t.push_str("...");
    t
}

/// The per-URL-class table (`--mix`, `--paths`).
fn classes(out: &mut String, cfg: &Config, st: &ThreadStats) {
    let w = cfg
        .classes
        .iter()
        .map(|c| c.name.len().min(MAX_CLASS_NAME))
        .max()
        .unwrap_or(3)
        .max(9);
    let _ = writeln!(out, "  URL Classes");
    let _ = writeln!(
        out,
        "    {:<w$} {:>10} {:>8} {:>9} {:>9} {:>10}",
        "URL class", "Requests", "Errors", "p50", "p99", "Read"
    );
    for (c, s) in cfg.classes.iter().zip(&st.classes) {
        let name: String = c.name.chars().take(MAX_CLASS_NAME).collect();
        let sum = Summary::of(&s.latency);
        let _ = writeln!(
            out,
            "    {name:<w$} {:>10} {:>8} {:>9} {:>9} {:>10}",
            s.requests,
            s.errors,
            units::time_us(sum.p50 as f64),
            units::time_us(sum.p99 as f64),
            format!("{}B", units::binary(s.bytes as f64)),
        );
    }
}

/// mmhistogram-style log2 buckets of latency in milliseconds: a `Values min: avg: med:
/// max: dev: count:` line, then one `edge |*****  count` row per power-of-two bucket of
/// microseconds from the smallest to the largest value.
pub fn histogram(h: &Histogram<u64>) -> String {
    let mut out = String::new();
    let s = Summary::of(h);
    let ms = |us: f64| us / 1000.0;
    let _ = writeln!(
        out,
        "Values min:{:.2} avg:{:.2} med:{:.2} max:{:.2} dev:{:.2} count:{}",
        ms(s.min as f64),
        ms(s.mean),
        ms(s.p50 as f64),
        ms(s.max as f64),
        ms(s.stdev),
        s.count
    );
    if h.is_empty() {
        return out;
    }
    // Bucket b holds [2^(b-1), 2^b) µs; bucket 0 holds 0 µs.
    let bucket = |v: u64| (64 - v.leading_zeros()) as usize;
    let mut counts = [0u64; 65];
    for v in h.iter_recorded() {
        counts[bucket(v.value_iterated_to())] += v.count_at_value();
    }
    let (lo, hi) = (bucket(h.min()), bucket(h.max()));
    let peak = counts[lo..=hi].iter().copied().max().unwrap_or(1).max(1);
    for (b, &n) in counts.iter().enumerate().take(hi + 1).skip(lo) {
        let edge = if b == 0 {
            0.0
        } else {
            ms((1u64 << (b - 1)) as f64)
        };
        let stars = (n * BAR_WIDTH).div_ceil(peak) as usize;
        let _ = writeln!(out, "{edge:>10.3} |{:<50} {n}", "*".repeat(stars));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::new_histogram;
    use crate::verify::Verdict;

    fn cfg(extra: &[&str]) -> Config {
        let mut argv = vec!["edgeload"];
        argv.extend_from_slice(extra);
        argv.push("http://127.0.0.1:8080/");
        crate::cli::parse(argv).unwrap()
    }

    #[test]
    fn wrk_layout() {
        let c = cfg(&["--latency", "--verify"]);
        assert_eq!(
            header(&c),
            "Running 10s test @ http://127.0.0.1:8080/\n  2 threads and 10 connections\n"
        );
        assert!(header(&cfg(&["--paths", "20000", "--zipf", "0.8"]))
            .ends_with("  Zipf 0.80 popularity over paths 1..20000\n"));
        let mut st = ThreadStats::new(1);
        for us in [100u64, 200, 300, 400, 12_000] {
            st.response(
                0,
                200,
                1000,
                Verdict::Ok,
                Duration::from_micros(us),
                Duration::from_micros(us),
            );
        }
        st.response(
            0,
            500,
            100,
            Verdict::NoChecksum,
            Duration::from_micros(250),
            Duration::from_micros(250),
        );
        st.req_rate.record(1000).unwrap();
        st.bytes = 6000;
        let r = render(&c, &st, Duration::from_millis(10_100));
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(
            lines[0],
            "  Thread Stats   Avg      Stdev     Max   +/- Stdev"
        );
        assert_eq!(
            lines[1],
            "    Latency     2.21ms    4.38ms  12.01ms   83.33%"
        );
        assert_eq!(
            lines[2],
            "    Req/Sec     1.00k     0.00     1.00k   100.00%"
        );
        assert_eq!(lines[3], "  Latency Distribution");
        assert_eq!(lines[4], "     50%  250.00us");
        assert_eq!(lines[7], "     99%   12.01ms");
        assert_eq!(lines[8], "   99.9%   12.01ms");
        assert_eq!(lines[9], "  99.99%   12.01ms");
        assert_eq!(lines[10], "  6 requests in 10.10s, 5.86KB read");
        assert_eq!(lines[11], "  Non-2xx or 3xx responses: 1");
        assert_eq!(lines[12], "  Status codes: 200 5, 500 1");
        assert_eq!(
            lines[13],
            "  Verify: 5 ok, 0 mismatched, 1 without checksum"
        );
        assert_eq!(lines[14], "Requests/sec:      0.59");
        assert_eq!(lines[15], "Transfer/sec:     594.06B");
        assert!(!r.contains("Socket errors"));
        // All 2xx: no Non-2xx line, no status line (wrk's report as it was).
        let mut ok = ThreadStats::new(1);
        ok.response(
            0,
            204,
            0,
            Verdict::Skipped,
            Duration::from_micros(10),
            Duration::from_micros(10),
        );
        let r = render(&c, &ok, Duration::from_secs(1));
        assert!(!r.contains("Non-2xx") && !r.contains("Status codes"), "{r}");
    }

    #[test]
    fn source_adds_a_header_line() {
        let c = cfg(&["--source", "127.0.0.2-127.0.0.254"]);
        assert!(
            header(&c).ends_with("  Source addresses: 253 (127.0.0.2-127.0.0.254), round robin\n"),
            "{}",
            header(&c)
        );
        let long = (2..40)
            .map(|i| format!("127.0.0.{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let h = header(&cfg(&["--source", &long]));
        assert!(
            h.contains("  Source addresses: 38 (127.0.0.2,127.0.0.3,"),
            "{h}"
        );
        assert!(h.contains("...), round robin"), "{h}");
    }

    #[test]
    fn https_adds_tls_lines() {
        let c = crate::cli::parse(["edgeload", "-k", "--ramp", "10", "https://127.0.0.1:8443/"])
            .unwrap();
        assert_eq!(
            header(&c),
            "Running 10s test @ https://127.0.0.1:8443/\n  2 threads and 10 connections\n  \
             Ramp: 10.00 connections/sec\n  \
             TLS: certificates not checked (--insecure), session resumption on\n"
        );
        let mut st = ThreadStats::new(1);
        st.tls.handshakes = 10;
        st.tls.resumed = 8;
        st.response(
            0,
            200,
            10,
            Verdict::Skipped,
            Duration::from_micros(100),
            Duration::from_micros(100),
        );
        crate::stats::record(&mut st.tls_handshake, Duration::from_micros(900));
        let r = render(&c, &st, Duration::from_secs(1));
        assert!(r.contains("  TLS handshakes: 10 (8 resumed)\n"), "{r}");
        let blocks: Vec<&str> = r.lines().filter(|l| l.ends_with("Distribution")).collect();
        assert_eq!(
            blocks,
            [
                "  Connect Distribution",
                "  TLS Handshake Distribution",
                "  Delay Distribution"
            ]
        );
        st.tls.failed = 3;
        let r = render(&c, &st, Duration::from_secs(1));
        assert!(
            r.contains("  TLS handshakes: 10 (8 resumed), 3 failed\n"),
            "{r}"
        );
        // Plain HTTP reports stay as they were.
        let r = render(
            &cfg(&["--ramp", "10", "--latency"]),
            &st,
            Duration::from_secs(1),
        );
        assert!(!r.contains("TLS"), "{r}");
    }

    #[test]
    fn h3_says_so_in_the_header() {
        let c = crate::cli::parse(["edgeload", "--h3", "-k", "https://127.0.0.1:8443/"]).unwrap();
        assert_eq!(
            header(&c),
            "Running 10s test @ https://127.0.0.1:8443/\n  2 threads and 10 connections\n  \
             HTTP/3 (QUIC)\n  \
             TLS: certificates not checked (--insecure), session resumption on\n"
        );
        assert!(!header(&cfg(&[])).contains("HTTP/3"));
    }

    #[test]
    fn ascii_histogram_buckets() {
        let mut h = new_histogram();
        for v in [300u64, 300, 700, 1500, 1600, 1700, 1800] {
            h.record(v).unwrap();
        }
        let out = histogram(&h);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "Values min:0.30 avg:1.13 med:1.50 max:1.80 dev:0.62 count:7"
        );
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], format!("     0.256 |{:<50} 2", "*".repeat(25)));
        assert_eq!(lines[2], format!("     0.512 |{:<50} 1", "*".repeat(13)));
        assert_eq!(lines[3], format!("     1.024 |{} 4", "*".repeat(50)));
    }
}
