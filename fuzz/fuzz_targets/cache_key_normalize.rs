//! Fuzzes the cache-key normalization (`edge_http::normalize`): the path's percent
//! normalization and a `cache_key_args` policy on the query. The first byte picks the
//! policy (sort or not; exclude, include or none); the rest is the `path?query`.
//! Invariants: nothing panics; `push_normalized_pq` (the hit path's) gives what
//! `normalize_pq` gives; normalizing twice gives the same as once; the output has
//! no more `%` than the input and every `%` in its path starts an escape with
//! upper-case hex digits; a policy's output keeps only arguments it keeps, sorted by
//! name when it sorts.
#![no_main]

use edge_http::normalize::{normalize_path, normalize_pq, push_normalized_pq, ArgPattern, ArgsPolicy};
use libfuzzer_sys::fuzz_target;

fn policy(mode: u8) -> Option<ArgsPolicy> {
    let pats = |l: &[&str]| l.iter().map(|p| ArgPattern::parse(p).unwrap()).collect();
    match mode % 4 {
        0 => None,
        1 => Some(ArgsPolicy { sort: mode & 4 != 0, include: None, exclude: pats(&["utm_*", "fbclid", "*_id"]) }),
        2 => Some(ArgsPolicy { sort: mode & 4 != 0, include: Some(pats(&["a", "b*", "*c*"])), exclude: Vec::new() }),
        _ => Some(ArgsPolicy { sort: true, include: None, exclude: Vec::new() }),
    }
}

fn name(pair: &str) -> &str {
    pair.split_once('=').map_or(pair, |(n, _)| n)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(pq) = std::str::from_utf8(rest) else {
        return;
    };
    let p = policy(mode);
    let once = normalize_pq(pq, p.as_ref()).into_owned();
    // The hit path's form (no allocation, offsets on the stack) agrees.
    let mut pushed = String::new();
    push_normalized_pq(&mut pushed, pq, p.as_ref());
    assert_eq!(pushed, once, "push_normalized_pq differs: {pq:?}");
    let twice = normalize_pq(&once, p.as_ref());
    assert_eq!(once, twice, "not idempotent: {pq:?}");
    let count = |s: &str| s.bytes().filter(|&b| b == b'%').count();
    assert!(count(&once) <= count(pq), "more escapes: {pq:?} -> {once:?}");
    let path = once.split_once('?').map_or(once.as_str(), |(p, _)| p);
    assert_eq!(normalize_path(path), path);
    let b = path.as_bytes();
    for i in 0..b.len() {
        if b[i] == b'%' {
            let ok = |j: usize| b.get(j).is_some_and(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c));
            assert!(ok(i + 1) && ok(i + 2), "bad escape: {pq:?} -> {once:?}");
        }
    }
    if let (Some(p), Some((_, q))) = (&p, once.split_once('?')) {
        let names: Vec<&str> = q.split('&').map(name).collect();
        assert!(names.iter().all(|n| p.keeps(n)), "kept a dropped arg: {pq:?}");
        if p.sort {
            assert!(names.windows(2).all(|w| w[0] <= w[1]), "not sorted: {pq:?}");
        }
    }
});
