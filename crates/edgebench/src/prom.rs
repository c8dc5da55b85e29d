//! Reading a server's Prometheus `/metrics` around a cell.
//!
//! How it fits: an experiment with `metrics = ["edgecache_aio_"]` has the runner read
//! edgecache's admin `/metrics` before and after each measured cell; [`parse`] keeps the
//! families whose names start with one of the prefixes, summed over their label sets
//! (workers, backends), and [`deltas`] turns two readings into what the cell did:
//! counters (and histogram `_count`/`_sum`) as the difference, gauges as the value after.
//! Histogram buckets are left out (summing them over `le` means nothing).

use std::collections::BTreeMap;

/// One family's value, summed over label sets, and whether it only grows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub value: f64,
    pub counter: bool,
}

/// The families of `text` whose names start with one of `prefixes`.
pub fn parse(text: &str, prefixes: &[String]) -> BTreeMap<String, Sample> {
    let mut types: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out: BTreeMap<String, Sample> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(n), Some(t)) = (it.next(), it.next()) {
                types.insert(n, t);
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let name = &line[..name_end];
        let rest = &line[name_end..];
        // A prefix with labels (`family{worker="0"}`) selects that one series, kept
        // apart from the others; a plain prefix sums every series of its families.
        let series_end = match rest.strip_prefix('{') {
            Some(r) => r.find('}').map_or(name_end, |i| name_end + i + 2),
            None => name_end,
        };
        let series = &line[..series_end];
        let exact = prefixes
            .iter()
            .any(|p| p.contains('{') && series.starts_with(p.as_str()));
        if !exact
            && (!prefixes
                .iter()
                .any(|p| !p.contains('{') && name.starts_with(p.as_str()))
                || name.ends_with("_bucket"))
        {
            continue;
        }
        let after_labels = match rest.strip_prefix('{') {
            Some(r) => match r.find('}') {
                Some(i) => &r[i + 1..],
                None => continue,
            },
            None => rest,
        };
        let Some(value) = after_labels
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let base = name
            .strip_suffix("_count")
            .or_else(|| name.strip_suffix("_sum"))
            .unwrap_or(name);
        let counter = match types.get(name).or_else(|| types.get(base)) {
            Some(&"counter") => true,
            Some(&"histogram") | Some(&"summary") => name != base,
            Some(_) => false,
            None => name.ends_with("_total"),
        };
        let key = if exact { series } else { name };
        let e = out.entry(key.to_string()).or_insert(Sample {
            value: 0.0,
            counter,
        });
        e.value += value;
    }
    out
}

/// What happened between two readings: counters as after − before, gauges as after.
pub fn deltas(
    before: &BTreeMap<String, Sample>,
    after: &BTreeMap<String, Sample>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, a)| {
            let v = if a.counter {
                (a.value - before.get(k).map_or(0.0, |b| b.value)).max(0.0)
            } else {
                a.value
            };
            (k.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP edgecache_requests_total Requests.
# TYPE edgecache_requests_total counter
edgecache_requests_total{worker="0"} 100
# TYPE edgecache_aio_reads_total counter
edgecache_aio_reads_total{worker="0",backend="threads"} 10
edgecache_aio_reads_total{worker="1",backend="threads"} 5
# TYPE edgecache_aio_queue_depth gauge
edgecache_aio_queue_depth 3
# TYPE edgecache_aio_read_seconds histogram
edgecache_aio_read_seconds_bucket{le="0.001"} 7
edgecache_aio_read_seconds_count 15
edgecache_aio_untyped_total 2
garbage{ 1
"#;

    #[test]
    fn keeps_prefixed_families_summed_over_labels() {
        let m = parse(TEXT, &["edgecache_aio_".to_string()]);
        assert_eq!(
            m["edgecache_aio_reads_total"],
            Sample {
                value: 15.0,
                counter: true
            }
        );
        assert!(!m["edgecache_aio_queue_depth"].counter);
        assert!(m["edgecache_aio_read_seconds_count"].counter);
        assert!(m["edgecache_aio_untyped_total"].counter);
        assert!(!m.contains_key("edgecache_requests_total"));
        assert!(!m.keys().any(|k| k.ends_with("_bucket")));
    }

    #[test]
    fn counters_become_deltas_gauges_stay() {
        let p = ["edgecache_aio_".to_string()];
        let before = parse(TEXT, &p);
        let after = parse(
            &TEXT
                .replace("backend=\"threads\"} 10", "backend=\"threads\"} 110")
                .replace("queue_depth 3", "queue_depth 0"),
            &p,
        );
        let d = deltas(&before, &after);
        assert_eq!(d["edgecache_aio_reads_total"], 100.0);
        assert_eq!(d["edgecache_aio_queue_depth"], 0.0);
        assert_eq!(d["edgecache_aio_read_seconds_count"], 0.0);
    }

    #[test]
    fn a_prefix_with_labels_keeps_that_series_apart() {
        let text = "# TYPE w_total counter\nw_total{worker=\"0\"} 4\nw_total{worker=\"1\"} 6\n";
        let all = parse(text, &["w_".to_string()]);
        assert_eq!(all["w_total"].value, 10.0);
        let one = parse(text, &["w_total{worker=\"1\"}".to_string()]);
        assert_eq!(one.len(), 1);
        assert_eq!(one["w_total{worker=\"1\"}"].value, 6.0);
        assert!(one["w_total{worker=\"1\"}"].counter);
    }
}
