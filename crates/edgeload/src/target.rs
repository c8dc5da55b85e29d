//! The target URL and the request bytes sent to it.
//!
//! How it fits: the CLI parses the URL once ([`Url::parse`]); [`crate::mix`] turns the
//! URL, `--mix` and `--paths` into [`Class`]es; each class pre-serialises its request
//! line and headers once, so the hot path only copies bytes (and, with `--paths`, writes
//! the path number drawn by [`Ids`]: uniform, or Zipf with `--zipf`) into a reused write
//! buffer. Nothing is allocated per request. With `--seek` ([`Seek`]) each connection
//! keeps a [`SeekState`]: the object and offset it reads from, advanced one range per
//! request, and the `Range` line goes in before the blank line.

/// Most `-H` headers a request carries.
pub const MAX_HEADERS: usize = 64;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

use edge_rand::{SplitMix64, Zipf};

/// Longest URL accepted on the command line or in a mix file.
pub const MAX_URL_LEN: usize = 8192;

/// `http://` or `https://` (HTTP/1.1 over TLS, see [`crate::tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// `"http"` or `"https"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port used when the URL names none: 80 or 443.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A parsed `http[s]://host[:port]/path?query` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub scheme: Scheme,
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
    /// Parses an absolute `http://` or `https://` URL (default port 80 or 443).
    pub fn parse(s: &str) -> Result<Url, UrlError> {
        if s.len() > MAX_URL_LEN {
            return err(format!("URL longer than {MAX_URL_LEN} bytes"));
        }
        let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
        let (scheme, rest) = if lower.starts_with("https://") {
            (Scheme::Https, &s[8..])
        } else if lower.starts_with("http://") {
            (Scheme::Http, &s[7..])
        } else {
            return err(format!(
                "'{s}': the URL must start with http:// or https:// (e.g. http://127.0.0.1:8080/)"
            ));
        };
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
        let (host, port) = split_host_port(authority, scheme.default_port())
            .map_err(|m| UrlError(format!("'{s}': {m}")))?;
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        check_path(&path).map_err(|m| UrlError(format!("'{s}': {m}")))?;
        Ok(Url {
            scheme,
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

    /// The first address of the host in one family (`--source` binds IPv4 or IPv6
    /// addresses, and a socket connects within its family).
    pub fn resolve_family(&self, ipv4: bool) -> Result<SocketAddr, String> {
        let addrs = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve '{}': {e}", self.host))?;
        let mut found = None;
        for a in addrs {
            if a.is_ipv4() == ipv4 {
                found = Some(a);
                break;
            }
        }
        let family = if ipv4 { "IPv4" } else { "IPv6" };
        found.ok_or_else(|| {
            format!(
                "'{}' has no {family} address, and the --source addresses are {family}",
                self.host
            )
        })
    }

    /// `http[s]://authority/path`, for the report.
    pub fn to_url_string(&self) -> String {
        format!("{}://{}{}", self.scheme.as_str(), self.authority, self.path)
    }
}

fn split_host_port(authority: &str, default_port: u16) -> Result<(String, u16), String> {
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
        None => default_port,
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

/// How the number appended to a class's path is drawn (`--paths N`, `--zipf ALPHA`).
/// Immutable once built: every connection shares it and brings its own generator.
#[derive(Debug, Clone)]
pub enum Ids {
    /// Uniform over `1..=N`.
    Uniform(u64),
    /// Zipf popularity over `1..=N`: P(id) ∝ id^-α, id 1 the most popular.
    Zipf(Zipf),
    /// `1, 2, ..., N, 1, ...` from one counter shared by every connection and thread
    /// (`--sequential`: a fill that asks for each id once).
    Sequential(u64, std::sync::Arc<std::sync::atomic::AtomicU64>),
}

impl PartialEq for Ids {
    /// Same kind over the same ids (a sequential counter's position is not compared).
    fn eq(&self, other: &Ids) -> bool {
        match (self, other) {
            (Ids::Uniform(a), Ids::Uniform(b)) => a == b,
            (Ids::Zipf(a), Ids::Zipf(b)) => a == b,
            (Ids::Sequential(a, _), Ids::Sequential(b, _)) => a == b,
            _ => false,
        }
    }
}

impl Ids {
    /// `--paths n` (n ≥ 1), with `--zipf alpha` when given.
    pub fn new(n: u64, zipf: Option<f64>) -> Ids {
        match zipf {
            None => Ids::Uniform(n.max(1)),
            Some(alpha) => Ids::Zipf(Zipf::new(n, alpha)),
        }
    }

    /// `--paths n --sequential`.
    pub fn sequential(n: u64) -> Ids {
        Ids::Sequential(n.max(1), Default::default())
    }

    /// The next id, in `1..=N`. No allocation, no lock.
    #[inline]
    pub fn draw(&self, rng: &mut SplitMix64) -> u64 {
        match self {
            Ids::Uniform(n) => rng.next_u64() % n + 1,
            Ids::Zipf(z) => z.sample(rng),
            Ids::Sequential(n, next) => {
                next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % n + 1
            }
        }
    }
}

/// One URL class: a weighted line of the mix (or the single URL). Its request is
/// pre-serialised as `prefix [number] suffix`; `ids` (from `--paths N`, `--zipf`) makes
/// the number `1..=N`, drawn per request.
#[derive(Debug, Clone)]
pub struct Class {
    /// What the report shows: the path, plus `/*` when spread over `--paths`.
    pub name: String,
    pub weight: u64,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    ids: Option<Ids>,
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
        ids: Option<Ids>,
    ) -> Class {
        let mut prefix = format!("GET {path}").into_bytes();
        let mut name = path.to_string();
        if ids.is_some() {
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
            ids,
        }
    }

    /// Appends this class's request to `out`; under `--paths` the path number is drawn
    /// with `rng` (the connection's own). No allocation once `out` has grown.
    #[inline]
    pub fn write_request(&self, rng: &mut SplitMix64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        if let Some(ids) = &self.ids {
            push_decimal(ids.draw(rng), out);
        }
        out.extend_from_slice(&self.suffix);
    }

    /// The path number of this class's next request (`None` without `--paths`).
    #[inline]
    pub fn draw_id(&self, rng: &mut SplitMix64) -> Option<u64> {
        self.ids.as_ref().map(|ids| ids.draw(rng))
    }

    /// Appends this class's request for path number `id` (ignored without `--paths`)
    /// with `Range: bytes=first-last` (`--seek`). No allocation once `out` has grown.
    #[inline]
    pub fn write_range_request(&self, id: u64, first: u64, last: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        if self.ids.is_some() {
            push_decimal(id, out);
        }
        // The suffix ends with the blank line: the Range line goes before it.
        out.extend_from_slice(&self.suffix[..self.suffix.len() - 2]);
        out.extend_from_slice(b"Range: bytes=");
        push_decimal(first, out);
        out.push(b'-');
        push_decimal(last, out);
        out.extend_from_slice(b"\r\n\r\n");
    }
}

/// `--seek SPAN,READ,STEP`: a seeking player. Each seek picks a class and a path number,
/// then an offset uniform over `0..=SPAN-READ`, and reads `READ` bytes from there in
/// `STEP`-byte ranges, one request after another; then it seeks again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seek {
    pub span: u64,
    pub read: u64,
    pub step: u64,
}

impl Seek {
    /// Parses `SPAN,READ,STEP` (sizes as `64m`, `4m`, `1m`, `4096`; binary suffixes);
    /// needs 1 <= STEP <= READ <= SPAN.
    pub fn parse(s: &str) -> Result<Seek, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [span, read, step] = parts[..] else {
            return Err(format!(
                "--seek {s}: expected SPAN,READ,STEP (e.g. 2g,4m,1m)"
            ));
        };
        let size = |t: &str| {
            edgeorigin::parse_size(t)
                .ok_or_else(|| format!("--seek {s}: '{t}' is not a size (4096, 64k, 1m, 2g)"))
        };
        let seek = Seek {
            span: size(span)?,
            read: size(read)?,
            step: size(step)?,
        };
        if seek.step == 0 || seek.step > seek.read || seek.read > seek.span {
            return Err(format!("--seek {s}: needs 1 <= STEP <= READ <= SPAN"));
        }
        Ok(seek)
    }
}

/// Where one connection's current seek is: the request [`SeekState::next`] makes.
#[derive(Debug, Clone, Default)]
pub struct SeekState {
    class: usize,
    id: u64,
    /// The next byte to ask for, and the end of this seek's read (exclusive).
    at: u64,
    end: u64,
}

impl SeekState {
    /// The next request of this connection: (class, path number, first byte, last byte).
    /// A finished read (or the first call) seeks: `pick` chooses the class from a
    /// random number, its ids the path number, `rng` the offset.
    pub fn next(
        &mut self,
        seek: &Seek,
        classes: &[Class],
        pick: impl Fn(u64) -> usize,
        rng: &mut SplitMix64,
    ) -> (usize, u64, u64, u64) {
        if self.at >= self.end {
            self.class = pick(rng.next_u64());
            self.id = classes[self.class].draw_id(rng).unwrap_or(0);
            self.at = rng.next_u64() % (seek.span - seek.read + 1);
            self.end = self.at + seek.read;
        }
        let first = self.at;
        let last = first.saturating_add(seek.step).min(self.end) - 1;
        self.at = last + 1;
        (self.class, self.id, first, last)
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
mod tests;
