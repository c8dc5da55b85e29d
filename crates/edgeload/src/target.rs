//! The target URL and the request bytes sent to it.
//!
//! How it fits: the CLI parses the URL once ([`Url::parse`]); [`crate::mix`] turns the
//! URL, `--mix` and `--paths` into [`Class`]es; each class pre-serialises its request
//! line and headers once, so the hot path only copies bytes (and, with `--paths`, writes
//! the path number) into a reused write buffer. Nothing is allocated per request.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

/// Longest URL accepted on the command line or in a mix file.
pub const MAX_URL_LEN: usize = 8192;

/// A parsed `http://host[:port]/path?query` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// Host as written (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// `host[:port]` exactly as written in the URL: the `Host` header value.
    pub authority: String,
    /// Path plus query, always starting with `/`.
    pub path: String,
}

/// Why a URL was refused; the message is shown to the user as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(pub String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, UrlError> {
    Err(UrlError(msg.into()))
}

impl Url {
    /// Parses an absolute `http://` URL. `https://` is refused with a clear message:
    /// edgeload speaks plain HTTP/1.1 only.
    pub fn parse(s: &str) -> Result<Url, UrlError> {
        if s.len() > MAX_URL_LEN {
            return err(format!("URL longer than {MAX_URL_LEN} bytes"));
        }
        let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
        if lower.starts_with("https://") {
            return err(format!(
                "'{s}': https:// is not supported, edgeload speaks plain http:// only \
                 (put the TLS terminator's backend address here instead)"
            ));
        }
        if !lower.starts_with("http://") {
            return err(format!(
                "'{s}': the URL must start with http:// (e.g. http://127.0.0.1:8080/)"
            ));
        }
        let rest = &s[7..];
        let (rest, _fragment) = rest.split_once('#').unwrap_or((rest, ""));
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return err(format!("'{s}': missing host"));
        }
        if authority.contains('@') {
            return err(format!(
                "'{s}': user info in URLs is not supported (use -H 'Authorization: ...')"
            ));
        }
        let (host, port) =
            split_host_port(authority).map_err(|m| UrlError(format!("'{s}': {m}")))?;
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        check_path(&path).map_err(|m| UrlError(format!("'{s}': {m}")))?;
        Ok(Url {
            host,
            port,
            authority: authority.to_string(),
            path,
        })
    }

    /// Resolves host and port (blocking; done once before the test starts).
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        let mut addrs = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve '{}': {e}", self.host))?;
        addrs
            .next()
            .ok_or_else(|| format!("'{}' resolved to no address", self.host))
    }

    /// `http://authority/path`, for the report.
    pub fn to_url_string(&self) -> String {
        format!("http://{}{}", self.authority, self.path)
    }
}

fn split_host_port(authority: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or("unterminated '[' in IPv6 host")?;
        match after {
            "" => (h, None),
            p if p.starts_with(':') => (h, Some(&p[1..])),
            _ => return Err("junk after ']' in host".into()),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("missing host".into());
    }
    if host
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || b == b'/' || b == b'\\')
    {
        return Err("invalid character in host".into());
    }
    let port = match port {
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("invalid port '{p}'")),
            Ok(n) => n,
        },
    };
    Ok((host.to_string(), port))
}

/// The request line must stay one line: no spaces, no control bytes.
fn check_path(path: &str) -> Result<(), String> {
    if let Some(b) = path
        .bytes()
        .find(|b| b.is_ascii_control() || *b == b' ' || *b >= 0x80)
    {
        return Err(format!(
            "byte 0x{b:02x} not allowed in the path (percent-encode it)"
        ));
    }
    Ok(())
}

/// Checks a `-H "Name: value"` argument; returns it trimmed.
pub fn check_header(h: &str) -> Result<String, String> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| format!("header '{h}' is not 'Name: value'"))?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
    {
        return Err(format!("header '{h}': invalid header name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!(
            "header '{h}': CR, LF and NUL are not allowed in a value"
        ));
    }
    Ok(format!("{name}: {}", value.trim()))
}

