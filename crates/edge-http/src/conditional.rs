//! Conditional requests (RFC 9110 13): `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since` and `If-Range`, evaluated against a
//! representation's validators.
//!
//! How it fits: a handler about to send a 2xx for a representation describes it with
//! [`Validators`] (its `ETag` and `Last-Modified`), calls [`evaluate_preconditions`]
//! (412, 304, or go on) and then [`evaluate_range`] (whether `Range` applies, see
//! [`crate::parse_range`]). The static file handler and the test origin evaluate as an
//! origin server; cache hits as a cache, which does not evaluate `If-Match` or
//! `If-Unmodified-Since` (RFC 9111 4.3.2). The request's fields are read through
//! [`RequestFields`], implemented for [`HeaderMap`] and for httparse's header slice, so
//! nothing is copied and nothing is allocated.
//!
//! Callers must not evaluate preconditions when the response would not otherwise be a
//! 2xx (RFC 9110 13.2.1): a cached 404 is sent as it is.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::headers::trim_ows;
use crate::range::{parse_range, RangeIgnored, RangeOutcome};
use crate::{parse_http_date, HeaderMap, Method};

/// Read access to a request's header fields: the value of the `n`th field line called
/// `name` (ASCII case-insensitive), in wire order. List-valued fields such as
/// `If-None-Match` may come as several lines, which is why lines are numbered.
pub trait RequestFields {
    /// The value of the `n`th (from 0) field line called `name`, if there are that many.
    fn field(&self, name: &str, n: usize) -> Option<&[u8]>;
}

impl RequestFields for HeaderMap {
    fn field(&self, name: &str, n: usize) -> Option<&[u8]> {
        self.get_nth(name, n)
    }
}

impl RequestFields for [httparse::Header<'_>] {
    fn field(&self, name: &str, n: usize) -> Option<&[u8]> {
        self.iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .nth(n)
            .map(|h| h.value)
    }
}

/// The validators of the selected representation (RFC 9110 8.8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Validators<'a> {
    /// The `ETag` field value as sent, e.g. `"abc"` or `W/"abc"`.
    pub etag: Option<&'a [u8]>,
    /// `Last-Modified`; compared at one-second resolution, as HTTP dates have.
    pub last_modified: Option<SystemTime>,
}

impl<'a> Validators<'a> {
    /// Validators from an ETag held as text (as sent, quotes included).
    pub fn new(etag: Option<&'a str>, last_modified: Option<SystemTime>) -> Validators<'a> {
        Validators {
            etag: etag.map(str::as_bytes),
            last_modified,
        }
    }
}

/// Who evaluates the preconditions, which decides which of them apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipient {
    /// The origin server of the representation: every precondition applies.
    OriginServer,
    /// A cache answering from a stored response: `If-Match` and `If-Unmodified-Since` are
    /// "not applicable to a cache" (RFC 9111 4.3.2) and are ignored.
    Cache,
}

/// The result of evaluating a request's preconditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition stops the request: go on (and look at `Range`).
    Proceed,
    /// 304 Not Modified: send the validator and caching headers, no body.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates the preconditions of a request for a representation with validators `v`, in
