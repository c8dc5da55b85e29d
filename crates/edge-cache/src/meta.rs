//! Object metadata and its compact binary encoding.
//!
//! How it fits: an [`ObjectMeta`] is everything the cache knows about a stored response
//! except its body. It is written at the start of each object file by
//! [`crate::storage`], kept in memory by the [`crate::index`] (so a hit never reads or
//! parses headers from disk), and read back by the [`crate::loader`] after a restart.
//! The encoding is our own (no serde): fixed-width little-endian integers and
//! length-prefixed byte strings, decoded with bounds checks because a file on disk is
//! untrusted input (a flipped bit must give an error, never a panic).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest byte string (key, header block, etag, tag...) the decoder accepts.
pub const MAX_FIELD_LEN: usize = 1 << 20;
/// Most `Vary` names or tags one object may carry.
pub const MAX_LIST_ITEMS: usize = 1024;
/// Body length value meaning "not known yet" (a chunked or close-delimited response).
pub const BODY_LEN_UNKNOWN: u64 = u64::MAX;

/// How long a stored response may be served, computed by [`crate::policy::storable`].
///
/// All durations follow RFC 9111: `lifetime` is the freshness lifetime (4.2.1),
/// `initial_age` the corrected initial age at the time the response was received
/// (4.2.3), and the two stale windows come from RFC 5861 directives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Freshness {
    pub lifetime: Duration,
    pub initial_age: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    /// `must-revalidate` / `proxy-revalidate`: never serve stale, not even on error.
    pub must_revalidate: bool,
    /// Response `no-cache`: stored, but every use must be revalidated first.
    pub no_cache: bool,
}

/// Everything about a stored object except its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The variant key: the primary cache key, plus `\0` and the normalised request
    /// values of the `Vary` headers when the response varies (see [`crate::key`]).
    pub key: String,
    /// Response status code.
    pub status: u16,
    /// Response headers, ready to send: `Name: value\r\n` lines, without hop-by-hop
    /// headers, `Date`, `Age`, `Content-Length`, `Transfer-Encoding` or `Set-Cookie`
    /// (the server adds those per response). Sent verbatim on a hit.
    pub header_block: Vec<u8>,
    /// `ETag` of the response (for `If-None-Match` revalidation and 304s on hits).
    pub etag: Option<String>,
    /// `Last-Modified` of the response.
    pub last_modified: Option<SystemTime>,
    /// `Date` of the response (RFC 9111 4.2.3 age calculation).
    pub date: Option<SystemTime>,
    /// When the request that produced this response was sent.
    pub request_time: SystemTime,
    /// When the response head was received.
    pub response_time: SystemTime,
    pub freshness: Freshness,
    /// Lowercase names of the response's `Vary` headers (empty: does not vary).
    pub vary: Vec<String>,
    /// Purge tags from `Cache-Tag` / `Surrogate-Key`.
    pub tags: Vec<String>,
    /// Body length in bytes ([`BODY_LEN_UNKNOWN`] until the writer finishes).
    pub body_len: u64,
    /// xxh3-64 of the body, filled in by the writer when it finishes.
    pub body_hash: u64,
    /// Names this body for as long as it is stored: set once when the object is first
    /// written, kept by revalidations (a 304 keeps the body), new with every new body.
    /// Encoded variants (compressed copies) are keyed by it, so a variant can only ever
    /// belong to the body it was made from. 0 in files written before format 3 (see
    /// [`ObjectMeta::body_id`]).
    pub body_id: u64,
    /// Soft purge: the object is kept but is stale until revalidated.
    pub soft_purged: bool,
}

impl ObjectMeta {
    /// A meta with the given key and status and everything else empty; the server fills
    /// in the rest (see `from_response` in [`crate::policy`]).
    pub fn new(key: impl Into<String>, status: u16, now: SystemTime) -> Self {
        ObjectMeta {
            key: key.into(),
            status,
            header_block: Vec::new(),
            etag: None,
            last_modified: None,
            date: None,
            request_time: now,
            response_time: now,
            freshness: Freshness::default(),
            vary: Vec::new(),
            tags: Vec::new(),
            body_len: BODY_LEN_UNKNOWN,
            body_hash: 0,
            body_id: 0,
            soft_purged: false,
        }
    }

    /// The body's identity for encoded variants: `body_id`, or for a file written
    /// before it existed, its body checksum (also unique to the body).
    pub fn body_id(&self) -> u64 {
        if self.body_id != 0 {
            self.body_id
        } else {
            self.body_hash
        }
    }

    /// Round every time to whole milliseconds, the resolution of the encoding, so the
    /// in-memory copy equals what a restart reads back.
    pub fn normalize_times(&mut self) {
        let ms = |t: SystemTime| from_unix_ms(unix_ms(t));
        self.request_time = ms(self.request_time);
        self.response_time = ms(self.response_time);
        self.date = self.date.map(ms);
        self.last_modified = self.last_modified.map(ms);
        let d = |d: Duration| Duration::from_millis(duration_ms(d));
        self.freshness.lifetime = d(self.freshness.lifetime);
        self.freshness.initial_age = d(self.freshness.initial_age);
        self.freshness.stale_while_revalidate = d(self.freshness.stale_while_revalidate);
        self.freshness.stale_if_error = d(self.freshness.stale_if_error);
    }

