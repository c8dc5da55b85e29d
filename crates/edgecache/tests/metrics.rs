//! `GET /metrics` as a whole, against the real binary: every line of the text is read
//! with a strict check of the Prometheus text exposition format (0.0.4), on a node with
//! every kind of family in use (two workers, two cache zones, two upstreams, a
//! `limit_req` and a `limit_conn` zone), after some hits and misses.
//!
//! The families' own values are tested where their features are (cache.rs, limits.rs,
//! aio.rs, tls.rs...); this test is about the format: each family has exactly one
//! `# HELP` and one `# TYPE`, its samples follow them and no other family's, no series
//! appears twice, names and labels are well formed, and a histogram's buckets add up.

mod common;

use common::*;
use std::collections::{HashMap, HashSet};

/// A config using every group of families.
fn config(origin: std::net::SocketAddr, dir: &std::path::Path) -> String {
    format!(
        r#"workers = 2
worker_cpu_affinity = "off"

[[listen]]
addr = "{{listen}}"

[[cache]]
name = "c1"
path = "{dir}/c1"

[[cache]]
name = "c2"
path = "{dir}/c2"

[[upstream]]
name = "origin"
servers = ["{origin}", "127.0.0.1:1"]

[[upstream]]
name = "other"
servers = ["{origin}"]

[[limit_req_zone]]
name = "perip"
key = "$binary_remote_addr"
rate = "1000r/s"
size = "1m"

[[limit_conn_zone]]
name = "addr"
key = "$binary_remote_addr"
size = "1m"

[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]
limit_req = {{ zone = "perip", burst = 100, nodelay = true }}
limit_conn = {{ zone = "addr", max = 100 }}

[admin]
listen = "{{admin}}"
allow = ["127.0.0.1"]
"#,
        dir = dir.display()
    )
}

/// A metric or label name: `[a-zA-Z_][a-zA-Z0-9_]*` (no colons: those are for
/// recording rules).
fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The labels of a sample (`a="x",b="y"`, without the braces), checked: names well
/// formed and not repeated, values quoted with only the format's escapes. Returns the
/// pairs with the values unescaped.
fn parse_labels(text: &str, line: &str) -> Labels {
    let mut out: Labels = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("label without =\": {line}"));
        assert!(is_name(name), "label name {name:?}: {line}");
        assert!(
            out.iter().all(|(n, _)| n != name),
            "label {name} twice: {line}"
        );
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => panic!("bad escape {other:?} in a label value: {line}"),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => panic!("raw line feed in a label value: {line}"),
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value: {line}"),
            }
        };
        out.push((name.to_string(), value));
        rest = &after[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            assert!(!r.is_empty(), "trailing comma in labels: {line}");
            rest = r;
        } else {
            assert!(rest.is_empty(), "labels not separated by a comma: {line}");
        }
    }
    out
}

/// A sample's labels, (name, unescaped value) in order.
type Labels = Vec<(String, String)>;

/// A family as read: its type, its help, and its samples (series name, labels, value)
/// in order.
struct Family {
    kind: String,
    samples: Vec<(String, Labels, f64)>,
}

/// Reads a whole `/metrics` text line by line; panics at the first line the format
/// does not allow.
fn parse_strict(text: &str) -> Vec<(String, Family)> {
    assert!(text.ends_with('\n'), "the text ends without a line feed");
    let mut families: Vec<(String, Family)> = Vec::new();
    let mut helped: HashSet<String> = HashSet::new();
    let mut series: HashSet<String> = HashSet::new();
    // The family whose samples may follow: set by its TYPE line, right after its HELP.
    let mut pending_help: Option<String> = None;
    for line in text.lines() {
        assert!(!line.is_empty(), "an empty line");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            assert!(pending_help.is_none(), "HELP without TYPE before: {line}");
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(is_name(name), "family name {name:?}");
            assert!(!help.trim().is_empty(), "empty help: {line}");
            assert!(helped.insert(name.to_string()), "a second HELP for {name}");
            pending_help = Some(name.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert_eq!(
                pending_help.take().as_deref(),
                Some(name),
                "TYPE not right after its own HELP: {line}"
            );
            assert!(
                families.iter().all(|(n, _)| n != name),
                "a second TYPE for {name}"
            );
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "type {kind:?}: {line}"
            );
            // The naming convention: counters, and only counters, end in `_total`.
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name} is a {kind}"
            );
            families.push((
                name.to_string(),
                Family {
                    kind: kind.to_string(),
                    samples: Vec::new(),
                },
            ));
        } else {
            assert!(!line.starts_with('#'), "a comment line: {line}");
            assert!(pending_help.is_none(), "a sample before TYPE: {line}");
            let (head, value) = line.rsplit_once(' ').expect("series value");
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("value {value:?}: {line}"));
            assert!(value.is_finite() && value >= 0.0, "value {value}: {line}");
            let (name, labels) = match head.split_once('{') {
                Some((n, l)) => (
                    n,
                    parse_labels(l.strip_suffix('}').expect("labels end in }"), line),
                ),
                None => (head, Vec::new()),
            };
            assert!(is_name(name), "series name {name:?}: {line}");
            let (family, f) = families
                .last_mut()
                .unwrap_or_else(|| panic!("a sample before any family: {line}"));
            let allowed = match f.kind.as_str() {
                "histogram" => [
                    format!("{family}_bucket"),
                    format!("{family}_count"),
                    format!("{family}_sum"),
                ]
                .contains(&name.to_string()),
                _ => name == family,
            };
            assert!(allowed, "{name} under the family {family}: {line}");
            let mut key: Vec<_> = labels.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
            key.sort();
            assert!(
                series.insert(format!("{name}{{{}}}", key.join(","))),
                "a series twice: {line}"
            );
            f.samples.push((name.to_string(), labels, value));
        }
    }
    assert!(pending_help.is_none(), "the text ends after a HELP line");
    families
}