/// the order of RFC 9110 13.2.2:
/// 1. `If-Match` (strong comparison; `*` matches any representation) false → 412;
/// 2. otherwise `If-Unmodified-Since` earlier than Last-Modified → 412;
/// 3. `If-None-Match` (weak comparison; `*` matches any representation) true → 304 for
///    GET and HEAD, 412 for other methods;
/// 4. otherwise, for GET and HEAD, `If-Modified-Since` at or after Last-Modified → 304.
///
/// Dates that do not parse, and date fields sent more than once, are ignored. Steps 1
/// and 2 are skipped for [`Recipient::Cache`]. `If-Range` is part of
/// [`evaluate_range`].
pub fn evaluate_preconditions<F: RequestFields + ?Sized>(
    method: &Method,
    req: &F,
    v: &Validators<'_>,
    recipient: Recipient,
) -> Precondition {
    let get_or_head = matches!(method, Method::Get | Method::Head);
    if recipient == Recipient::OriginServer {
        if req.field("if-match", 0).is_some() {
            let etag = v.etag.map(EntityTag::parse);
            let any = any_tag(req, "if-match", |t| {
                t == b"*" || etag.is_some_and(|e| e.strong_eq(EntityTag::parse(t)))
            });
            if !any {
                return Precondition::Failed;
            }
        } else if let (Some(since), Some(lm)) =
            (single_date(req, "if-unmodified-since"), v.last_modified)
        {
            if unix_secs(lm) > unix_secs(since) {
                return Precondition::Failed;
            }
        }
    }
    if req.field("if-none-match", 0).is_some() {
        let etag = v.etag.map(EntityTag::parse);
        let any = any_tag(req, "if-none-match", |t| {
            t == b"*" || etag.is_some_and(|e| e.weak_eq(EntityTag::parse(t)))
        });
        if any {
            return if get_or_head {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if get_or_head {
        if let (Some(since), Some(lm)) = (single_date(req, "if-modified-since"), v.last_modified) {
            // HTTP dates have one-second resolution: a file modified at 12:00:00.3 was
            // announced as 12:00:00.
            if unix_secs(lm) <= unix_secs(since) {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::Proceed
}

/// Decides what a request's `Range` asks of a representation of `size` bytes with
/// validators `v`: `Range` applies to GET only (RFC 9110 14.2), and only when `If-Range`
/// (if any) matches (see [`if_range_matches`]); then [`parse_range`] decides.
/// Allocation-free; without a `Range` header it costs one field lookup.
pub fn evaluate_range<F: RequestFields + ?Sized>(
    method: &Method,
    req: &F,
    v: &Validators<'_>,
    size: u64,
) -> RangeOutcome {
    let Some(range) = req.field("range", 0) else {
        return RangeOutcome::Full(RangeIgnored::Absent);
    };
    if *method != Method::Get {
        return RangeOutcome::Full(RangeIgnored::NotGet);
    }
    if req.field("range", 1).is_some() {
        return RangeOutcome::Full(RangeIgnored::Invalid); // Range is not a list field
    }
    if let Some(cond) = req.field("if-range", 0) {
        if req.field("if-range", 1).is_some() || !if_range_matches(cond, v) {
            return RangeOutcome::Full(RangeIgnored::IfRangeMismatch);
        }
    }
    parse_range(range, size)
}

/// The `If-Range` condition (RFC 9110 13.1.5): an entity-tag matches only by strong
/// comparison (a weak tag on either side never matches); an HTTP-date matches only a
/// Last-Modified in exactly that second. Anything else does not match.
pub fn if_range_matches(value: &[u8], v: &Validators<'_>) -> bool {
    let value = trim_ows(value);
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return v
            .etag
            .is_some_and(|e| EntityTag::parse(e).strong_eq(EntityTag::parse(value)));
    }
    match (date(value), v.last_modified) {
        (Some(d), Some(lm)) => unix_secs(lm) == unix_secs(d),
        _ => false,
    }
}

/// An entity-tag split into its weakness and opaque-tag (RFC 9110 8.8.3). A value that
/// is not a quoted string (an origin that sends `ETag: abc`) is kept as it is and still
/// compares equal to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntityTag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl<'a> EntityTag<'a> {
    fn parse(s: &'a [u8]) -> EntityTag<'a> {
        let s = trim_ows(s);
        match s.strip_prefix(b"W/") {
            Some(rest) => EntityTag {
                weak: true,
                opaque: rest,
            },
            None => EntityTag {
                weak: false,
                opaque: s,
            },
        }
    }

    /// Weak comparison (RFC 9110 8.8.3.2): opaque-tags equal, weakness ignored.
    fn weak_eq(self, other: EntityTag<'_>) -> bool {
        !self.opaque.is_empty() && self.opaque == other.opaque
    }

    /// Strong comparison: both strong and opaque-tags equal.
    fn strong_eq(self, other: EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.weak_eq(other)
    }
}

/// True when some element of the list field `name` (all its lines) satisfies `pred`.
fn any_tag<F: RequestFields + ?Sized>(
    req: &F,
    name: &str,
    mut pred: impl FnMut(&[u8]) -> bool,
) -> bool {
    let mut n = 0;
    while let Some(value) = req.field(name, n) {
        if (TagList { rest: value }).any(&mut pred) {
            return true;
        }
        n += 1;
    }
    false
}

/// The elements of `If-Match` / `If-None-Match` (`"*" / #entity-tag`), trimmed. Commas
/// inside a quoted opaque-tag do not split it (`etagc` includes `,`); unquoted elements
/// run to the next comma.
struct TagList<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for TagList<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let skip = self
            .rest
            .iter()
            .position(|&b| !matches!(b, b',' | b' ' | b'\t'))?;
        let s = &self.rest[skip..];
        // Index of the opening quote, if the element is a quoted entity-tag.
        let quote = match s {
            [b'W', b'/', b'"', ..] => Some(2),
            [b'"', ..] => Some(0),
            _ => None,
        };
        let end = match quote {
            // Through the closing quote (or to the end when it is missing).
            Some(q) => s[q + 1..]
                .iter()
                .position(|&b| b == b'"')
                .map_or(s.len(), |i| q + i + 2),
            None => s.iter().position(|&b| b == b',').unwrap_or(s.len()),
        };
        self.rest = &s[end..];
        Some(trim_ows(&s[..end]))
    }
}

/// The HTTP-date in field `name`; `None` when absent, invalid, or sent more than once.
fn single_date<F: RequestFields + ?Sized>(req: &F, name: &str) -> Option<SystemTime> {
    if req.field(name, 1).is_some() {
        return None;
    }
    date(req.field(name, 0)?)
}

fn date(value: &[u8]) -> Option<SystemTime> {
    parse_http_date(std::str::from_utf8(value).ok()?)
}

/// Whole seconds since the epoch, rounded down (negative before 1970).
fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            -secs - i64::from(d.subsec_nanos() > 0)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
