//! Request and connection limits (nginx's `limit_req` and `limit_conn`): the zones
//! (`[[limit_req_zone]]`, `[[limit_conn_zone]]`), the lists a location, a server or the
//! top level applies (`limit_req = [...]`, `limit_conn = {...}`), their inheritance and
//! their checks. `docs/limits.md` says what they do; `crate::limit` does it.
//!
//! Inheritance is nginx's: a location without `limit_req` takes its server's, a server
//! without one the top level's (top-level locations, the implicit server, the top
//! level's). [`inherit`] copies the values down once, at load, so that everything after
//! it reads a location's own keys only.

use super::verr::{err, VErr};
use super::{Config, Dur, Size};
use crate::vars::Known;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use toml::Spanned;

/// `[[limit_req_zone]]`: a request rate per key, held for the whole node.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitReqZoneCfg {
    pub name: Spanned<String>,
    /// A template (`$binary_remote_addr`); a request whose key renders empty is not
    /// limited by the zone.
    pub key: Spanned<String>,
    /// `"100r/s"` or `"30r/m"` ([`parse_rate`]).
    pub rate: Spanned<String>,
    /// The memory of its table of keys; the least recently seen keys go when it is
    /// full.
    #[serde(default = "default_req_zone_size")]
    pub size: Spanned<Size>,
}

/// `[[limit_conn_zone]]`: connections per key, counted for the whole node.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConnZoneCfg {
    pub name: Spanned<String>,
    /// A template; a connection whose key renders empty is not counted.
    pub key: Spanned<String>,
    /// The memory of its table of keys: at most this many keys hold connections at
    /// once (a new key past it is refused).
    #[serde(default = "default_conn_zone_size")]
    pub size: Spanned<Size>,
}

fn default_req_zone_size() -> Spanned<Size> {
    Spanned::new(0..0, Size(10 << 20))
}
fn default_conn_zone_size() -> Spanned<Size> {
    Spanned::new(0..0, Size(10 << 20))
}

/// One `limit_req` entry: `{ zone, burst = 0, nodelay = false, delay = 0, status = 429,
/// dry_run = false, hold = "0" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitReqCfg {
    pub zone: String,
    /// Requests over the rate taken anyway (delayed to the rate, or served at once with
    /// `nodelay`); past them a request is refused.
    #[serde(default)]
    pub burst: u64,
    /// Requests within `burst` are served at once, not delayed.
    #[serde(default)]
    pub nodelay: bool,
    /// Of the requests within `burst`, this many are served at once and the rest
    /// delayed (nginx's two-stage limiting).
    #[serde(default)]
    pub delay: u64,
    #[serde(default = "default_limit_status")]
    pub status: u16,
    /// Count and log what would be refused or delayed; refuse and delay nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// A refused request's answer waits until a request of its key would pass again,
    /// at most this long (0, the default: answered at once). A client that sends as
    /// fast as it can is then answered at the rate, not at the server's speed.
    #[serde(default)]
    pub hold: Dur,
}

/// The longest `hold` of a `limit_req` entry.
pub const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(60);

/// One `limit_conn` entry: `{ zone, max, status = 429 }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConnCfg {
    pub zone: String,
    pub max: u64,
    #[serde(default = "default_limit_status")]
    pub status: u16,
}

fn default_limit_status() -> u16 {
    429
}

/// A list that may also be written as its one table: `limit_conn = { zone = "a", max = 2 }`
/// or `limit_conn = [{ ... }, { ... }]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table { zone = \"...\", ... } or a list of them")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|t| OneOrMany(vec![t]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(OneOrMany)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `limit_req` as a location, a server or the top level writes it.
pub type LimitReqList = Option<Spanned<OneOrMany<LimitReqCfg>>>;
/// `limit_conn` as a location, a server or the top level writes it.
pub type LimitConnList = Option<Spanned<OneOrMany<LimitConnCfg>>>;

/// The unit of a [`Rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Second,
    Minute,
}

/// A request rate: `count` requests per second or per minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u64,
    pub per: Per,
}

/// The highest rate a zone takes: one request per microsecond per key (a finer rate
/// limits nothing a client could notice, and keeps the interval exact to 0.1%).
pub const MAX_RATE_PER_SECOND: u64 = 1_000_000;

impl Rate {
    /// The time one request takes at this rate (GCRA's emission interval), in
    /// nanoseconds.
    pub fn interval_ns(&self) -> u64 {
        let period: u64 = match self.per {
            Per::Second => 1_000_000_000,
            Per::Minute => 60_000_000_000,
        };
        (period / self.count.max(1)).max(1)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per {
            Per::Second => "s",
            Per::Minute => "m",
        };
        write!(f, "{}r/{unit}", self.count)
    }
}

