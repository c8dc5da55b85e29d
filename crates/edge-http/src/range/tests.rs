//! `Range` parsing and multipart layout: the tables merged from the three former
//! implementations (static files, cache hits, the test origin), the edge cases, and an
//! exhaustive check of single range-specs against a model.

use super::*;
use RangeIgnored::*;
use RangeOutcome::{Full, Partial, Unsatisfiable};

fn br(first: u64, last: u64) -> ByteRange {
    ByteRange::new(first, last).unwrap()
}

/// `Partial` with the given inclusive ranges.
fn p(ranges: &[(u64, u64)]) -> RangeOutcome {
    let v: Vec<ByteRange> = ranges.iter().map(|&(a, b)| br(a, b)).collect();
    Partial(RangeSet::from_ranges(&v).unwrap())
}

fn parse(value: &str, size: u64) -> RangeOutcome {
    parse_range(value.as_bytes(), size)
}

fn list(specs: impl Iterator<Item = String>) -> String {
    format!("bytes={}", specs.collect::<Vec<_>>().join(","))
}

#[test]
fn single_ranges() {
    for (value, size, want) in [
        ("bytes=0-9", 100, p(&[(0, 9)])),
        ("bytes=90-", 100, p(&[(90, 99)])),
        ("bytes=-10", 100, p(&[(90, 99)])),
        ("bytes=-1000", 100, p(&[(0, 99)])),
        ("bytes=50-1000", 100, p(&[(50, 99)])),
        ("bytes=95-200", 100, p(&[(95, 99)])),
        ("bytes=0-0", 100, p(&[(0, 0)])),
        ("bytes=0-0", 1, p(&[(0, 0)])),
        ("bytes=99-99", 100, p(&[(99, 99)])),
        ("bytes=0-99", 1000, p(&[(0, 99)])),
        ("bytes=990-", 1000, p(&[(990, 999)])),
        ("bytes=-5000", 1000, p(&[(0, 999)])),
        ("bytes=900-5000", 1000, p(&[(900, 999)])),
        ("bytes=007-008", 100, p(&[(7, 8)])),
    ] {
        assert_eq!(parse(value, size), want, "{value} of {size}");
    }
}

#[test]
fn units_and_whitespace_are_lenient_where_the_grammar_allows() {
    for value in [
        "BYTES=0-1",
        "Bytes=0-1",
        "BYTES = 0-1",
        " bytes=0-1 ",
        "bytes=\t0-1",
        "bytes=0-1,",
        "bytes=,,0-1, ,",
    ] {
        assert_eq!(parse(value, 100), p(&[(0, 1)]), "{value:?}");
    }
    assert_eq!(parse("bytes= 1-2 , 4-5", 100), p(&[(1, 2), (4, 5)]));
    assert_eq!(parse("items=0-1", 100), Full(UnknownUnit));
    assert_eq!(parse("pages=1,3", 100), Full(UnknownUnit));
    assert_eq!(parse("bytesx=0-1", 100), Full(UnknownUnit));
}

#[test]
fn several_ranges_keep_request_order() {
    assert_eq!(parse("bytes=0-0,-1", 100), p(&[(0, 0), (99, 99)]));
    assert_eq!(parse("bytes=0-0, 10-19", 100), p(&[(0, 0), (10, 19)]));
    assert_eq!(
        parse("bytes=0-0, -1 ,5-9", 10),
        p(&[(0, 0), (9, 9), (5, 9)])
    );
    // Unsatisfiable specs are dropped when another one is satisfiable.
    assert_eq!(parse("bytes=100-200, 5-6", 100), p(&[(5, 6)]));
    assert_eq!(parse("bytes=2000-3000, 5-6", 1000), p(&[(5, 6)]));
    assert_eq!(parse("bytes=-0, 5-6", 100), p(&[(5, 6)]));
}

