//! Fuzzes the cache's response policy and purge parsers: `Cache-Control`, the targeted
//! fields (RFC 9213: `CDN-Cache-Control`, `Edgecache-Cache-Control`), `Age`, `Expires`,
//! `Date`, `Vary` through `policy::storable`, and the admin purge form through
//! `purge::parse_request`. Lines of the input are header values in a fixed order; the
//! last line is a purge form. Invariants: nothing panics; a stored response's lifetime
//! never exceeds 2^31 s plus nothing; a targeted `no-store` is never stored; `Age` is
//! the first value of the first line, or nothing when that is not delta-seconds (RFC
//! 9111 5.1); every date that parses formats back to the same instant.
#![no_main]

use edge_cache::policy::{self, NoCacheReason, PolicyConfig, MAX_DELTA_SECONDS};
use edge_http::{HeaderMap, Method};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

const NAMES: [&str; 7] = [
    "Cache-Control",
    "CDN-Cache-Control",
    "Edgecache-Cache-Control",
    "Age",
    "Expires",
    "Date",
    "Vary",
];

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|&b| b == b'\n');
    let mut h = HeaderMap::new();
    for name in NAMES {
        if let Some(v) = lines.next() {
            if !v.is_empty() {
                h.append(name, v.to_vec());
            }
        }
    }
    let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let cfg = PolicyConfig::default();
    let r = policy::storable(&Method::Get, &HeaderMap::new(), 200, &h, &cfg, t, t);
    let (cc, targeted) = policy::CacheControl::effective(&h, &cfg);
    if targeted && cc.no_store {
        assert_eq!(r, Err(NoCacheReason::ResponseNoStore));
    }
    if let Ok(f) = r {
        assert!(f.lifetime <= Duration::from_secs(MAX_DELTA_SECONDS));
        let first = h
            .get_all("age")
            .next()
            .map(|v| v.split(|&b| b == b',').next().unwrap_or(v));
        let plain = first
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(|v| v.trim_matches([' ', '\t']))
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
        match policy::age_header(&h) {
            Some(age) => assert!(plain && age <= MAX_DELTA_SECONDS),
            None => assert!(!plain),
        }
        let meta = policy::build_meta("http://x/", 200, &h, f, t, t, Some(0));
        assert!(meta.header_block.starts_with(b"Date: "));
    }
    for name in ["Expires", "Date"] {
        if let Some(when) = h.get_str(name).and_then(edge_http::parse_http_date) {
            let again = edge_http::parse_http_date(&edge_http::fmt_http_date(when));
            assert_eq!(again, Some(when), "{:?}", h.get_str(name));
        }
    }
    if let Some(form) = lines.next() {
        let _ = edge_cache::purge::parse_request(None, form, None);
        let _ = edge_cache::purge::parse_request(std::str::from_utf8(form).ok(), b"", Some("h"));
    }
});