/// One URL class: a weighted line of the mix (or the single URL). Its request is
/// pre-serialised as `prefix [number] suffix`; `paths` (from `--paths N`) makes the
/// number `1..=N`, chosen per request.
#[derive(Debug, Clone)]
pub struct Class {
    /// What the report shows: the path, plus `/*` when spread over `--paths`.
    pub name: String,
    pub weight: u64,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    paths: Option<u64>,
}

impl Class {
    /// Builds the request bytes for `GET path` with `Host: host`, `extra` header lines
    /// (already checked) and, when `close`, `Connection: close`.
    pub fn new(
        path: &str,
        weight: u64,
        host: &str,
        extra: &[String],
        close: bool,
        paths: Option<u64>,
    ) -> Class {
        let mut prefix = format!("GET {path}").into_bytes();
        let mut name = path.to_string();
        if paths.is_some() {
            if !path.ends_with('/') {
                prefix.push(b'/');
                name.push('/');
            }
            name.push('*');
        }
        let mut suffix = String::from(" HTTP/1.1\r\n");
        if !extra
            .iter()
            .any(|h| h.len() >= 5 && h[..5].eq_ignore_ascii_case("host:"))
        {
            suffix.push_str(&format!("Host: {host}\r\n"));
        }
        for h in extra {
            suffix.push_str(h);
            suffix.push_str("\r\n");
        }
        if close {
            suffix.push_str("Connection: close\r\n");
        }
        suffix.push_str("\r\n");
        Class {
            name,
            weight,
            prefix,
            suffix: suffix.into_bytes(),
            paths,
        }
    }

    /// Appends this class's request to `out`; `pick` is a random number used to choose
    /// the path number under `--paths`. No allocation once `out` has grown.
    #[inline]
    pub fn write_request(&self, pick: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        if let Some(n) = self.paths {
            push_decimal(pick % n + 1, out);
        }
        out.extend_from_slice(&self.suffix);
    }
}

/// Writes `n` in decimal without going through `fmt` (and its allocations).
fn push_decimal(mut n: u64, out: &mut Vec<u8>) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_http_urls() {
        let u = Url::parse("http://127.0.0.1:8080/obj/10k/1?x=1#frag").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/obj/10k/1?x=1")
        );
        assert_eq!(u.authority, "127.0.0.1:8080");
        let u = Url::parse("HTTP://example.com").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        let u = Url::parse("http://[::1]:9000?q").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 9000, "/?q")
        );
    }

    #[test]
    fn refuses_bad_urls_with_reasons() {
        for (bad, why) in [
            ("https://x/", "https:// is not supported"),
            ("ftp://x/", "must start with http://"),
            ("127.0.0.1:80/", "must start with http://"),
            ("http:///x", "missing host"),
            ("http://h:0/", "invalid port"),
            ("http://h:99999/", "invalid port"),
            ("http://h:x/", "invalid port"),
            ("http://u@h/", "user info"),
            ("http://h/a b", "not allowed in the path"),
            ("http://[::1/", "unterminated"),
        ] {
            let e = Url::parse(bad).unwrap_err().0;
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn headers_are_checked() {
        assert_eq!(check_header("X-A:  b ").unwrap(), "X-A: b");
        assert!(check_header("nocolon").is_err());
        assert!(check_header(": v").is_err());
        assert!(check_header("A B: v").is_err());
        assert!(check_header("A: v\r\nEvil: 1").is_err());
    }

    #[test]
    fn request_bytes_are_preserialised() {
        let c = Class::new("/obj/10k", 1, "h:1", &["X-T: 1".into()], true, Some(3));
        assert_eq!(c.name, "/obj/10k/*");
        let mut out = Vec::new();
        c.write_request(4, &mut out);
        assert_eq!(
            out,
            b"GET /obj/10k/2 HTTP/1.1\r\nHost: h:1\r\nX-T: 1\r\nConnection: close\r\n\r\n"
        );
        let c = Class::new("/", 1, "h", &["host: other".into()], false, None);
        out.clear();
        c.write_request(0, &mut out);
        assert_eq!(out, b"GET / HTTP/1.1\r\nhost: other\r\n\r\n");
    }

    #[test]
    fn decimal_digits() {
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            let mut v = Vec::new();
            push_decimal(n, &mut v);
            assert_eq!(v, n.to_string().into_bytes());
        }
    }
}