#[test]
fn unsatisfiable() {
    for (value, size) in [
        ("bytes=100-", 100),
        ("bytes=1000-", 1000),
        ("bytes=100-200, 300-", 100),
        ("bytes=2000-3000, 5000-", 1000),
        ("bytes=-0", 100),
        ("bytes=-0,-0", 100),
        ("bytes=0-", 0),
        ("bytes=0-0", 0),
        ("bytes=99999999999999999999999-", 100),
        ("bytes=18446744073709551615-", 100),
        ("bytes=18446744073709551615-", u64::MAX),
    ] {
        assert_eq!(parse(value, size), Unsatisfiable, "{value} of {size}");
    }
}

#[test]
fn invalid_headers_are_ignored() {
    for value in [
        "",
        "bytes",
        "=0-1",
        "by tes=0-1",
        "bytes=",
        "bytes=,",
        "bytes= , ",
        "bytes=5-2",
        "bytes=5-1",
        "bytes=5-4",
        "bytes=abc",
        "bytes=a-b",
        "bytes=x-y",
        "bytes=1",
        "bytes=-",
        "bytes=--1",
        "bytes=+1-2",
        "bytes=1-+2",
        "bytes=1-2-3",
        "bytes=1 - 2",
        "bytes=1- 2",
        "bytes=0x10-0x20",
        "bytes=1.5-2",
        "bytes=0-1;q=1",
        "bytes=0-1,x",
    ] {
        assert_eq!(parse(value, 1000), Full(Invalid), "{value:?}");
    }
    assert_eq!(parse_range(b"bytes=0-1\xff", 100), Full(Invalid));
    assert_eq!(parse_range(b"bytes=\xff0-1", 100), Full(Invalid));
    assert_eq!(parse_range(b"b\xffytes=0-1", 100), Full(Invalid));
}

#[test]
fn huge_numbers_saturate() {
    let huge = "99999999999999999999999999999999999999";
    assert_eq!(parse(&format!("bytes=0-{huge}"), 100), p(&[(0, 99)]));
    assert_eq!(parse(&format!("bytes=-{huge}"), 100), p(&[(0, 99)]));
    assert_eq!(parse(&format!("bytes={huge}-"), 100), Unsatisfiable);
    assert_eq!(parse(&format!("bytes={huge}-{huge}"), 100), Unsatisfiable);
    // The largest representation: the last position is u64::MAX - 1.
    let max = u64::MAX;
    assert_eq!(parse("bytes=0-", max), p(&[(0, max - 1)]));
    assert_eq!(parse("bytes=-1", max), p(&[(max - 1, max - 1)]));
    assert_eq!(parse(&format!("bytes=-{huge}"), max), p(&[(0, max - 1)]));
    assert_eq!(
        parse(&format!("bytes={}-", max - 1), max),
        p(&[(max - 1, max - 1)])
    );
    assert_eq!(parse("bytes=0-,0-", max), Full(ExceedsRepresentation));
}

#[test]
fn empty_representation() {
    // A non-zero suffix is satisfiable (RFC 9110 14.1.1) but has no byte to send.
    assert_eq!(parse("bytes=-5", 0), Full(EmptyRepresentation));
    assert_eq!(parse("bytes=0-,-1", 0), Full(EmptyRepresentation));
    assert_eq!(parse("bytes=-0", 0), Unsatisfiable);
    assert_eq!(parse("bytes=0-", 0), Unsatisfiable);
    assert_eq!(parse("items=0-", 0), Full(UnknownUnit));
}

