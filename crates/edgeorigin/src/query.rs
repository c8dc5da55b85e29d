//! Fault and behaviour injection: the query parameters every path understands.
//!
//! How it fits: the router hands the raw query string to [`Inject::parse`] once per
//! request; the response builder and the body writer then read plain fields. Values are
//! validated here (numbers in range, header values without control characters), so a
//! hostile query can neither panic the server nor inject response headers; a bad value
//! of a known parameter is a 400 with a message naming it. Unknown parameters are ignored.

/// Longest `delay_ms` accepted (10 minutes): longer is a typo, not a test.
pub const MAX_DELAY_MS: u64 = 600_000;
/// Longest `/burn?us=` accepted (10 s of CPU).
pub const MAX_BURN_US: u64 = 10_000_000;
/// Longest decoded `tag=` / `vary=` value.
pub const MAX_VALUE_LEN: usize = 1024;
/// Largest object `ce=` encodes (the whole body is encoded in memory per request).
pub const MAX_CE_SIZE: u64 = 16 << 20;

/// What one request asked the origin to do besides serving the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inject {
    /// Sleep this long before sending the head.
    pub delay_ms: u64,
    /// Pace the body at this many bytes per second.
    pub slow_bps: Option<u64>,
    /// Answer with this status instead of the natural one.
    pub status: Option<u16>,
    /// Send the head and about half the body, then reset the connection.
    pub reset: bool,
    /// Override `--max-age` in `Cache-Control`.
    pub max_age: Option<u64>,
    /// `stale-while-revalidate=N` added to `Cache-Control` (RFC 5861).
    pub swr: Option<u64>,
    /// `stale-if-error=N` added to `Cache-Control` (RFC 5861).
    pub sie: Option<u64>,
    /// `Cache-Control: no-store`.
    pub no_store: bool,
    /// `Cache-Control: private`.
    pub private: bool,
    /// `Vary: <name>`; the body varies by that request header's value.
    pub vary: Option<String>,
    /// `Set-Cookie: s=1`.
    pub set_cookie: bool,
    /// `Cache-Tag: <tags>` and `Surrogate-Key: <tags, space-separated>`.
    pub tag: Option<String>,
    /// `Transfer-Encoding: chunked` instead of `Content-Length`.
    pub chunked: bool,
    /// Send `ETag` (`etag=0` omits it).
    pub etag: bool,
    /// Send `Last-Modified` (`lm=0` omits it).
    pub last_modified: bool,
    /// `/burn?us=N`: CPU time to spend.
    pub burn_us: u64,
    /// `ce=gzip|br|zstd`: send the object encoded with this content coding (an origin
    /// that compresses its own responses).
    pub ce: Option<edge_compress::Coding>,
}

impl Default for Inject {
    fn default() -> Self {
        Inject {
            delay_ms: 0,
            slow_bps: None,
            status: None,
            reset: false,
            max_age: None,
            swr: None,
            sie: None,
            no_store: false,
            private: false,
            vary: None,
            set_cookie: false,
            tag: None,
            chunked: false,
            etag: true,
            last_modified: true,
            burn_us: 0,
            ce: None,
        }
    }
}