/// A histogram's buckets: `le` on every bucket, increasing bounds, counts that never
/// go down, and `+Inf` last, equal to `_count`.
fn check_histogram(name: &str, f: &Family) {
    let mut last_le = f64::NEG_INFINITY;
    let mut last_n = 0.0;
    let mut inf = None;
    let mut count = None;
    for (series, labels, v) in &f.samples {
        if series.ends_with("_bucket") {
            assert!(inf.is_none(), "{name}: a bucket after +Inf");
            let le = labels
                .iter()
                .find(|(n, _)| n == "le")
                .unwrap_or_else(|| panic!("{name}: a bucket without le"));
            let bound: f64 = if le.1 == "+Inf" {
                inf = Some(*v);
                f64::INFINITY
            } else {
                le.1.parse().expect("le")
            };
            assert!(bound > last_le, "{name}: le {bound} after {last_le}");
            assert!(
                *v >= last_n,
                "{name}: bucket le={bound} below the one before"
            );
            last_le = bound;
            last_n = *v;
        } else if series.ends_with("_count") {
            count = Some(*v);
        }
    }
    assert!(inf.is_some(), "{name}: no +Inf bucket");
    assert_eq!(inf, count, "{name}: +Inf bucket and _count differ");
}

#[test]
fn metrics_text_is_strict_exposition_format() {
    let (_origin, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let (_cache, addr, admin) = edgecache(&config(origin_addr, dir.path()));
    for i in 0..4 {
        for _ in 0..2 {
            let r = edge_testkit::get(addr, &format!("/txt/1000/{i}"), &[]);
            assert_eq!(r.status, 200);
        }
    }
    assert_eq!(edge_testkit::get(addr, "/nothere", &[]).status, 404);

    let r = edge_testkit::get(admin, "/metrics", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4"));
    let text = String::from_utf8(r.body).expect("UTF-8");
    let families = parse_strict(&text);

    // Every group wrote its families: the workers' counters, TLS, HTTP/2, the RAM
    // tier, compression, upstream health, both cache zones, both kinds of limit zone
    // and the file I/O backends.
    let by_name: HashMap<&str, &Family> = families.iter().map(|(n, f)| (n.as_str(), f)).collect();
    for name in [
        "edgecache_requests_total",
        "edgecache_worker_requests_total",
        "edgecache_connections_active",
        "edgecache_tls_handshakes_total",
        "edgecache_h2_connection_errors_total",
        "edgecache_upstream_errors_total",
        "edgecache_cache_requests_total",
        "edgecache_memory_cache_bytes",
        "edgecache_compress_responses_total",
        "edgecache_compress_queue_depth",
        "edgecache_upstream_server_up",
        "edgecache_cache_entries",
        "edgecache_cache_collapsed_total",
        "edgecache_limit_req_total",
        "edgecache_limit_conn_active",
        "edgecache_aio_reads_total",
        "edgecache_aio_queue_depth",
        "edgecache_aio_read_seconds",
    ] {
        let f = by_name
            .get(name)
            .unwrap_or_else(|| panic!("no family {name} in:\n{text}"));
        assert!(!f.samples.is_empty(), "{name} has no sample");
    }
    for (name, f) in &families {
        if f.kind == "histogram" {
            check_histogram(name, f);
        }
    }
    // A series per cache zone and per upstream server, each labelled with its name.
    let labels_of = |family: &str| -> Vec<Labels> {
        by_name[family]
            .samples
            .iter()
            .map(|(_, l, _)| l.clone())
            .collect()
    };
    let caches: Vec<String> = labels_of("edgecache_cache_entries")
        .into_iter()
        .map(|l| l[0].1.clone())
        .collect();
    assert_eq!(caches, ["c1", "c2"]);
    assert_eq!(labels_of("edgecache_upstream_server_up").len(), 3);
    // The values are the node's: 8 requests for 4 objects, one miss and one hit each,
    // on c1; the 404 went to the origin uncached.
    assert_eq!(
        metric_in(&text, "edgecache_cache_requests_total{status=\"hit\"}"),
        Some(4),
        "{text}"
    );
    assert_eq!(
        metric_in(&text, "edgecache_cache_entries{cache=\"c2\"}"),
        Some(0)
    );
    let per_worker: f64 = by_name["edgecache_worker_requests_total"]
        .samples
        .iter()
        .map(|(_, _, v)| v)
        .sum();
    assert_eq!(per_worker, 9.0);
}

#[test]
fn the_strict_reader_refuses_what_the_format_does_not_allow() {
    // The checker itself: each of these texts breaks one rule and must be refused.
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"v\"} 1\n";
    parse_strict(good);
    for bad in [
        // a second HELP and TYPE for one family
        "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n# HELP a_total A.\n# TYPE a_total counter\n",
        // a duplicate series
        "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"v\"} 1\na_total{k=\"v\"} 2\n",
        // a sample of another family
        "# HELP a_total A.\n# TYPE a_total counter\nb_total 1\n",
        // a sample without a family
        "a_total 1\n",
        // an unescaped quote in a label value
        "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"v\"\"} 1\n",
        // a bad escape
        "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"\\x\"} 1\n",
        // a counter not named _total
        "# HELP a A.\n# TYPE a counter\na 1\n",
        // TYPE without HELP
        "# TYPE a_total counter\na_total 1\n",
        // a value that is not a number
        "# HELP a_total A.\n# TYPE a_total counter\na_total x\n",
    ] {
        let refused = std::panic::catch_unwind(|| parse_strict(bad)).is_err();
        assert!(refused, "accepted:\n{bad}");
    }
}
