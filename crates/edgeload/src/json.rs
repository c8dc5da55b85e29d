//! The `--json FILE` output: counts, errors, rates and HDR percentiles for machines
//! (edgebench reads it, so the key names are a contract: see docs/edgeload.md).
//!
//! How it fits: [`crate::run`] calls [`write`] with the merged [`ThreadStats`] after the
//! text report. All durations are microseconds (`*_us`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::cli::Config;
use crate::stats::{Errors, Summary, ThreadStats};

/// One URL class (mix line).
#[derive(Debug, Serialize)]
pub struct JsonClass {
    pub url: String,
    pub weight: f64,
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latency_us: Summary,
}

/// The whole file.
#[derive(Debug, Serialize)]
pub struct JsonReport {
    pub url: String,
    /// The HTTP version spoken, as its ALPN name: `"http/1.1"` (also over TLS) or
    /// `"h3"` (`--h3`).
    pub protocol: &'static str,
    pub threads: usize,
    pub connections: usize,
    /// `"closed"` or `"open"` (with `-R`).
    pub mode: &'static str,
    /// The `-R` target, if any.
    pub target_rps: Option<f64>,
    /// `--paths N`, if any.
    pub paths: Option<u64>,
    /// `--zipf ALPHA`, if any (absent: ids uniform over `--paths`).
    pub zipf: Option<f64>,
    pub requests: u64,
    pub duration_s: f64,
    pub bytes: u64,
    /// Of `bytes`, body bytes dropped unread in the kernel (not `--copy-bodies`).
    pub bytes_discarded: u64,
    pub rps: f64,
    pub transfer_bps: f64,
    /// Connections established (each reconnect counts).
    pub connections_opened: u64,
    /// TLS handshakes completed (one per connection opened; 0 for http://).
    pub tls_handshakes: u64,
    /// Of those, how many resumed a session.
    pub tls_resumed: u64,
    /// Handshakes that failed or timed out (also in `errors.connect` /
    /// `errors.connect_timeout`).
    pub tls_failed: u64,
    pub errors: Errors,
    pub status: BTreeMap<String, u64>,
    pub verify: Option<JsonVerify>,
    pub latency_us: Summary,
    pub service_us: Summary,
    pub connect_us: Summary,
    /// TLS handshake times (empty for http://).
    pub tls_handshake_us: Summary,
    pub delay_us: Summary,
    pub req_per_sec_per_thread: Summary,
    pub classes: Vec<JsonClass>,
    /// `--source` as given, if any.
    pub source: Option<String>,
    /// How many addresses `--source` names (0 without it).
    pub source_addresses: usize,
}

#[derive(Debug, Serialize)]
pub struct JsonVerify {
    pub ok: u64,
    pub mismatched: u64,
    pub without_checksum: u64,
}

/// Builds the JSON document.
pub fn build(cfg: &Config, st: &ThreadStats, runtime: Duration) -> JsonReport {
    let secs = runtime.as_secs_f64().max(1e-9);
    JsonReport {
        url: cfg.url.to_url_string(),
        protocol: if cfg.h3 { "h3" } else { "http/1.1" },
        threads: cfg.threads,
        connections: cfg.connections,
        mode: if cfg.open_loop.is_some() {
            "open"
        } else {
            "closed"
        },
        target_rps: cfg.open_loop.map(|o| o.rate),
        paths: cfg.paths,
        zipf: cfg.zipf,
        requests: st.completed,
        duration_s: runtime.as_secs_f64(),
        bytes: st.bytes,
        bytes_discarded: st.discarded,
        rps: st.completed as f64 / secs,
        transfer_bps: st.bytes as f64 / secs,
        connections_opened: st.connections,
        tls_handshakes: st.tls.handshakes,
        tls_resumed: st.tls.resumed,
        tls_failed: st.tls.failed,
        errors: st.errors,
        status: st
            .status
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(code, n)| (code.to_string(), *n))
            .collect(),
        verify: cfg.verify.then_some(JsonVerify {
            ok: st.verify.ok,
            mismatched: st.verify.mismatched,
            without_checksum: st.verify.without_checksum,
        }),
        latency_us: Summary::of(&st.latency),
        service_us: Summary::of(&st.service),
        connect_us: Summary::of(&st.connect),
        tls_handshake_us: Summary::of(&st.tls_handshake),
        delay_us: Summary::of(&st.delay),
        req_per_sec_per_thread: Summary::of(&st.req_rate),
        classes: cfg
            .classes
            .iter()
            .zip(&st.classes)
            .map(|(c, s)| JsonClass {
                url: c.name.clone(),
                weight: c.weight as f64 / 1000.0,
                requests: s.requests,
                errors: s.errors,
                bytes: s.bytes,
                latency_us: Summary::of(&s.latency),
            })
            .collect(),
        source: cfg.source.as_ref().map(|s| s.spec.clone()),
        source_addresses: cfg.source.as_ref().map_or(0, |s| s.len()),
    }
}

