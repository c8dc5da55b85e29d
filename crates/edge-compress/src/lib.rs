//! Response compression for edgecache, sans-I/O: `Accept-Encoding` negotiation
//! ([`negotiate`]), streaming encoders and decoders ([`codec`]), and the rules that say
//! which responses are worth compressing and how a compressed representation is named
//! (media types, `ETag`, `Vary`).
//!
//! How it fits: the server (edge-core's `compress/` module) decides per request with
//! [`negotiate::Accepted::choose`] and [`Policy::compressible`], runs an [`Encoder`] on
//! its offload pool or inline, and stores the result as a cached variant whose header
//! block comes from [`variant_head`]. Nothing here does I/O or knows about sockets.

pub mod codec;
pub mod negotiate;

pub use codec::{Decoder, Encoder, Levels};
pub use negotiate::{Accepted, Choice};

/// A content coding we can produce and decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    Gzip,
    Br,
    Zstd,
}

impl Coding {
    /// The token on the wire (`Content-Encoding`) and in the config.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// A config or wire token (`x-gzip` is gzip; case-insensitive).
    pub fn from_token(t: &str) -> Option<Coding> {
        let t = t.trim();
        if t.eq_ignore_ascii_case("gzip") || t.eq_ignore_ascii_case("x-gzip") {
            Some(Coding::Gzip)
        } else if t.eq_ignore_ascii_case("br") {
            Some(Coding::Br)
        } else if t.eq_ignore_ascii_case("zstd") {
            Some(Coding::Zstd)
        } else {
            None
        }
    }

    /// The index of this coding in per-coding arrays (metrics).
    pub fn index(self) -> usize {
        self as usize
    }

    pub const ALL: [Coding; 3] = [Coding::Gzip, Coding::Br, Coding::Zstd];
}

/// A response's `Content-Encoding`, as far as we are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoded {
    /// None, or `identity`.
    Identity,
    /// One coding we know.
    One(Coding),
    /// Something else (`deflate`, a list of codings...): passed through untouched.
    Other,
}

/// Reads a response's `Content-Encoding` field lines.
pub fn content_encoding<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Encoded {
    let mut found = Encoded::Identity;
    for v in values {
        for item in v.split(|&b| b == b',') {
            let t = String::from_utf8_lossy(item);
            let t = t.trim();
            if t.is_empty() || t.eq_ignore_ascii_case("identity") {
                continue;
            }
            found = match (found, Coding::from_token(t)) {
                (Encoded::Identity, Some(c)) => Encoded::One(c),
                _ => return Encoded::Other,
            };
        }
    }
    found
}

/// The media types compressed when a location does not list its own
/// (`compress_types`): text (but event streams), and the structured text formats of the web.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/*+json",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/xml",
    "application/*+xml",
    "application/xhtml+xml",
    "application/wasm",
    "application/manifest+json",
    "application/x-font-ttf",
    "font/ttf",
    "font/otf",
    "image/svg+xml",
    "image/x-icon",
    "image/vnd.microsoft.icon",
];

/// Media types whose content is already compressed: never compressed again, whatever
/// `compress_types` says (a second compression costs CPU and gains nothing).
const ALREADY_COMPRESSED: &[&str] = &[
    "image/*",
    "video/*",
    "audio/*",
    "font/woff",
    "font/woff2",
    "application/zip",
    "application/gzip",
    "application/x-gzip",
    "application/zstd",
    "application/x-bzip2",
    "application/x-xz",
    "application/x-7z-compressed",
    "application/x-rar-compressed",
    "application/pdf",
    "application/octet-stream",
    // Not compressed data, but a stream read as it arrives: a compressor would hold
    // events back until it has a block's worth.
    "text/event-stream",
];

/// The exceptions to [`ALREADY_COMPRESSED`]'s `image/*`: text images.
const TEXT_IMAGES: &[&str] = &[
    "image/svg+xml",
    "image/x-icon",
    "image/vnd.microsoft.icon",
    "image/bmp",
];

/// A media-type pattern: `type/subtype`, `type/*`, or a subtype with one `*`
/// (`application/*+json`). Case-insensitive. Returns whether `pattern` is well formed.
pub fn valid_type_pattern(pattern: &str) -> bool {
    if pattern == "*/*" {
        return true;
    }
    let Some((t, s)) = pattern.split_once('/') else {
        return false;
    };
    let token = |x: &str| {
        !x.is_empty()
            && x.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+*".contains(&b))
    };
    token(t) && token(s) && !t.contains('*') && s.matches('*').count() <= 1
}

