//! A cached location's caching knobs, compiled once from its `[[location]]` config:
//! `use_stale` as a bitset, `cache_bypass`/`no_cache` as typed predicates (header names
//! lower-cased at load), the lock timeout as a `Duration`. The request path reads these
//! fields and never the serde `Location`.

use crate::config::{Condition, Location, UseStale};
use edge_http::RequestHead;
use std::time::Duration;

/// `use_stale`: a set of [`UseStale`] conditions, one bit each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StaleSet(u16);

impl StaleSet {
    fn bit(u: UseStale) -> u16 {
        1 << (match u {
            UseStale::Error => 0,
            UseStale::Timeout => 1,
            UseStale::Updating => 2,
            UseStale::Http500 => 3,
            UseStale::Http502 => 4,
            UseStale::Http503 => 5,
            UseStale::Http504 => 6,
            UseStale::Http5xx => 7,
        })
    }

    pub fn of(list: &[UseStale]) -> StaleSet {
        StaleSet(list.iter().fold(0, |acc, &u| acc | Self::bit(u)))
    }

    pub fn contains(self, u: UseStale) -> bool {
        self.0 & Self::bit(u) != 0
    }
}

/// One `cache_bypass`/`no_cache` test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Predicate {
    /// A request header (name lower-cased) with a true value.
    Header(String),
    /// A cookie (name as written: cookie names are case-sensitive).
    Cookie(String),
    /// A query argument (name as written).
    Arg(String),
}

/// A list of conditions: holds when any predicate holds. Like nginx's variables, a
/// header, cookie or query argument counts when present with a value that is neither
/// empty nor `0`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Predicates(Vec<Predicate>);

impl Predicates {
    pub fn compile(conds: &[Condition]) -> Predicates {
        let mut out = Vec::new();
        for c in conds {
            if let Some(h) = &c.header {
                out.push(Predicate::Header(h.to_ascii_lowercase()));
            }
            if let Some(k) = &c.cookie {
                out.push(Predicate::Cookie(k.clone()));
            }
            if let Some(a) = &c.arg {
                out.push(Predicate::Arg(a.clone()));
            }
        }
        Predicates(out)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any predicate holds for `req`.
    pub fn any(&self, req: &RequestHead) -> bool {
        self.0.iter().any(|p| p.holds(req))
    }
}

fn truthy(v: &[u8]) -> bool {
    let v = v.trim_ascii();
    !v.is_empty() && v != b"0"
}

impl Predicate {
    pub fn holds(&self, req: &RequestHead) -> bool {
        match self {
            Predicate::Header(h) => req.headers.get_all(h).any(truthy),
            Predicate::Cookie(name) => req.headers.get_all("cookie").any(|v| {
                v.split(|&b| b == b';').any(|pair| {
                    let (k, val) = split_eq(pair);
                    k.trim_ascii() == name.as_bytes() && truthy(val)
                })
            }),
            Predicate::Arg(name) => req.query().is_some_and(|q| {
                q.split('&').any(|pair| {
                    let (k, val) = split_eq(pair.as_bytes());
                    k == name.as_bytes() && truthy(val)
                })
            }),
        }
    }
}

fn split_eq(pair: &[u8]) -> (&[u8], &[u8]) {
    match pair.iter().position(|&b| b == b'=') {
        Some(i) => (&pair[..i], &pair[i + 1..]),
        None => (pair, b""),
    }
}

/// The caching knobs of one proxied location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRules {
    pub use_stale: StaleSet,
    pub background_update: bool,
    pub cache_lock: bool,
    pub cache_lock_timeout: Duration,
    /// `range_fetch`: whether a miss with one `Range` forwards it to the origin.
    pub range_fetch: crate::config::RangeFetch,
    pub cache_min_uses: u32,
    /// `slice`: the slice size in bytes (0: objects are cached whole).
    pub slice: u64,
    /// `slice_prefetch`: slices fetched ahead of a reader (0: none).
    pub slice_prefetch: u32,
    /// `cache_revalidate = false` turns conditional refreshes off (None: on).
    pub cache_revalidate: bool,
    pub cache_bypass: Predicates,
    pub no_cache: Predicates,
}

impl CacheRules {
    pub fn compile(loc: &Location) -> CacheRules {
        CacheRules {
            use_stale: StaleSet::of(&loc.use_stale),
            background_update: loc.background_update,
            cache_lock: loc.cache_lock,
            cache_lock_timeout: loc.cache_lock_timeout.0,
            range_fetch: loc.range_fetch,
            cache_min_uses: loc.cache_min_uses,
            slice: loc.slice.as_ref().map_or(0, |s| s.get_ref().0),
            slice_prefetch: loc.slice_prefetch.as_ref().map_or(0, |n| *n.get_ref()),
            cache_revalidate: loc.cache_revalidate != Some(false),
            cache_bypass: Predicates::compile(&loc.cache_bypass),
            no_cache: Predicates::compile(&loc.no_cache),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::req;

    fn cond(h: Option<&str>, c: Option<&str>, a: Option<&str>) -> Condition {
        Condition {
            header: h.map(String::from),
            cookie: c.map(String::from),
            arg: a.map(String::from),
        }
    }

    #[test]
    fn stale_set_holds_exactly_its_members() {
        use UseStale::*;
        let s = StaleSet::of(&[Error, Http503]);
        assert!(s.contains(Error) && s.contains(Http503));
        for u in [Timeout, Updating, Http500, Http502, Http504, Http5xx] {
            assert!(!s.contains(u), "{u:?}");
        }
        assert_eq!(StaleSet::of(&[]), StaleSet::default());
    }

    #[test]
    fn predicates_header_any_case_cookie_and_arg_exact() {
        let p = Predicates::compile(&[cond(Some("X-Skip"), None, None)]);
        assert!(p.any(&req("/", &[("x-skip", "1")])));
        assert!(!p.any(&req("/", &[("X-Skip", "0")])));
        assert!(!p.any(&req("/", &[("X-Skip", " ")])));
        assert!(!p.any(&req("/", &[])));
        let p = Predicates::compile(&[cond(None, Some("nocache"), Some("fresh"))]);
        assert!(p.any(&req("/", &[("Cookie", "a=b; nocache=yes")])));
        assert!(!p.any(&req("/", &[("Cookie", "NOCACHE=yes")])));
        assert!(!p.any(&req("/", &[("Cookie", "nocache=0")])));
        assert!(p.any(&req("/x?a=1&fresh=1", &[])));
        assert!(!p.any(&req("/x?a=1&fresh", &[])));
        assert!(!p.any(&req("/x?Fresh=1", &[])));
        assert!(Predicates::compile(&[]).is_empty());
    }
}