impl Inject {
    /// Parses a query string (without the `?`). Errors name the parameter.
    pub fn parse(query: &str) -> Result<Inject, String> {
        let mut inj = Inject::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = |why: &str| format!("bad query parameter {key}: {why}");
            let value = || percent_decode(raw).ok_or_else(|| bad("invalid percent-encoding"));
            let num = || -> Result<u64, String> {
                let v = value()?;
                v.parse::<u64>()
                    .map_err(|_| bad("not a non-negative integer"))
            };
            let flag = || -> Result<bool, String> {
                match value()?.as_str() {
                    "1" | "true" | "yes" | "on" | "" => Ok(true),
                    "0" | "false" | "no" | "off" => Ok(false),
                    _ => Err(bad("expected 1 or 0")),
                }
            };
            match key {
                "delay_ms" => {
                    inj.delay_ms = num()?;
                    if inj.delay_ms > MAX_DELAY_MS {
                        return Err(bad(&format!("at most {MAX_DELAY_MS}")));
                    }
                }
                "slow_bps" => {
                    let n = num()?;
                    if n == 0 {
                        return Err(bad("must be at least 1"));
                    }
                    inj.slow_bps = Some(n);
                }
                "status" => {
                    let n = num()?;
                    if !(200..=599).contains(&n) {
                        return Err(bad("must be 200..=599"));
                    }
                    inj.status = Some(n as u16);
                }
                "reset" => inj.reset = flag()?,
                "max_age" => inj.max_age = Some(num()?),
                "swr" => inj.swr = Some(num()?),
                "sie" => inj.sie = Some(num()?),
                "no_store" => inj.no_store = flag()?,
                "private" => inj.private = flag()?,
                "set_cookie" => inj.set_cookie = flag()?,
                "chunked" => inj.chunked = flag()?,
                "etag" => inj.etag = flag()?,
                "lm" => inj.last_modified = flag()?,
                "ce" => {
                    let v = value()?;
                    inj.ce = Some(
                        edge_compress::Coding::from_token(&v)
                            .ok_or_else(|| bad("gzip, br or zstd"))?,
                    );
                }
                "us" => {
                    inj.burn_us = num()?;
                    if inj.burn_us > MAX_BURN_US {
                        return Err(bad(&format!("at most {MAX_BURN_US}")));
                    }
                }
                "vary" => {
                    let v = value()?;
                    if v.is_empty() || v.len() > MAX_VALUE_LEN || !v.bytes().all(is_token_byte) {
                        return Err(bad("must be a header name"));
                    }
                    inj.vary = Some(v);
                }
                "tag" => {
                    let v = value()?;
                    if v.is_empty()
                        || v.len() > MAX_VALUE_LEN
                        || !v.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
                    {
                        return Err(bad("must be visible ASCII"));
                    }
                    inj.tag = Some(v);
                }
                _ => {} // Unknown parameters are ignored, as caches add their own.
            }
        }
        Ok(inj)
    }
}

/// RFC 9110 `tchar`: the bytes a header name may contain.
pub fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Decodes `%XX` escapes (and nothing else: `+` stays `+`). `None` on a broken escape or
/// a result that is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            // Checked by hand: `from_str_radix` would also take a sign (`%+1`).
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_empty() {
        assert_eq!(Inject::parse("").unwrap(), Inject::default());
        assert_eq!(Inject::parse("&&").unwrap(), Inject::default());
        assert_eq!(Inject::parse("unknown=5&x").unwrap(), Inject::default());
    }

    #[test]
    fn parses_every_parameter() {
        let q = "delay_ms=5&slow_bps=100&status=503&reset=1&max_age=60&no_store=1&private=1\
                 &vary=X-Variant&set_cookie=1&tag=a%2Cb&chunked=1&etag=0&lm=0&us=300";
        let i = Inject::parse(q).unwrap();
        assert_eq!(i.delay_ms, 5);
        assert_eq!(i.slow_bps, Some(100));
        assert_eq!(i.status, Some(503));
        assert!(i.reset && i.no_store && i.private && i.set_cookie && i.chunked);
        assert_eq!(i.max_age, Some(60));
        assert_eq!(i.vary.as_deref(), Some("X-Variant"));
        assert_eq!(i.tag.as_deref(), Some("a,b"));
        assert!(!i.etag && !i.last_modified);
        assert_eq!(i.burn_us, 300);
    }

    #[test]
    fn rejects_bad_values_with_the_parameter_name() {
        for (q, name) in [
            ("delay_ms=x", "delay_ms"),
            ("delay_ms=-1", "delay_ms"),
            ("delay_ms=99999999", "delay_ms"),
            ("status=99", "status"),
            ("status=600", "status"),
            ("status=200000000000000000000", "status"),
            ("slow_bps=0", "slow_bps"),
            ("reset=maybe", "reset"),
            ("vary=a%0d%0aX-Evil:%201", "vary"),
            ("vary=", "vary"),
            ("tag=a%0d%0ab", "tag"),
            ("tag=%zz", "tag"),
            ("tag=%e2", "tag"),
            ("us=99999999999", "us"),
        ] {
            let e = Inject::parse(q).unwrap_err();
            assert!(e.contains(name), "{q}: {e}");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Cb%20c").as_deref(), Some("a,b c"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%"), None);
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("%g0"), None);
        assert_eq!(percent_decode("%+1"), None);
    }
}
