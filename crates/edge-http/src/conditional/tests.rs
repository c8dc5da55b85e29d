//! Preconditions and `If-Range`: the tables merged from the static handler, the cache
//! and the test origin, plus the RFC 9110 13.2.2 order and list parsing.

use super::*;
use crate::fmt_http_date;
use crate::range::{ByteRange, RangeSet};
use std::time::Duration;
use Precondition::*;

const ETAG: &str = "\"abc\"";

/// Last-Modified of the test representation: Sun, 13 Sep 2020 12:26:40 GMT.
fn lm() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_600_000_000)
}

fn v() -> Validators<'static> {
    Validators::new(Some(ETAG), Some(lm()))
}

fn req(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, val) in pairs {
        h.append(*n, *val);
    }
    h
}

fn origin(pairs: &[(&str, &str)], v: &Validators<'_>) -> Precondition {
    evaluate_preconditions(&Method::Get, &req(pairs), v, Recipient::OriginServer)
}

fn date(t: SystemTime) -> String {
    fmt_http_date(t)
}

#[test]
fn if_none_match() {
    let v = v();
    for (inm, want) in [
        ("\"abc\"", NotModified),
        ("W/\"abc\"", NotModified),
        ("\"x\", \"abc\"", NotModified),
        ("\"x\",W/\"abc\"", NotModified),
        (" \"abc\" ", NotModified),
        ("*", NotModified),
        (" * ", NotModified),
        ("\"x\"", Proceed),
        ("\"ABC\"", Proceed),
        ("abc", Proceed),
        ("\"abc", Proceed),
        ("", Proceed),
        (",", Proceed),
    ] {
        assert_eq!(origin(&[("If-None-Match", inm)], &v), want, "{inm:?}");
    }
    // A weak stored tag matches weakly too.
    let weak = Validators::new(Some("W/\"abc\""), None);
    assert_eq!(origin(&[("if-none-match", "\"abc\"")], &weak), NotModified);
    assert_eq!(
        origin(&[("if-none-match", "W/\"abc\"")], &weak),
        NotModified
    );
    // From the static handler: a list with a weak member.
    let b = Validators::new(Some("\"b\""), None);
    assert_eq!(
        origin(&[("If-None-Match", "\"a\", W/\"b\"")], &b),
        NotModified
    );
    let c = Validators::new(Some("\"c\""), None);
    assert_eq!(origin(&[("If-None-Match", "\"a\", W/\"b\"")], &c), Proceed);
}

#[test]
fn if_none_match_star_needs_no_etag() {
    // `*` matches any current representation (RFC 9110 13.1.2), validators or not.
    let none = Validators::default();
    assert_eq!(origin(&[("if-none-match", "*")], &none), NotModified);
    assert_eq!(origin(&[("if-none-match", "\"x\"")], &none), Proceed);
    let lm_only = Validators::new(None, Some(lm()));
    assert_eq!(origin(&[("if-none-match", "*")], &lm_only), NotModified);
}

#[test]
fn if_none_match_lists_span_field_lines_and_quoted_commas() {
    let v = v();
    let h = req(&[
        ("If-None-Match", "\"x\""),
        ("if-none-match", "\"y\", \"abc\""),
    ]);
    assert_eq!(
        evaluate_preconditions(&Method::Get, &h, &v, Recipient::Cache),
        NotModified
    );
    let comma = Validators::new(Some("\"a,b\""), None);
    assert_eq!(origin(&[("if-none-match", "\"a,b\"")], &comma), NotModified);
    assert_eq!(
        origin(&[("if-none-match", "\"a\", \"b\"")], &comma),
        Proceed
    );
    assert_eq!(
        origin(&[("if-none-match", "\"x\", W/\"a,b\"")], &comma),
        NotModified
    );
}

#[test]
fn tag_list_elements() {
    let got: Vec<&[u8]> = TagList {
        rest: b" \"a,b\" , W/\"c\" ,, d e ,*,\"open",
    }
    .collect();
    let want: Vec<&[u8]> = vec![b"\"a,b\"", b"W/\"c\"", b"d e", b"*", b"\"open"];
    assert_eq!(got, want);
    assert_eq!(TagList { rest: b" , ,\t" }.count(), 0);
    assert_eq!(TagList { rest: b"W/" }.collect::<Vec<_>>(), vec![b"W/"]);
    assert_eq!(TagList { rest: b"\"\"" }.collect::<Vec<_>>(), vec![b"\"\""]);
}