    /// The primary cache key (the variant key up to its first `\0`).
    pub fn primary_key(&self) -> &str {
        self.key.split('\0').next().unwrap_or("")
    }

    /// How many bytes [`ObjectMeta::encode`] appends, without encoding (a writer sizes
    /// its header region and its commit's buffer from it).
    pub fn encoded_len(&self) -> usize {
        let bytes = |b: &[u8]| 4 + b.len();
        let list = |l: &[String]| 4 + l.iter().map(|s| bytes(s.as_bytes())).sum::<usize>();
        let opt_time = |t: Option<SystemTime>| if t.is_some() { 9 } else { 1 };
        2 + 1
            + bytes(self.key.as_bytes())
            + bytes(&self.header_block)
            + self.etag.as_ref().map_or(1, |e| 1 + bytes(e.as_bytes()))
            + opt_time(self.last_modified)
            + opt_time(self.date)
            + 8 * 2 // request and response times
            + 8 * 4 // the freshness durations
            + list(&self.vary)
            + list(&self.tags)
            + 8 * 3 // body length, hash and id
    }

    /// Serialise into `out` (appends [`ObjectMeta::encoded_len`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.status.to_le_bytes());
        let mut flags = 0u8;
        if self.freshness.must_revalidate {
            flags |= FLAG_MUST_REVALIDATE;
        }
        if self.freshness.no_cache {
            flags |= FLAG_NO_CACHE;
        }
        if self.soft_purged {
            flags |= FLAG_SOFT_PURGED;
        }
        out.push(flags);
        put_bytes(out, self.key.as_bytes());
        put_bytes(out, &self.header_block);
        put_opt_str(out, self.etag.as_deref());
        put_opt_time(out, self.last_modified);
        put_opt_time(out, self.date);
        put_time(out, self.request_time);
        put_time(out, self.response_time);
        for d in [
            self.freshness.lifetime,
            self.freshness.initial_age,
            self.freshness.stale_while_revalidate,
            self.freshness.stale_if_error,
        ] {
            out.extend_from_slice(&duration_ms(d).to_le_bytes());
        }
        put_list(out, &self.vary);
        put_list(out, &self.tags);
        out.extend_from_slice(&self.body_len.to_le_bytes());
        out.extend_from_slice(&self.body_hash.to_le_bytes());
        out.extend_from_slice(&self.body_id.to_le_bytes());
    }

    /// Parse what [`ObjectMeta::encode`] wrote. Every length is checked against the
    /// remaining input and the limits above.
    pub fn decode(buf: &[u8]) -> Result<ObjectMeta, MetaError> {
        Self::decode_format(buf, true)
    }

    /// [`ObjectMeta::decode`] for a file of format 1 or 2 (no `body_id`).
    pub fn decode_before_body_id(buf: &[u8]) -> Result<ObjectMeta, MetaError> {
        Self::decode_format(buf, false)
    }

    fn decode_format(buf: &[u8], with_body_id: bool) -> Result<ObjectMeta, MetaError> {
        let mut r = Reader { buf, pos: 0 };
        let status = u16::from_le_bytes(r.array()?);
        let flags = r.u8()?;
        let key = r.string()?;
        let header_block = r.bytes()?.to_vec();
        let etag = r.opt_string()?;
        let last_modified = r.opt_time()?;
        let date = r.opt_time()?;
        let request_time = r.time()?;
        let response_time = r.time()?;
        let lifetime = Duration::from_millis(r.u64()?);
        let initial_age = Duration::from_millis(r.u64()?);
        let stale_while_revalidate = Duration::from_millis(r.u64()?);
        let stale_if_error = Duration::from_millis(r.u64()?);
        let vary = r.list()?;
        let tags = r.list()?;
        let body_len = r.u64()?;
        let body_hash = r.u64()?;
        let body_id = if with_body_id { r.u64()? } else { 0 };
        if r.pos != buf.len() {
            return Err(MetaError::TrailingBytes);
        }
        Ok(ObjectMeta {
            key,
            status,
            header_block,
            etag,
            last_modified,
            date,
            request_time,
            response_time,
            freshness: Freshness {
                lifetime,
                initial_age,
                stale_while_revalidate,
                stale_if_error,
                must_revalidate: flags & FLAG_MUST_REVALIDATE != 0,
                no_cache: flags & FLAG_NO_CACHE != 0,
            },
            vary,
            tags,
            body_len,
            body_hash,
            body_id,
            soft_purged: flags & FLAG_SOFT_PURGED != 0,
        })
    }
}

const FLAG_MUST_REVALIDATE: u8 = 1;
const FLAG_NO_CACHE: u8 = 2;
const FLAG_SOFT_PURGED: u8 = 4;