#[test]
fn at_most_max_ranges() {
    let ok = list((0..MAX_RANGES).map(|i| format!("{i}-{i}")));
    assert!(matches!(parse(&ok, 100), Partial(s) if s.len() == MAX_RANGES));
    let same = list((0..MAX_RANGES).map(|_| "0-0".to_string()));
    assert!(matches!(parse(&same, 1000), Partial(s) if s.len() == MAX_RANGES));
    for n in [MAX_RANGES + 1, 20, 1000] {
        let many = list((0..n).map(|i| format!("{}-{}", i * 2, i * 2)));
        assert_eq!(parse(&many, 100_000), Full(TooManyRanges), "{n}");
    }
    // Unsatisfiable specs count too: the bound is on the work a header causes.
    let mixed = list((0..MAX_RANGES + 1).map(|i| format!("{}-", 1000 + i)));
    assert_eq!(parse(&mixed, 100), Full(TooManyRanges));
    // Empty list elements do not count.
    let sparse = format!("{ok},,,");
    assert!(matches!(parse(&sparse, 100), Partial(s) if s.len() == MAX_RANGES));
}

#[test]
fn overlaps_are_served_unless_they_exceed_the_whole() {
    assert_eq!(parse("bytes=0-10, 5-20", 100), p(&[(0, 10), (5, 20)]));
    assert_eq!(parse("bytes=0-49,50-99", 100), p(&[(0, 49), (50, 99)]));
    assert_eq!(parse("bytes=0-50,50-99", 100), Full(ExceedsRepresentation));
    assert_eq!(parse("bytes=0-99,0-99", 100), Full(ExceedsRepresentation));
    assert_eq!(parse("bytes=0-,0-", 100), Full(ExceedsRepresentation));
    assert_eq!(parse("bytes=-60,0-59", 100), Full(ExceedsRepresentation));
}

/// Every single range-spec with small numbers against a model of RFC 9110 14.1.
#[test]
fn single_specs_match_the_model() {
    for size in 0..12u64 {
        for a in 0..15u64 {
            for b in 0..15u64 {
                let want = if b < a {
                    Full(Invalid)
                } else if a >= size {
                    Unsatisfiable
                } else {
                    p(&[(a, b.min(size - 1))])
                };
                assert_eq!(
                    parse(&format!("bytes={a}-{b}"), size),
                    want,
                    "{a}-{b}/{size}"
                );
            }
            let open = if a >= size {
                Unsatisfiable
            } else {
                p(&[(a, size - 1)])
            };
            assert_eq!(parse(&format!("bytes={a}-"), size), open, "{a}-/{size}");
            let suffix = match (a, size) {
                (0, _) => Unsatisfiable,
                (_, 0) => Full(EmptyRepresentation),
                _ => p(&[(size - a.min(size), size - 1)]),
            };
            assert_eq!(parse(&format!("bytes=-{a}"), size), suffix, "-{a}/{size}");
        }
    }
}

#[test]
fn byte_range_accessors() {
    let r = br(10, 19);
    assert_eq!((r.first(), r.last(), r.end(), r.len()), (10, 19, 20, 10));
    assert_eq!(r.as_range(), 10..20);
    assert_eq!(Range::from(r), 10..20);
    assert_eq!(ByteRange::new(5, 4), None);
    assert_eq!(ByteRange::new(0, u64::MAX), None);
    assert_eq!(br(0, u64::MAX - 1).len(), u64::MAX);
    let set = RangeSet::from_ranges(&[br(0, 0), br(5, 9)]).unwrap();
    assert_eq!(set.total_len(), 6);
    assert_eq!(format!("{set:?}"), "[0..=0, 5..=9]");
    assert!(RangeSet::from_ranges(&[br(0, 0); MAX_RANGES + 1]).is_none());
}