#[test]
fn if_modified_since() {
    let v = v();
    for (ims, want) in [
        (date(lm()), NotModified),
        (date(lm() + Duration::from_secs(3600)), NotModified),
        (date(lm() - Duration::from_secs(1)), Proceed),
        ("Sunday, 13-Sep-20 12:26:40 GMT".to_string(), NotModified),
        ("Sun Sep 13 12:26:40 2020".to_string(), NotModified),
        ("garbage".to_string(), Proceed),
        (String::new(), Proceed),
    ] {
        assert_eq!(origin(&[("If-Modified-Since", &ims)], &v), want, "{ims}");
    }
    // HTTP dates have one-second resolution; a sub-second mtime is that second.
    let at = UNIX_EPOCH + Duration::from_secs(784_111_777);
    let h = [("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT")];
    assert_eq!(origin(&h, &Validators::new(None, Some(at))), NotModified);
    let later = at + Duration::from_millis(300);
    assert_eq!(origin(&h, &Validators::new(None, Some(later))), NotModified);
    let next = at + Duration::from_secs(1);
    assert_eq!(origin(&h, &Validators::new(None, Some(next))), Proceed);
    // Without Last-Modified there is nothing to compare.
    assert_eq!(origin(&h, &Validators::new(Some(ETAG), None)), Proceed);
    // Sent twice: ignored.
    let twice = [
        ("If-Modified-Since", date(lm())),
        ("If-Modified-Since", date(lm())),
    ];
    let twice: Vec<(&str, &str)> = twice.iter().map(|(a, b)| (*a, b.as_str())).collect();
    assert_eq!(origin(&twice, &v), Proceed);
}

#[test]
fn if_none_match_wins_over_if_modified_since() {
    let v = v();
    let ims = date(lm());
    assert_eq!(
        origin(
            &[("if-none-match", "\"x\""), ("if-modified-since", &ims)],
            &v
        ),
        Proceed
    );
    assert_eq!(
        origin(&[("if-none-match", ""), ("if-modified-since", &ims)], &v),
        Proceed
    );
    assert_eq!(origin(&[], &v), Proceed);
}

#[test]
fn methods_other_than_get_and_head() {
    let v = v();
    let h = req(&[("If-None-Match", ETAG)]);
    let ims = req(&[("If-Modified-Since", &date(lm()))]);
    assert_eq!(
        evaluate_preconditions(&Method::Head, &h, &v, Recipient::OriginServer),
        NotModified
    );
    for m in [Method::Post, Method::Put, Method::Delete] {
        assert_eq!(
            evaluate_preconditions(&m, &h, &v, Recipient::OriginServer),
            Failed,
            "{m:?}: If-None-Match true on an unsafe method is 412"
        );
        assert_eq!(
            evaluate_preconditions(&m, &ims, &v, Recipient::OriginServer),
            Proceed,
            "{m:?}: If-Modified-Since applies to GET and HEAD only"
        );
    }
}

#[test]
fn if_match_and_if_unmodified_since() {
    let v = v();
    for (im, want) in [
        ("\"abc\"", Proceed),
        ("\"x\", \"abc\"", Proceed),
        ("*", Proceed),
        ("\"x\"", Failed),
        ("W/\"abc\"", Failed),
        ("", Failed),
    ] {
        assert_eq!(origin(&[("If-Match", im)], &v), want, "{im:?}");
    }
    let weak = Validators::new(Some("W/\"abc\""), None);
    assert_eq!(origin(&[("If-Match", "W/\"abc\"")], &weak), Failed);
    assert_eq!(
        origin(&[("If-Match", "*")], &Validators::default()),
        Proceed
    );
    assert_eq!(
        origin(&[("If-Match", "\"x\"")], &Validators::default()),
        Failed
    );

    let earlier = date(lm() - Duration::from_secs(1));
    assert_eq!(origin(&[("If-Unmodified-Since", &earlier)], &v), Failed);
    assert_eq!(origin(&[("If-Unmodified-Since", &date(lm()))], &v), Proceed);
    assert_eq!(origin(&[("If-Unmodified-Since", "garbage")], &v), Proceed);
    let no_lm = Validators::new(Some(ETAG), None);
    assert_eq!(
        origin(&[("If-Unmodified-Since", &earlier)], &no_lm),
        Proceed
    );
    // If-Match present: If-Unmodified-Since is not looked at.
    assert_eq!(
        origin(&[("If-Match", ETAG), ("If-Unmodified-Since", &earlier)], &v),
        Proceed
    );
    // 412 comes before 304 (RFC 9110 13.2.2 steps 1-3).
    assert_eq!(
        origin(&[("If-Match", "\"x\""), ("If-None-Match", ETAG)], &v),
        Failed
    );
    assert_eq!(
        origin(&[("If-Match", ETAG), ("If-None-Match", ETAG)], &v),
        NotModified
    );
}

#[test]
fn caches_ignore_if_match_and_if_unmodified_since() {
    let v = v();
    let earlier = date(lm() - Duration::from_secs(1));
    for h in [
        req(&[("If-Match", "\"x\"")]),
        req(&[("If-Unmodified-Since", &earlier)]),
    ] {
        assert_eq!(
            evaluate_preconditions(&Method::Get, &h, &v, Recipient::Cache),
            Proceed
        );
    }
    let h = req(&[("If-Match", "\"x\""), ("If-None-Match", ETAG)]);
    assert_eq!(
        evaluate_preconditions(&Method::Get, &h, &v, Recipient::Cache),
        NotModified
    );
}