/// Why a metadata block could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaError {
    Truncated,
    TooLong,
    BadUtf8,
    TrailingBytes,
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            MetaError::Truncated => "metadata truncated",
            MetaError::TooLong => "metadata field over its limit",
            MetaError::BadUtf8 => "metadata string is not UTF-8",
            MetaError::TrailingBytes => "trailing bytes after metadata",
        };
        f.write_str(s)
    }
}

impl std::error::Error for MetaError {}

/// Milliseconds since the Unix epoch (times before it clamp to 0).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(duration_ms).unwrap_or(0)
}

/// The [`SystemTime`] `ms` milliseconds after the Unix epoch.
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Lengths above u32 are impossible for our fields (bounded by MAX_FIELD_LEN at the
    // producers); saturate rather than panic, the decoder then rejects the block.
    let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
}

fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.push(1);
            put_bytes(out, s.as_bytes());
        }
        None => out.push(0),
    }
}

fn put_time(out: &mut Vec<u8>, t: SystemTime) {
    out.extend_from_slice(&unix_ms(t).to_le_bytes());
}

fn put_opt_time(out: &mut Vec<u8>, t: Option<SystemTime>) {
    match t {
        Some(t) => {
            out.push(1);
            put_time(out, t);
        }
        None => out.push(0),
    }
}

fn put_list(out: &mut Vec<u8>, items: &[String]) {
    let n = u32::try_from(items.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
    for s in items {
        put_bytes(out, s.as_bytes());
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MetaError> {
        let end = self.pos.checked_add(n).ok_or(MetaError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(MetaError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], MetaError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, MetaError> {
        Ok(self.array::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, MetaError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, MetaError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], MetaError> {
        let len = self.u32()? as usize;
        if len > MAX_FIELD_LEN {
            return Err(MetaError::TooLong);
        }
        self.take(len)
    }
    fn string(&mut self) -> Result<String, MetaError> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| MetaError::BadUtf8)
    }
    fn opt_string(&mut self) -> Result<Option<String>, MetaError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.string().map(Some),
        }
    }
    fn time(&mut self) -> Result<SystemTime, MetaError> {
        Ok(from_unix_ms(self.u64()?))
    }
    fn opt_time(&mut self) -> Result<Option<SystemTime>, MetaError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.time().map(Some),
        }
    }
    fn list(&mut self) -> Result<Vec<String>, MetaError> {
        let n = self.u32()? as usize;
        if n > MAX_LIST_ITEMS {
            return Err(MetaError::TooLong);
        }
        let mut v = Vec::with_capacity(n.min(16));
        for _ in 0..n {
            v.push(self.string()?);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> ObjectMeta {
        let t = from_unix_ms(1_700_000_000_123);
        ObjectMeta {
            key: "http://example.com/a?b=1\0gzip".into(),
            status: 200,
            header_block: b"Content-Type: text/plain\r\nETag: \"x\"\r\n".to_vec(),
            etag: Some("\"x\"".into()),
            last_modified: Some(from_unix_ms(1_600_000_000_000)),
            date: None,
            request_time: t,
            response_time: t + Duration::from_millis(5),
            freshness: Freshness {
                lifetime: Duration::from_secs(600),
                initial_age: Duration::from_secs(3),
                stale_while_revalidate: Duration::from_secs(30),
                stale_if_error: Duration::from_secs(86400),
                must_revalidate: true,
                no_cache: false,
            },
            vary: vec!["accept-encoding".into()],
            tags: vec!["product-1".into(), "all".into()],
            body_len: 12345,
            body_hash: 0xdead_beef,
            body_id: 0x1234_5678,
            soft_purged: true,
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let mut buf = Vec::new();
        m.encode(&mut buf);
        assert_eq!(buf.len(), m.encoded_len());
        assert_eq!(ObjectMeta::decode(&buf).unwrap(), m);
        // Every optional field absent, and lists of several items.
        let mut e = ObjectMeta::new("k", 204, SystemTime::UNIX_EPOCH);
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(out.len(), e.encoded_len());
        e.vary = vec!["accept-encoding".into(), "origin".into()];
        e.tags = vec!["a".into(), String::new(), "ccc".into()];
        out.clear();
        e.encode(&mut out);
        assert_eq!(out.len(), e.encoded_len());
        assert_eq!(m.primary_key(), "http://example.com/a?b=1");
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        sample().encode(&mut buf);
        for cut in 0..buf.len() {
            assert!(ObjectMeta::decode(&buf[..cut]).is_err(), "cut at {cut}");
        }
        buf.push(0);
        assert_eq!(ObjectMeta::decode(&buf), Err(MetaError::TrailingBytes));
    }

    #[test]
    fn absurd_lengths_are_rejected() {
        let mut buf = Vec::new();
        sample().encode(&mut buf);
        // The key length sits right after status (2) and flags (1).
        buf[3..7].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ObjectMeta::decode(&buf), Err(MetaError::TooLong));
    }
}