/// Whether `mime` (`type/subtype`, lowercase, no parameters) matches `pattern`
/// ([`Policy::type_ok`] splits `mime` once for all its patterns).
#[cfg(test)]
fn type_matches(pattern: &str, mime: &str) -> bool {
    match mime.split_once('/') {
        Some((t, s)) => split_type_matches(pattern.as_bytes(), t.as_bytes(), s.as_bytes()),
        None => false,
    }
}

/// Whether a media type split at its `/` (`t`, `s`) matches pattern `p`: on bytes,
/// and a pattern of another type is rejected by its first bytes (a hit on a
/// compressing location checks some 20 patterns).
fn split_type_matches(p: &[u8], t: &[u8], s: &[u8]) -> bool {
    let rest = if p.starts_with(b"*/") {
        &p[2..]
    } else if p.get(t.len()) == Some(&b'/') && p[..t.len()].eq_ignore_ascii_case(t) {
        &p[t.len() + 1..]
    } else {
        return false;
    };
    match rest.iter().position(|&b| b == b'*') {
        None => rest.eq_ignore_ascii_case(s),
        Some(i) => {
            let (pre, suf) = (&rest[..i], &rest[i + 1..]);
            s.len() >= pre.len() + suf.len()
                && s[..pre.len()].eq_ignore_ascii_case(pre)
                && s[s.len() - suf.len()..].eq_ignore_ascii_case(suf)
        }
    }
}

/// The media type of a `Content-Type` value: lowercase `type/subtype`, without
/// parameters (None when it is not of that form).
pub fn media_type(content_type: &[u8]) -> Option<String> {
    let v = String::from_utf8_lossy(content_type);
    let m = v.split(';').next()?.trim().to_ascii_lowercase();
    let (t, s) = m.split_once('/')?;
    (!t.is_empty() && !s.is_empty() && !m.contains(' ')).then_some(m)
}

/// [`media_type`] of an ASCII `Content-Type` value, as its type and subtype in place
/// (not lowercased).
fn media_type_split(content_type: &[u8]) -> Option<(&[u8], &[u8])> {
    // `str::trim` on ASCII: `char::is_whitespace` (which, unlike
    // `u8::is_ascii_whitespace`, includes the vertical tab).
    let ws = |b: &u8| matches!(b, b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r' | b' ');
    let m = content_type.split(|&b| b == b';').next()?;
    let start = m.iter().position(|b| !ws(b)).unwrap_or(m.len());
    let end = m.iter().rposition(|b| !ws(b)).map_or(start, |i| i + 1);
    let m = &m[start..end.max(start)];
    let slash = m.iter().position(|&b| b == b'/')?;
    let (t, s) = (&m[..slash], &m[slash + 1..]);
    (!t.is_empty() && !s.is_empty() && !m.contains(&b' ')).then_some((t, s))
}

/// A location's compression rules, compiled once from its config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Codings offered, in the server's order of preference.
    pub codings: Vec<Coding>,
    /// Media-type patterns worth compressing.
    pub types: Vec<String>,
    /// Bodies shorter than this are sent as they are (the coding's framing would eat
    /// most of the gain). Unknown lengths qualify.
    pub min_length: u64,
    pub levels: Levels,
    /// Compress on the offload pool (`compress_offload`), or on the event loop.
    pub offload: bool,
}

impl Policy {
    /// Whether a response with this status, `Content-Type`, `Cache-Control`, content
    /// coding and body length (None: unknown) should be compressed.
    pub fn compressible<'a>(
        &self,
        status: u16,
        content_type: Option<&[u8]>,
        cache_control: impl IntoIterator<Item = &'a [u8]>,
        encoded: Encoded,
        body_len: Option<u64>,
    ) -> bool {
        if self.codings.is_empty() || encoded != Encoded::Identity {
            return false;
        }
        // 206, 304, 204 and errors are never transformed: only whole representations.
        if status != 200 {
            return false;
        }
        if body_len.is_some_and(|n| n < self.min_length) {
            return false;
        }
        if no_transform(cache_control) {
            return false;
        }
        match content_type {
            // ASCII (every real one): split in place, no lowercase copy (the patterns
            // compare case-insensitively).
            Some(ct) if ct.is_ascii() => {
                media_type_split(ct).is_some_and(|(t, s)| self.split_type_ok(t, s))
            }
            Some(ct) => media_type(ct).is_some_and(|m| self.type_ok(&m)),
            None => false,
        }
    }

    /// Whether the media type (lowercase, no parameters) is worth compressing.
    pub fn type_ok(&self, mime: &str) -> bool {
        match mime.split_once('/') {
            Some((t, s)) => self.split_type_ok(t.as_bytes(), s.as_bytes()),
            None => false,
        }
    }

    /// [`Policy::type_ok`] of a media type split at its `/`.
    fn split_type_ok(&self, t: &[u8], s: &[u8]) -> bool {
        let matches = |p: &str| split_type_matches(p.as_bytes(), t, s);
        let text_image = TEXT_IMAGES.iter().any(|p| matches(p));
        if !text_image && ALREADY_COMPRESSED.iter().any(|p| matches(p)) {
            return false;
        }
        self.types.iter().any(|p| matches(p))
    }
}