fn range(method: Method, pairs: &[(&str, &str)], v: &Validators<'_>) -> RangeOutcome {
    evaluate_range(&method, &req(pairs), v, 10)
}

fn partial(first: u64, last: u64) -> RangeOutcome {
    let r = ByteRange::new(first, last).unwrap();
    RangeOutcome::Partial(RangeSet::from_ranges(&[r]).unwrap())
}

#[test]
fn if_range() {
    let v = v();
    let ir = |value: &str| {
        range(
            Method::Get,
            &[("range", "bytes=0-1"), ("if-range", value)],
            &v,
        )
    };
    assert_eq!(ir("\"abc\""), partial(0, 1));
    assert_eq!(ir(" \"abc\" "), partial(0, 1));
    assert_eq!(ir(&date(lm())), partial(0, 1));
    let mismatch = RangeOutcome::Full(RangeIgnored::IfRangeMismatch);
    for value in [
        "W/\"abc\"", // a weak tag never matches If-Range
        "\"old\"",
        "\"abc\", \"x\"",
        "abc",
        "",
        "Thu, 01 Jan 1970 00:00:00 GMT",
        "garbage",
    ] {
        assert_eq!(ir(value), mismatch, "{value:?}");
    }
    assert_eq!(ir(&date(lm() + Duration::from_secs(1))), mismatch);
    // A weak stored tag cannot match either.
    let weak = Validators::new(Some("W/\"abc\""), Some(lm()));
    assert!(!if_range_matches(b"W/\"abc\"", &weak));
    assert!(!if_range_matches(b"\"abc\"", &weak));
    // No validators: nothing matches.
    assert!(!if_range_matches(b"\"abc\"", &Validators::default()));
    assert!(!if_range_matches(
        date(lm()).as_bytes(),
        &Validators::default()
    ));
    // Exact second of a sub-second Last-Modified.
    let sub = Validators::new(None, Some(lm() + Duration::from_millis(999)));
    assert!(if_range_matches(date(lm()).as_bytes(), &sub));
    // If-Range decides before the range is parsed: a mismatch never gives 416.
    assert_eq!(
        range(
            Method::Get,
            &[("range", "bytes=50-"), ("if-range", "\"old\"")],
            &v
        ),
        mismatch
    );
    // If-Range sent twice is not a single validator.
    assert_eq!(
        range(
            Method::Get,
            &[
                ("range", "bytes=0-1"),
                ("if-range", ETAG),
                ("if-range", ETAG)
            ],
            &v
        ),
        mismatch
    );
}

#[test]
fn range_applies_to_get_only() {
    let v = v();
    let h = [("Range", "bytes=0-1")];
    assert_eq!(range(Method::Get, &h, &v), partial(0, 1));
    for m in [Method::Head, Method::Post, Method::Other("BREW".into())] {
        assert_eq!(range(m, &h, &v), RangeOutcome::Full(RangeIgnored::NotGet));
    }
    assert_eq!(
        range(Method::Get, &[], &v),
        RangeOutcome::Full(RangeIgnored::Absent)
    );
    assert_eq!(
        range(Method::Get, &[("if-range", ETAG)], &v),
        RangeOutcome::Full(RangeIgnored::Absent),
        "If-Range without Range is ignored"
    );
    assert_eq!(
        range(
            Method::Get,
            &[("range", "bytes=0-1"), ("range", "bytes=2-3")],
            &v
        ),
        RangeOutcome::Full(RangeIgnored::Invalid)
    );
    assert_eq!(
        range(Method::Get, &[("range", "bytes=10-")], &v),
        RangeOutcome::Unsatisfiable
    );
}

#[test]
fn httparse_header_slices_work_too() {
    let etag = ETAG.to_string();
    let fields = [
        httparse::Header {
            name: "Host",
            value: b"h",
        },
        httparse::Header {
            name: "IF-NONE-MATCH",
            value: b"\"x\"",
        },
        httparse::Header {
            name: "if-none-match",
            value: etag.as_bytes(),
        },
        httparse::Header {
            name: "range",
            value: b"bytes=-3",
        },
    ];
    let fields: &[httparse::Header<'_>] = &fields;
    assert_eq!(fields.field("If-None-Match", 1), Some(etag.as_bytes()));
    assert_eq!(fields.field("If-None-Match", 2), None);
    let v = v();
    assert_eq!(
        evaluate_preconditions(&Method::Get, fields, &v, Recipient::OriginServer),
        NotModified
    );
    assert_eq!(evaluate_range(&Method::Get, fields, &v, 10), partial(7, 9));
}

#[test]
fn unix_seconds_round_down() {
    assert_eq!(unix_secs(UNIX_EPOCH), 0);
    assert_eq!(unix_secs(UNIX_EPOCH + Duration::from_millis(1500)), 1);
    assert_eq!(unix_secs(UNIX_EPOCH - Duration::from_millis(500)), -1);
    assert_eq!(unix_secs(UNIX_EPOCH - Duration::from_secs(2)), -2);
}