#[test]
fn boundaries_are_deterministic_hex() {
    let a = Boundary::from_seed(42);
    assert_eq!(a, Boundary::from_seed(42));
    assert_ne!(a, Boundary::from_seed(43));
    assert_ne!(Boundary::from_seed(0), Boundary::from_seed(1));
    assert_eq!(a.as_str().len(), BOUNDARY_LEN);
    assert!(a
        .as_str()
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(a.to_string(), a.as_str());
}

fn body_len(m: &MultipartLayout) -> u64 {
    m.parts()
        .map(|p| p.head.len() as u64 + p.range.len())
        .sum::<u64>()
        + m.tail().len() as u64
}

#[test]
fn multipart_heads_and_length() {
    let ranges = [br(0, 0), br(10, 19)];
    let m = MultipartLayout::new(&ranges, 100, Some(b"text/plain"), "B0UND");
    assert_eq!(m.content_type(), b"multipart/byteranges; boundary=B0UND");
    let parts: Vec<MultipartPart<'_>> = m.parts().collect();
    assert_eq!(parts.len(), 2);
    assert_eq!(
        parts[0].head,
        b"\r\n--B0UND\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-0/100\r\n\r\n"
    );
    assert_eq!(
        parts[1].head,
        b"\r\n--B0UND\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-19/100\r\n\r\n"
    );
    assert_eq!((parts[0].range, parts[1].range), (ranges[0], ranges[1]));
    assert_eq!(m.tail(), b"\r\n--B0UND--\r\n");
    assert_eq!(m.content_length(), body_len(&m));
    assert_eq!(
        m.content_length(),
        1 + 10 + m.tail().len() as u64 + (parts[0].head.len() + parts[1].head.len()) as u64
    );
}

#[test]
fn multipart_without_content_type() {
    let b = Boundary::from_seed(7);
    let m = MultipartLayout::new(&[br(0, 9), br(20, 29)], 100, None, b.as_str());
    let head = m.parts().next().unwrap().head;
    assert_eq!(
        head,
        format!("\r\n--{b}\r\nContent-Range: bytes 0-9/100\r\n\r\n").as_bytes()
    );
    assert_eq!(m.content_length(), body_len(&m));
    assert!(m
        .tail()
        .windows(BOUNDARY_LEN)
        .any(|w| w == b.as_str().as_bytes()));
}

#[test]
fn multipart_edge_layouts() {
    let none = MultipartLayout::new(&[], 0, None, "b");
    assert_eq!(none.parts().len(), 0);
    assert_eq!(none.tail(), b"\r\n--b--\r\n");
    assert_eq!(none.content_length(), none.tail().len() as u64);
    // The whole u64 range does not overflow the length (it saturates).
    let max = u64::MAX;
    let big = MultipartLayout::new(&[br(0, max - 1), br(0, max - 1)], max, None, "b");
    assert_eq!(big.content_length(), u64::MAX);
    assert!(big
        .parts()
        .all(|p| p.head.ends_with(b"/18446744073709551615\r\n\r\n")));
}

#[test]
fn content_range_forms() {
    let cr = |v: &str| parse_content_range(v.as_bytes());
    let r = |a, b, n| {
        Some(ContentRange {
            range: Some(br(a, b)),
            complete_len: n,
        })
    };
    assert_eq!(cr("bytes 0-9/10"), r(0, 9, Some(10)));
    assert_eq!(cr("BYTES 4-9/10"), r(4, 9, Some(10)));
    assert_eq!(cr(" bytes 0-0/1 "), r(0, 0, Some(1)));
    assert_eq!(cr("bytes 5-9/*"), r(5, 9, None));
    assert_eq!(
        cr("bytes */100"),
        Some(ContentRange {
            range: None,
            complete_len: Some(100)
        })
    );
    // 100 GiB and the largest position a u64 can name below its length.
    assert_eq!(
        cr("bytes 107374182300-107374182399/107374182400"),
        r(107374182300, 107374182399, Some(107374182400))
    );
    for bad in [
        "",
        "bytes",
        "bytes ",
        "bytes */*",
        "bytes 9-0/10",
        "bytes 0-10/10",
        "bytes 0-9/9",
        "bytes -9/10",
        "bytes 0-/10",
        "bytes 0-9/",
        "bytes 0-9",
        "items 0-9/10",
        "bytes=0-9/10",
        "bytes 0-9/1x",
        "bytes +0-9/10",
        "bytes 0-18446744073709551616/*",
        "bytes 0-18446744073709551615/*",
        "bytes 0 -9/10",
    ] {
        assert_eq!(cr(bad), None, "{bad:?}");
    }
}
