//! Fuzzes the purge request parser (`PURGE` on the data port and `POST /purge` on the
//! admin port): the query and the `application/x-www-form-urlencoded` body, with and
//! without a default host. The first byte picks the mode; the rest is split at the
//! first `\n` into query and body. Invariants: nothing panics; a target carries no
//! value longer than `MAX_PURGE_ARG` plus the host it was completed with; a key or
//! prefix built from an `http(s)://host/...` value has a lower-cased host; a prefix
//! and a tag are never empty; parsing is deterministic.
#![no_main]

use edge_cache::purge::{parse_request, PurgeTarget, MAX_PURGE_ARG};
use libfuzzer_sys::fuzz_target;

fn host_is_lower(k: &str) -> bool {
    let Some(rest) = k.strip_prefix("http://") else {
        return true;
    };
    let end = rest.find('/').unwrap_or(rest.len());
    !rest[..end].bytes().any(|b| b.is_ascii_uppercase())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (q, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&[][..], rest),
    };
    let Ok(q) = std::str::from_utf8(q) else {
        return;
    };
    let query = (mode & 1 == 1).then_some(q);
    let default_host = (mode & 2 == 2).then_some("Example.COM");
    let first = parse_request(query, body, default_host);
    assert_eq!(first, parse_request(query, body, default_host), "not deterministic");
    let Ok((target, _soft)) = first else {
        return;
    };
    // "http://" + a host of at most MAX_PURGE_ARG + the path of at most MAX_PURGE_ARG.
    let bound = 2 * MAX_PURGE_ARG + 16;
    match &target {
        PurgeTarget::Key(k) => {
            assert!(k.len() <= bound);
            assert!(host_is_lower(k), "{k:?}");
        }
        PurgeTarget::Path(p) => {
            assert!(p.starts_with('/') && p.len() <= MAX_PURGE_ARG);
        }
        PurgeTarget::Prefix(p) => {
            assert!(!p.is_empty() && p.len() <= MAX_PURGE_ARG + 1);
            assert!(host_is_lower(p), "{p:?}");
        }
        PurgeTarget::Tag(t) => assert!(!t.is_empty() && t.len() <= MAX_PURGE_ARG),
    }
});