/// Parses `"100r/s"` or `"30r/m"`, as nginx writes a rate: a whole number of requests,
/// at least 1, per second or per minute.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let bad = || {
        format!("invalid rate {s:?}: expected requests per second or minute, such as \"100r/s\" or \"30r/m\"")
    };
    let (num, per) = if let Some(n) = s.strip_suffix("r/s") {
        (n, Per::Second)
    } else if let Some(n) = s.strip_suffix("r/m") {
        (n, Per::Minute)
    } else {
        return Err(bad());
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let count: u64 = num.parse().map_err(|_| bad())?;
    if count == 0 {
        return Err(format!(
            "invalid rate {s:?}: at least 1 request (\"1r/s\" or \"1r/m\")"
        ));
    }
    let per_second_max = match per {
        Per::Second => MAX_RATE_PER_SECOND,
        Per::Minute => MAX_RATE_PER_SECOND * 60,
    };
    if count > per_second_max {
        return Err(format!(
            "invalid rate {s:?}: at most {MAX_RATE_PER_SECOND}r/s per key"
        ));
    }
    Ok(Rate { count, per })
}

/// Smallest zone (nginx's is 8 pages, 32k).
pub const MIN_ZONE_SIZE: u64 = 32 << 10;
/// Largest zone (its memory is taken as the table fills, not all at once).
pub const MAX_ZONE_SIZE: u64 = 64 << 30;
/// Largest `burst` and `delay`.
pub const MAX_BURST: u64 = 1_000_000;
/// Largest `max` of a `limit_conn`.
pub const MAX_CONN: u64 = 1_000_000;
/// Most `limit_req` (or `limit_conn`) entries one location applies.
pub const MAX_RULES: usize = 16;

/// Copies `limit_req` and `limit_conn` down: top level to servers and top-level
/// locations, each server to its locations, where they have none of their own.
pub fn inherit(cfg: &mut Config) {
    let (top_req, top_conn) = (cfg.limit_req.clone(), cfg.limit_conn.clone());
    for l in &mut cfg.location {
        if l.limit_req.is_none() {
            l.limit_req = top_req.clone();
        }
        if l.limit_conn.is_none() {
            l.limit_conn = top_conn.clone();
        }
    }
    for s in &mut cfg.server {
        if s.limit_req.is_none() {
            s.limit_req = top_req.clone();
        }
        if s.limit_conn.is_none() {
            s.limit_conn = top_conn.clone();
        }
        for l in &mut s.location {
            if l.limit_req.is_none() {
                l.limit_req = s.limit_req.clone();
            }
            if l.limit_conn.is_none() {
                l.limit_conn = s.limit_conn.clone();
            }
        }
    }
}

fn span_of<T>(s: &Spanned<T>) -> Option<std::ops::Range<usize>> {
    Some(s.span()).filter(|s| s.end > 0)
}

/// The zones (names unique over both kinds, keys that compile, rates, sizes) and every
/// `limit_req` / `limit_conn` (known zones, each once per list, statuses, bursts).
pub(super) fn validate<'a>(cfg: &'a Config, known: &Known) -> Result<(), VErr> {
    let mut names: Vec<&str> = Vec::new();
    let mut name = |n: &'a Spanned<String>, key: &str| -> Result<(), VErr> {
        let v = n.get_ref();
        if v.is_empty()
            || v.bytes()
                .any(|b| b.is_ascii_control() || b == b'"' || b == b'\\')
        {
            return err(
                span_of(n),
                key,
                "a zone needs a name (no quotes, backslashes or control characters)",
            );
        }
        if names.contains(&v.as_str()) {
            return err(span_of(n), key, format!("zone {v:?} is defined twice"));
        }
        names.push(v);
        Ok(())
    };
    let size = |s: &Spanned<Size>, key: &str| -> Result<(), VErr> {
        let v = s.get_ref().0;
        if !(MIN_ZONE_SIZE..=MAX_ZONE_SIZE).contains(&v) {
            return err(span_of(s), key, "must be between 32k and 64g");
        }
        Ok(())
    };
    let key_template = |k: &Spanned<String>, key: &str| -> Result<(), VErr> {
        super::sites::template(k.get_ref(), known)
            .map(|_| ())
            .map_err(|m| VErr {
                span: span_of(k),
                key: key.into(),
                message: m,
            })
    };
    for z in &cfg.limit_req_zone {
        name(&z.name, "limit_req_zone.name")?;
        key_template(&z.key, "limit_req_zone.key")?;
        parse_rate(z.rate.get_ref()).map_err(|m| VErr {
            span: span_of(&z.rate),
            key: "limit_req_zone.rate".into(),
            message: m,
        })?;
        size(&z.size, "limit_req_zone.size")?;
    }
    for z in &cfg.limit_conn_zone {
        name(&z.name, "limit_conn_zone.name")?;
        key_template(&z.key, "limit_conn_zone.key")?;
        size(&z.size, "limit_conn_zone.size")?;
    }
    let levels = std::iter::once((&cfg.limit_req, &cfg.limit_conn, ""))
        .chain(
            cfg.server
                .iter()
                .map(|s| (&s.limit_req, &s.limit_conn, "server.")),
        )
        .chain(
            cfg.location
                .iter()
                .chain(cfg.server.iter().flat_map(|s| &s.location))
                .map(|l| (&l.limit_req, &l.limit_conn, "location.")),
        );
    for (req, conn, prefix) in levels {
        if let Some(list) = req {
            check_req(cfg, list, &format!("{prefix}limit_req"))?;
        }
        if let Some(list) = conn {
            check_conn(cfg, list, &format!("{prefix}limit_conn"))?;
        }
    }
    Ok(())
}

