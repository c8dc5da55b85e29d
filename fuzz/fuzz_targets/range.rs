//! Fuzzes `Range` parsing, the conditional evaluator and the multipart layout. The first
//! 8 bytes are the representation size (little-endian; a short input gives a small
//! size); the rest is split on `\n` into Range, If-Range, If-None-Match, If-Match and the
//! representation's ETag. Invariants: every range lies inside the size with
//! first <= last, at most MAX_RANGES of them adding up to no more than the size; the
//! multipart Content-Length is the sum of its parts; Range applies to GET only, and
//! evaluate_range agrees with parse_range whenever If-Range lets it through; a cache
//! never answers 412. The Range line is also read as a `Content-Range`: a parsed one
//! always lies inside its complete length.
#![no_main]

use edge_http::{
    evaluate_preconditions, evaluate_range, parse_content_range, parse_range, Boundary, HeaderMap, Method,
    MultipartLayout, Precondition, RangeOutcome, Recipient, Validators, MAX_RANGES,
};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

fn check(outcome: &RangeOutcome, size: u64) {
    let RangeOutcome::Partial(set) = outcome else {
        return;
    };
    assert!(!set.is_empty() && set.len() <= MAX_RANGES);
    let mut total = 0u64;
    for r in set.iter() {
        assert!(r.first() <= r.last(), "{r:?}");
        assert!(r.last() < size, "{r:?} of {size}");
        assert_eq!(r.end() - r.first(), r.len());
        total = total.checked_add(r.len()).expect("total overflows");
    }
    assert!(total <= size, "{total} > {size}");
    let boundary = Boundary::from_seed(size);
    let m = MultipartLayout::new(
        set,
        size,
        Some(b"application/octet-stream"),
        boundary.as_str(),
    );
    assert_eq!(m.parts().len(), set.len());
    let mut sum = m.tail().len() as u64;
    for (p, r) in m.parts().zip(set.iter()) {
        assert_eq!(p.range, *r);
        assert!(p.head.starts_with(b"\r\n--"));
        sum = sum
            .saturating_add(p.head.len() as u64)
            .saturating_add(p.range.len());
    }
    assert_eq!(m.content_length(), sum);
}

fuzz_target!(|data: &[u8]| {
    let (size, rest) = match data.split_first_chunk::<8>() {
        Some((n, rest)) => (u64::from_le_bytes(*n), rest),
        None => (data.len() as u64, data),
    };
    let mut fields = rest.split(|&b| b == b'\n');
    let range = fields.next().unwrap_or_default();
    let if_range = fields.next();
    let if_none_match = fields.next();
    let if_match = fields.next();
    let etag = fields.next();

    let direct = parse_range(range, size);
    check(&direct, size);
    if let Some(cr) = parse_content_range(range) {
        assert!(cr.range.is_some() || cr.complete_len.is_some());
        if let (Some(r), Some(n)) = (cr.range, cr.complete_len) {
            assert!(r.first() <= r.last() && r.last() < n);
        }
    }

    let mut h = HeaderMap::new();
    h.append("Range", range.to_vec());
    for (name, value) in [
        ("If-Range", if_range),
        ("If-None-Match", if_none_match),
        ("If-Match", if_match),
    ] {
        if let Some(v) = value {
            h.append(name, v.to_vec());
        }
    }
    let lm = UNIX_EPOCH + Duration::from_secs(size % (1 << 34));
    let v = Validators {
        etag,
        last_modified: Some(lm),
    };
    let got = evaluate_range(&Method::Get, &h, &v, size);
    check(&got, size);
    if if_range.is_none() {
        assert_eq!(got, direct);
    } else if let RangeOutcome::Partial(_) = got {
        assert_eq!(got, direct);
    }
    assert!(!matches!(
        evaluate_range(&Method::Head, &h, &v, size),
        RangeOutcome::Partial(_)
    ));
    let _ = evaluate_preconditions(&Method::Get, &h, &v, Recipient::OriginServer);
    let _ = evaluate_preconditions(&Method::Post, &h, &v, Recipient::OriginServer);
    for m in [Method::Get, Method::Head] {
        assert_ne!(
            evaluate_preconditions(&m, &h, &v, Recipient::Cache),
            Precondition::Failed
        );
    }
});