/// `Cache-Control: no-transform` (RFC 9111 5.2.2.6): an intermediary must not change
/// the content coding.
pub fn no_transform<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> bool {
    values.into_iter().any(|v| {
        v.split(|&b| b == b',').any(|d| {
            let d = String::from_utf8_lossy(d);
            d.trim().eq_ignore_ascii_case("no-transform")
        })
    })
}

/// Whether `Vary` field lines already name `Accept-Encoding` (or `*`).
pub fn varies_on_encoding<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> bool {
    values.into_iter().any(|v| {
        v.split(|&b| b == b',').any(|n| {
            let n = String::from_utf8_lossy(n);
            let n = n.trim();
            n == "*" || n.eq_ignore_ascii_case("accept-encoding")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            codings: vec![Coding::Zstd, Coding::Br, Coding::Gzip],
            types: DEFAULT_TYPES.iter().map(|s| s.to_string()).collect(),
            min_length: 1024,
            levels: Levels::default(),
            offload: true,
        }
    }

    fn ok(p: &Policy, status: u16, ct: &str, cc: &str, enc: Encoded, len: Option<u64>) -> bool {
        p.compressible(status, Some(ct.as_bytes()), [cc.as_bytes()], enc, len)
    }

    #[test]
    fn text_types_qualify_and_compressed_ones_never_do() {
        let p = policy();
        let id = Encoded::Identity;
        assert!(ok(&p, 200, "text/html; charset=utf-8", "", id, Some(5000)));
        assert!(ok(&p, 200, "TEXT/CSS", "", id, None));
        assert!(ok(&p, 200, "application/ld+json", "", id, Some(5000)));
        assert!(ok(&p, 200, "application/rss+xml", "", id, Some(5000)));
        assert!(ok(&p, 200, "image/svg+xml", "", id, Some(5000)));
        assert!(!ok(&p, 200, "image/png", "", id, Some(5000)));
        assert!(!ok(&p, 200, "application/octet-stream", "", id, Some(5000)));
        let mut all = policy();
        all.types = vec!["*/*".into()];
        assert!(
            !ok(&all, 200, "video/mp4", "", id, Some(5000)),
            "never video"
        );
        assert!(!ok(&all, 200, "application/zip", "", id, Some(5000)));
        assert!(ok(&all, 200, "application/x-custom", "", id, Some(5000)));
    }

    #[test]
    fn only_whole_uncoded_long_enough_transformable_bodies() {
        let p = policy();
        let id = Encoded::Identity;
        assert!(!ok(&p, 206, "text/html", "", id, Some(5000)));
        assert!(!ok(&p, 404, "text/html", "", id, Some(5000)));
        assert!(!ok(&p, 200, "text/html", "", id, Some(1023)));
        assert!(ok(&p, 200, "text/html", "", id, Some(1024)));
        assert!(!ok(
            &p,
            200,
            "text/html",
            "public, no-transform",
            id,
            Some(5000)
        ));
        assert!(!ok(
            &p,
            200,
            "text/html",
            "",
            Encoded::One(Coding::Gzip),
            Some(5000)
        ));
        assert!(!ok(&p, 200, "text/html", "", Encoded::Other, Some(5000)));
        assert!(!p.compressible(200, None, [], id, Some(5000)), "no type");
        let mut off = policy();
        off.codings.clear();
        assert!(!ok(&off, 200, "text/html", "", id, Some(5000)));
    }

    #[test]
    fn content_encoding_values() {
        assert_eq!(content_encoding([]), Encoded::Identity);
        assert_eq!(content_encoding([&b"identity"[..]]), Encoded::Identity);
        assert_eq!(content_encoding([&b"gzip"[..]]), Encoded::One(Coding::Gzip));
        assert_eq!(content_encoding([&b" BR "[..]]), Encoded::One(Coding::Br));
        assert_eq!(content_encoding([&b"deflate"[..]]), Encoded::Other);
        assert_eq!(content_encoding([&b"gzip, br"[..]]), Encoded::Other);
        assert_eq!(
            content_encoding([&b"gzip"[..], &b"gzip"[..]]),
            Encoded::Other
        );
    }

    /// `type_matches` as it was written first (on `str`, splitting both sides): the
    /// byte version must agree with it.
    fn reference_matches(pattern: &str, mime: &str) -> bool {
        let (Some((pt, ps)), Some((mt, ms))) = (pattern.split_once('/'), mime.split_once('/'))
        else {
            return false;
        };
        if pt != "*" && !pt.eq_ignore_ascii_case(mt) {
            return false;
        }
        match ps.split_once('*') {
            None => ps.eq_ignore_ascii_case(ms),
            Some((pre, suf)) => {
                ms.len() >= pre.len() + suf.len()
                    && ms[..pre.len()].eq_ignore_ascii_case(pre)
                    && ms[ms.len() - suf.len()..].eq_ignore_ascii_case(suf)
            }
        }
    }

    #[test]
    fn byte_matching_agrees_with_the_reference() {
        let mut patterns: Vec<&str> = [DEFAULT_TYPES, ALREADY_COMPRESSED, TEXT_IMAGES].concat();
        patterns.extend([
            "*/*", "*/json", "text/h*", "TEXT/*", "a/*b", "tex/*", "texts/*",
        ]);
        let mimes = [
            "text/html",
            "text/plain",
            "TEXT/Plain",
            "text/event-stream",
            "application/json",
            "application/ld+json",
            "application/json+x",
            "application/+json",
            "image/svg+xml",
            "image/png",
            "image/bmp",
            "video/mp4",
            "font/woff2",
            "x/y",
            "text/",
            "/html",
            "text",
            "",
            "te/xt",
            "texts/html",
            "a/b",
            "a/ab",
            "a/bb",
            "application/octet-stream",
        ];
        let p = policy();
        for m in mimes {
            for pat in &patterns {
                assert_eq!(type_matches(pat, m), reference_matches(pat, m), "{pat} {m}");
            }
            let want = m.split_once('/').is_some() && {
                let text_image = TEXT_IMAGES.iter().any(|x| reference_matches(x, m));
                (text_image || !ALREADY_COMPRESSED.iter().any(|x| reference_matches(x, m)))
                    && p.types.iter().any(|x| reference_matches(x, m))
            };
            assert_eq!(p.type_ok(m), want, "{m}");
        }
    }

    #[test]
    fn content_types_split_in_place_as_media_type_reads_them() {
        let p = policy();
        let id = Encoded::Identity;
        for ct in [
            "text/html",
            "Text/HTML ; charset=utf-8",
            " text/plain\t",
            "\x0btext/css\x0b",
            "text/ html",
            "text /html",
            "text/",
            "/html",
            "text",
            "",
            ";",
            " ; text/html",
            "application/LD+JSON;x=y",
            "image/svg+xml",
            "IMAGE/PNG",
            "font/woff2",
            "application/octet-stream",
            "text/event-stream",
            "text/html;",
            "a/b/c",
        ] {
            let slow = media_type(ct.as_bytes()).is_some_and(|m| p.type_ok(&m));
            let got = p.compressible(200, Some(ct.as_bytes()), [], id, Some(5000));
            assert_eq!(got, slow, "{ct:?}");
        }
        // Not ASCII: read through `media_type`, as before.
        assert!(p.compressible(200, Some("text/\u{e9}t\u{e9}".as_bytes()), [], id, None));
    }

    #[test]
    fn type_patterns() {
        assert!(valid_type_pattern("text/*"));
        assert!(valid_type_pattern("application/*+json"));
        assert!(valid_type_pattern("*/*"));
        assert!(valid_type_pattern("application/json"));
        assert!(!valid_type_pattern("text"));
        assert!(!valid_type_pattern("*/html"));
        assert!(!valid_type_pattern("text/ html"));
        assert!(!valid_type_pattern("application/**"));
        assert!(type_matches("application/*+json", "application/ld+json"));
        assert!(!type_matches("application/*+json", "application/json"));
        assert!(type_matches("*/*", "x/y"));
        assert_eq!(
            media_type(b"Text/HTML ; charset=utf-8").as_deref(),
            Some("text/html")
        );
        assert_eq!(media_type(b"garbage"), None);
    }

    #[test]
    fn vary_detection() {
        assert!(varies_on_encoding([&b"Origin, accept-encoding"[..]]));
        assert!(varies_on_encoding([&b"*"[..]]));
        assert!(!varies_on_encoding([&b"Origin"[..]]));
    }
}
