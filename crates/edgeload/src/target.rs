//! The target URL and the request bytes sent to it.
//!
//! How it fits: the CLI parses the URL once ([`Url::parse`]); [`crate::mix`] turns the
//! URL, `--mix` and `--paths` into [`Class`]es; each class pre-serialises its request
//! line and headers once, so the hot path only copies bytes (and, with `--paths`, writes
//! the path number drawn by [`Ids`]: uniform, or Zipf with `--zipf`) into a reused write
//! buffer. Nothing is allocated per request. With `--seek` ([`Seek`]) each connection
//! keeps a [`SeekState`]: the object and offset it reads from, advanced one range per
//! request, and the `Range` line goes in before the blank line.

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
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_are_shared_by_every_clone_and_wrap() {
        let ids = Ids::sequential(5);
        let other = ids.clone(); // another connection's copy
        let mut rng = SplitMix64::new(1);
        let got: Vec<u64> = (0..7)
            .map(|i| if i % 2 == 0 { &ids } else { &other }.draw(&mut rng))
            .collect();
        assert_eq!(got, [1, 2, 3, 4, 5, 1, 2]);
        assert_eq!(ids, Ids::sequential(5));
        assert_ne!(ids, Ids::Uniform(5));
    }

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
        assert_eq!(u.scheme, Scheme::Http);
    }

    #[test]
    fn parses_https_urls() {
        let u = Url::parse("https://example.com/a?b=1").unwrap();
        assert_eq!(
            (
                u.scheme,
                u.host.as_str(),
                u.port,
                u.authority.as_str(),
                u.path.as_str()
            ),
            (Scheme::Https, "example.com", 443, "example.com", "/a?b=1")
        );
        assert_eq!(u.to_url_string(), "https://example.com/a?b=1");
        let u = Url::parse("HTTPS://127.0.0.1:8443").unwrap();
        assert_eq!(
            (u.scheme, u.host.as_str(), u.port, u.path.as_str()),
            (Scheme::Https, "127.0.0.1", 8443, "/")
        );
        assert_eq!(u.to_url_string(), "https://127.0.0.1:8443/");
        let u = Url::parse("https://[::1]:9443/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9443));
        // The plain scheme keeps its own default port.
        assert_eq!(Url::parse("http://example.com/").unwrap().port, 80);
        for (bad, why) in [
            ("https:///x", "missing host"),
            ("https://h:0/", "invalid port"),
            ("https://u@h/", "user info"),
            ("https:/h/", "must start with http:// or https://"),
        ] {
            let e = Url::parse(bad).unwrap_err().0;
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn refuses_bad_urls_with_reasons() {
        for (bad, why) in [
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
        let c = Class::new(
            "/obj/10k",
            1,
            "h:1",
            &["X-T: 1".into()],
            true,
            Some(Ids::new(3, None)),
        );
        assert_eq!(c.name, "/obj/10k/*");
        let mut rng = SplitMix64::new(1);
        let want = SplitMix64::new(1).next_u64() % 3 + 1;
        let mut out = Vec::new();
        c.write_request(&mut rng, &mut out);
        assert_eq!(
            out,
            format!(
                "GET /obj/10k/{want} HTTP/1.1\r\nHost: h:1\r\nX-T: 1\r\nConnection: close\r\n\r\n"
            )
            .into_bytes()
        );
        let c = Class::new("/", 1, "h", &["host: other".into()], false, None);
        out.clear();
        c.write_request(&mut rng, &mut out);
        assert_eq!(out, b"GET / HTTP/1.1\r\nhost: other\r\n\r\n");
    }

    /// Draws `draws` ids from `ids` and counts them (index = id).
    fn histogram(ids: &Ids, n: usize, draws: u32, seed: u64) -> Vec<u32> {
        let mut rng = SplitMix64::new(seed);
        let mut counts = vec![0u32; n + 1];
        for _ in 0..draws {
            let id = ids.draw(&mut rng) as usize;
            assert!((1..=n).contains(&id), "id {id} outside 1..={n}");
            counts[id] += 1;
        }
        counts
    }

    #[test]
    fn uniform_ids_cover_the_range_evenly() {
        let counts = histogram(&Ids::new(10, None), 10, 100_000, 5);
        assert!(
            counts[1..].iter().all(|&c| (9_400..10_600).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn zipf_ids_follow_the_law() {
        // P(id) = id^-α / H(N, α): id 1 is 2^α times as popular as id 2.
        for alpha in [0.8, 1.0, 1.5] {
            let n = 20_000;
            let draws = 400_000;
            let counts = histogram(&Ids::new(n as u64, Some(alpha)), n, draws, 11);
            let h: f64 = (1..=n).map(|i| (i as f64).powf(-alpha)).sum();
            let p1 = counts[1] as f64 / draws as f64;
            assert!(
                (p1 * h - 1.0).abs() < 0.03,
                "α {alpha}: P(1) = {p1}, law {}",
                1.0 / h
            );
            let ratio = counts[1] as f64 / counts[2] as f64;
            let want = 2f64.powf(alpha);
            assert!(
                (ratio / want - 1.0).abs() < 0.06,
                "α {alpha}: count(1)/count(2) = {ratio}, law {want}"
            );
            assert!(
                counts[1] > counts[2] && counts[2] > counts[10] && counts[10] > counts[1000],
                "popularity falls with the id"
            );
            assert!(
                counts[n / 2..].iter().any(|&c| c > 0),
                "the tail is reachable"
            );
        }
    }

    #[test]
    fn zipf_class_writes_popular_ids() {
        let c = Class::new("/o/", 1, "h", &[], false, Some(Ids::new(1000, Some(1.2))));
        assert_eq!(c.name, "/o/*");
        let mut rng = SplitMix64::new(3);
        let mut out = Vec::new();
        let mut ones = 0;
        for _ in 0..1000 {
            out.clear();
            c.write_request(&mut rng, &mut out);
            let line = std::str::from_utf8(&out).unwrap().lines().next().unwrap();
            let id: u64 = line
                .strip_prefix("GET /o/")
                .and_then(|r| r.strip_suffix(" HTTP/1.1"))
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=1000).contains(&id));
            ones += (id == 1) as u32;
        }
        // P(1) ≈ 0.22 for α 1.2 over 1000 ids.
        assert!((150..300).contains(&ones), "{ones}");
    }

    #[test]
    fn seek_parses_and_bounds() {
        assert_eq!(
            Seek::parse("2g, 4m,1m").unwrap(),
            Seek {
                span: 2 << 30,
                read: 4 << 20,
                step: 1 << 20
            }
        );
        assert_eq!(Seek::parse("10,10,1").unwrap().span, 10);
        for (bad, why) in [
            ("1m,4m", "expected SPAN,READ,STEP"),
            ("1m,4m,1m,1", "expected SPAN,READ,STEP"),
            ("x,4m,1m", "'x' is not a size"),
            ("8m,4m,-1", "'-1' is not a size"),
            ("1m,4m,1m", "STEP <= READ <= SPAN"),
            ("8m,1m,4m", "STEP <= READ <= SPAN"),
            ("8m,4m,0", "STEP <= READ <= SPAN"),
        ] {
            let e = Seek::parse(bad).unwrap_err();
            assert!(e.starts_with(&format!("--seek {bad}: ")), "{e}");
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn seeks_read_consecutive_ranges_then_seek_again() {
        let seek = Seek::parse("64m,4m,1m").unwrap();
        let classes = [Class::new(
            "/v",
            1,
            "h",
            &[],
            false,
            Some(Ids::new(10, None)),
        )];
        let mut rng = SplitMix64::new(7);
        let mut st = SeekState::default();
        let mut starts = std::collections::HashSet::new();
        for _ in 0..50 {
            let (c, id, first, last) = st.next(&seek, &classes, |_| 0, &mut rng);
            assert!(c == 0 && (1..=10).contains(&id) && first <= (60 << 20));
            assert_eq!(last, first + (1 << 20) - 1);
            starts.insert(first);
            for k in 1..4u64 {
                let r = st.next(&seek, &classes, |_| 0, &mut rng);
                assert_eq!(r, (0, id, first + (k << 20), first + ((k + 1) << 20) - 1));
            }
        }
        assert!(starts.len() > 45, "offsets are drawn anew per seek");
        // A read that is not a multiple of the step ends on a short range; a read as long
        // as the span always starts at 0.
        let seek = Seek::parse("5000,5000,2000").unwrap();
        let mut st = SeekState::default();
        let got: Vec<_> = (0..4)
            .map(|_| st.next(&seek, &classes, |_| 0, &mut rng))
            .map(|(_, _, a, b)| (a, b))
            .collect();
        assert_eq!(got, [(0, 1999), (2000, 3999), (4000, 4999), (0, 1999)]);
    }

    #[test]
    fn range_requests_carry_the_range_before_the_blank_line() {
        let c = Class::new(
            "/obj/2g",
            1,
            "h:1",
            &["X-T: 1".into()],
            false,
            Some(Ids::new(3, None)),
        );
        let mut out = Vec::new();
        c.write_range_request(7, 1048576, 2097151, &mut out);
        assert_eq!(
            out,
            b"GET /obj/2g/7 HTTP/1.1\r\nHost: h:1\r\nX-T: 1\r\nRange: bytes=1048576-2097151\r\n\r\n"
        );
        let c = Class::new("/one", 1, "h", &[], true, None);
        out.clear();
        c.write_range_request(7, 0, 0, &mut out);
        assert_eq!(
            out,
            b"GET /one HTTP/1.1\r\nHost: h\r\nConnection: close\r\nRange: bytes=0-0\r\n\r\n"
        );
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