/// Writes the JSON document to `path` (pretty, newline-terminated).
pub fn write(path: &Path, report: &JsonReport) -> Result<(), String> {
    let mut text = serde_json::to_string_pretty(report).map_err(|e| format!("--json: {e}"))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| format!("--json {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Verdict;

    #[test]
    fn keys_are_the_contract() {
        let cfg = crate::cli::parse(["edgeload", "--verify", "http://127.0.0.1:1/"]).unwrap();
        let mut st = ThreadStats::new(1);
        st.response(
            0,
            200,
            10,
            Verdict::Ok,
            Duration::from_micros(1000),
            Duration::from_micros(900),
        );
        let v = serde_json::to_value(build(&cfg, &st, Duration::from_secs(2))).unwrap();
        assert_eq!(v["requests"], 1);
        assert_eq!(v["rps"], 0.5);
        assert_eq!(v["status"]["200"], 1);
        for k in [
            "connect",
            "read",
            "write",
            "timeout",
            "status",
            "verify",
            "connect_timeout",
            "delay_timeout",
        ] {
            assert_eq!(v["errors"][k], 0, "{k}");
        }
        for k in [
            "min", "mean", "stdev", "max", "p50", "p75", "p90", "p99", "p99.9", "p99.99",
        ] {
            assert!(v["latency_us"][k].is_number(), "{k}");
            assert!(v["delay_us"][k].is_number(), "{k}");
        }
        assert_eq!(v["latency_us"]["p50"], 1000);
        assert_eq!(v["service_us"]["p50"], 900);
        assert_eq!(v["classes"][0]["url"], "/");
        assert_eq!(v["verify"]["ok"], 1);
        assert!(v["paths"].is_null() && v["zipf"].is_null());
        assert!(v["source"].is_null());
        assert_eq!(v["source_addresses"], 0);
        for k in ["tls_handshakes", "tls_resumed", "tls_failed"] {
            assert_eq!(v[k], 0, "{k}");
        }
        assert_eq!(v["tls_handshake_us"]["count"], 0);
        assert_eq!(v["protocol"], "http/1.1");
        let h3 = crate::cli::parse(["edgeload", "--h3", "-k", "https://127.0.0.1:1/"]).unwrap();
        let v =
            serde_json::to_value(build(&h3, &ThreadStats::new(1), Duration::from_secs(1))).unwrap();
        assert_eq!(v["protocol"], "h3");
        let cfg = crate::cli::parse([
            "edgeload",
            "--paths",
            "100",
            "--zipf",
            "0.8",
            "http://127.0.0.1:1/o",
        ])
        .unwrap();
        let v = serde_json::to_value(build(&cfg, &ThreadStats::new(1), Duration::from_secs(1)))
            .unwrap();
        assert_eq!(
            (v["paths"].as_u64(), v["zipf"].as_f64()),
            (Some(100), Some(0.8))
        );
    }
}