fn check_status(status: u16, at: Option<std::ops::Range<usize>>, key: &str) -> Result<(), VErr> {
    if !(400..=599).contains(&status) {
        return err(
            at,
            key,
            format!("status {status} is not between 400 and 599"),
        );
    }
    Ok(())
}

fn check_req(cfg: &Config, list: &Spanned<OneOrMany<LimitReqCfg>>, key: &str) -> Result<(), VErr> {
    let at = span_of(list);
    let items = &list.get_ref().0;
    if items.len() > MAX_RULES {
        return err(at, key, format!("at most {MAX_RULES} zones"));
    }
    for (i, r) in items.iter().enumerate() {
        if !cfg
            .limit_req_zone
            .iter()
            .any(|z| *z.name.get_ref() == r.zone)
        {
            let hint = if cfg
                .limit_conn_zone
                .iter()
                .any(|z| *z.name.get_ref() == r.zone)
            {
                " (it is a [[limit_conn_zone]])"
            } else {
                ""
            };
            return err(
                at,
                &format!("{key}.zone"),
                format!("no [[limit_req_zone]] named {:?}{hint}", r.zone),
            );
        }
        if items[..i].iter().any(|o| o.zone == r.zone) {
            return err(
                at,
                &format!("{key}.zone"),
                format!("zone {:?} is listed twice", r.zone),
            );
        }
        if r.burst > MAX_BURST {
            return err(at, &format!("{key}.burst"), format!("at most {MAX_BURST}"));
        }
        if r.delay > MAX_BURST {
            return err(at, &format!("{key}.delay"), format!("at most {MAX_BURST}"));
        }
        if r.nodelay && r.delay > 0 {
            return err(
                at,
                &format!("{key}.delay"),
                "set nodelay or delay, not both (nodelay serves the whole burst at once)",
            );
        }
        check_status(r.status, at.clone(), &format!("{key}.status"))?;
        if r.hold.0 > MAX_HOLD {
            return err(at, &format!("{key}.hold"), "at most 60s");
        }
    }
    Ok(())
}

fn check_conn(
    cfg: &Config,
    list: &Spanned<OneOrMany<LimitConnCfg>>,
    key: &str,
) -> Result<(), VErr> {
    let at = span_of(list);
    let items = &list.get_ref().0;
    if items.len() > MAX_RULES {
        return err(at, key, format!("at most {MAX_RULES} zones"));
    }
    for (i, c) in items.iter().enumerate() {
        if !cfg
            .limit_conn_zone
            .iter()
            .any(|z| *z.name.get_ref() == c.zone)
        {
            let hint = if cfg
                .limit_req_zone
                .iter()
                .any(|z| *z.name.get_ref() == c.zone)
            {
                " (it is a [[limit_req_zone]])"
            } else {
                ""
            };
            return err(
                at,
                &format!("{key}.zone"),
                format!("no [[limit_conn_zone]] named {:?}{hint}", c.zone),
            );
        }
        if items[..i].iter().any(|o| o.zone == c.zone) {
            return err(
                at,
                &format!("{key}.zone"),
                format!("zone {:?} is listed twice", c.zone),
            );
        }
        if !(1..=MAX_CONN).contains(&c.max) {
            return err(
                at,
                &format!("{key}.max"),
                format!("must be between 1 and {MAX_CONN}"),
            );
        }
        check_status(c.status, at.clone(), &format!("{key}.status"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_nginx_writes_them() {
        let r = parse_rate("100r/s").unwrap();
        assert_eq!(
            r,
            Rate {
                count: 100,
                per: Per::Second
            }
        );
        assert_eq!(r.interval_ns(), 10_000_000);
        assert_eq!(parse_rate("30r/m").unwrap().interval_ns(), 2_000_000_000);
        assert_eq!(parse_rate("1r/m").unwrap().interval_ns(), 60_000_000_000);
        assert_eq!(parse_rate("3r/s").unwrap().interval_ns(), 333_333_333);
        assert_eq!(parse_rate("1000000r/s").unwrap().interval_ns(), 1_000);
        assert_eq!(parse_rate("30r/m").unwrap().to_string(), "30r/m");
        for bad in [
            "",
            "0r/s",
            "0r/m",
            "100",
            "100r",
            "100/s",
            "r/s",
            "-1r/s",
            "+1r/s",
            "1.5r/s",
            "100r/h",
            "100 r/s",
            " 100r/s",
            "100r/s ",
            "abc",
            "1000001r/s",
            "99999999999999999999r/s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse_rate("0r/s").unwrap_err().contains("at least 1"));
    }
}
