//! The router and response builder (sans-I/O): one parsed request in, one [`Reply`] out.
//!
//! How it fits: the connection loop parses a request and calls [`respond`]; the reply
//! carries the complete head as bytes, the body as a plan ([`Body`]), and the behaviours
//! the loop must act out (delay, pacing, reset, close). Routing, conditional requests,
//! ranges, cache headers and every injection parameter live here, so all of it is
//! testable without sockets.

use crate::body::{Body, Framing};
use crate::body_cache::BodyCache;
use crate::content::{self, Kind};
use crate::date::{self, DateCache, LAST_MODIFIED};
use crate::pick::Picker;
use crate::query::{Inject, MAX_CE_SIZE};
use crate::range;
use crate::request::{Invalid, Method, Request};
use crate::stats::{Class, Stats};
use edge_http::{
    evaluate_preconditions, evaluate_range, Precondition, RangeOutcome, Recipient, Validators,
};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest object served (1 TiB): bigger sizes are a typo.
pub const MAX_OBJECT_SIZE: u64 = 1 << 40;
/// Largest object that gets an `X-Checksum`: hashing happens before the head is sent,
/// and 4 GiB already takes about a second (once; checksums are cached).
pub const MAX_CHECKSUM_SIZE: u64 = 4 << 30;
/// Longest `id` segment accepted in `/obj/<size>/<id>`.
const MAX_ID_LEN: usize = 256;

const CT_OBJ: &str = "application/octet-stream";
const CT_TXT: &str = "text/html; charset=utf-8";
const CT_PLAIN: &str = "text/plain; charset=utf-8";
const CT_JSON: &str = "application/json";

const HELP: &str = "edgeorigin: deterministic objects for cache tests\n\
GET|HEAD /obj/<size>/<id>   incompressible bytes (sizes: 4k, 1m, 1000, ...)\n\
GET|HEAD /txt/<size>/<id>   compressible HTML-like text\n\
GET      /obj/rand          an object picked by --obj-dist over --sizes x --count\n\
GET      /burn?us=N         spend N microseconds of CPU\n\
GET      /stats             JSON counters (POST /stats/reset or /stats?reset=1 zeroes)\n\
query: delay_ms slow_bps status reset max_age no_store private vary set_cookie tag chunked etag lm ce\n";

/// Per-thread state the builder needs.
pub struct Ctx {
    /// Index of the serving thread (its stats shard).
    pub thread: usize,
    /// `Cache-Control: max-age` unless a request overrides it.
    pub max_age: u64,
    pub picker: Picker,
    pub date: DateCache,
    pub stats: Arc<Stats>,
    pub bodies: BodyCache,
}

/// Everything the connection loop needs to send one response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The complete head, status line to blank line.
    pub head: Vec<u8>,
    /// Body bytes to send after the head; `None` for HEAD, 204 and 304.
    pub body: Option<Body>,
    pub framing: Framing,
    /// Sleep this long before sending the head.
    pub delay: Duration,
    /// Pace the body at this many bytes per second.
    pub slow_bps: Option<u64>,
    /// Send the head and half the body, then reset the connection.
    pub reset: bool,
    /// Close the connection after this response.
    pub close: bool,
    /// Stats class; `None` for `/stats` itself (not counted).
    pub class: Option<Class>,
}

/// What a route resolved to, before headers are written.
enum Target {
    /// An object: kind, size, id (after `vary` mixing), and extra headers.
    Object {
        kind: Kind,
        size: u64,
        id: u64,
        extra: Vec<(&'static str, String)>,
    },
    /// A short literal body.
    Literal {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
}

/// Answers one request.
pub fn respond(ctx: &mut Ctx, req: &Request) -> Reply {
    if req.path == "/stats" || req.path == "/stats/reset" {
        return stats_reply(ctx, req);
    }
    let inject = match Inject::parse(req.query) {
        Ok(i) => i,
        Err(msg) => return error_reply(ctx, req, 400, &msg, None),
    };
    if !matches!(req.method, Method::Get | Method::Head) {
        return error_reply(
            ctx,
            req,
            405,
            "method not allowed",
            Some(("Allow", "GET, HEAD")),
        );
    }
    let target = match route(ctx, req, &inject) {
        Ok(t) => t,
        Err((status, msg)) => Target::Literal {
            status,
            content_type: CT_PLAIN,
            body: msg.into_bytes(),
        },
    };
    build(ctx, req, &inject, target)
}

/// Resolves the path to an object or a literal.
fn route(ctx: &mut Ctx, req: &Request, inject: &Inject) -> Result<Target, (u16, String)> {
    let path = req.path;
    if path == "/" {
        return Ok(Target::Literal {
            status: 200,
            content_type: CT_PLAIN,
            body: HELP.into(),
        });
    }
    if path == "/burn" {
        burn(inject.burn_us);
        let body = format!("burned {} us\n", inject.burn_us).into_bytes();
        return Ok(Target::Literal {
            status: 200,
            content_type: CT_PLAIN,
            body,
        });
    }
    if path == "/obj/rand" {
        let (size, id) = ctx.picker.pick();
        let extra = vec![
            ("X-Obj-Size", size.to_string()),
            ("X-Obj-Id", id.to_string()),
        ];
        return Ok(Target::Object {
            kind: Kind::Obj,
            size,
            id: vary_id(req, inject, id),
            extra,
        });
    }
    let (kind, rest) = if let Some(r) = path.strip_prefix("/obj/") {
        (Kind::Obj, r)
    } else if let Some(r) = path.strip_prefix("/txt/") {
        (Kind::Txt, r)
    } else {
        return Err((404, "not found\n".into()));
    };
    let Some((size_text, id_text)) = rest.split_once('/') else {
        return Err((404, "not found: use /obj/<size>/<id>\n".into()));
    };
    let size =
        crate::parse_size(size_text).ok_or_else(|| (400, format!("bad size {size_text:?}\n")))?;
    if size > MAX_OBJECT_SIZE {
        return Err((
            400,
            format!("size {size} above the limit {MAX_OBJECT_SIZE}\n"),
        ));
    }
    if id_text.is_empty() || id_text.len() > MAX_ID_LEN || id_text.contains('/') {
        return Err((404, "not found: bad id\n".into()));
    }
    let id = parse_id(id_text);
    Ok(Target::Object {
        kind,
        size,
        id: vary_id(req, inject, id),
        extra: Vec::new(),
    })
}

/// A decimal id is itself; any other text is hashed, so `/obj/1m/logo.png` works too.
fn parse_id(s: &str) -> u64 {
    match s.parse::<u64>() {
        Ok(n) if s.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => twox_hash::XxHash3_64::oneshot(s.as_bytes()),
    }
}

/// With `vary=H`, the value of request header H is mixed into the id, so every variant
/// has its own bytes, ETag and checksum. An absent header leaves the id as it is.
fn vary_id(req: &Request, inject: &Inject, id: u64) -> u64 {
    match inject.vary.as_deref().and_then(|name| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
    }) {
        Some(h) => id ^ twox_hash::XxHash3_64::oneshot_with_seed(0x7661_7279, h.value),
        None => id,
    }
}

/// Spends `us` microseconds of CPU on this thread (the point: a CPU-bound origin).
fn burn(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..64u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

/// The strong ETag of an object: kind, size and id in hex.
pub fn etag(kind: Kind, size: u64, id: u64) -> String {
    let k = match kind {
        Kind::Obj => 'o',
        Kind::Txt => 't',
    };
    format!("\"{k}{size:x}-{id:x}\"")
}

/// `If-None-Match` matches (weak comparison, as RFC 9110 §13.1.2 asks).
/// The object's validators as the conditional and range rules see them: its ETag and,
/// when `Last-Modified` is sent, [`LAST_MODIFIED`].
fn validators(etag: Option<&str>, last_modified: bool) -> Validators<'_> {
    Validators::new(etag, last_modified.then(date::last_modified_time))
}

/// The request method for edge-http's rules (only GET and HEAD get this far).
fn http_method(m: Method) -> edge_http::Method {
    match m {
        Method::Get => edge_http::Method::Get,
        Method::Head => edge_http::Method::Head,
        Method::Post => edge_http::Method::Post,
        Method::Other => edge_http::Method::Other(String::new()),
    }
}

/// Builds the reply for a resolved target, applying conditionals, ranges and injection.
fn build(ctx: &mut Ctx, req: &Request, inject: &Inject, target: Target) -> Reply {
    let head_only = req.method == Method::Head;
    let (object, natural_status, mut content_type, mut body) = match target {
        Target::Literal {
            status,
            content_type,
            body,
        } => (None, status, content_type.to_string(), Body::literal(body)),
        Target::Object {
            kind,
            size,
            id,
            extra,
        } => {
            let ct = if kind == Kind::Obj { CT_OBJ } else { CT_TXT };
            (
                Some((kind, size, id, extra)),
                200,
                ct.to_string(),
                Body::object(kind, size, id),
            )
        }
    };
    let class = match &object {
        Some((Kind::Obj, ..)) => Class::Obj,
        Some((Kind::Txt, ..)) => Class::Txt,
        None => Class::Other,
    };
    let etag_value = object
        .as_ref()
        .filter(|_| inject.etag)
        .map(|(k, s, i, _)| etag(*k, *s, *i));
    let mut literal = object.is_none();
    let mut status = inject.status.unwrap_or(natural_status);
    let mut content_range: Option<String> = None;

    if let (Some((kind, size, id, _)), None) = (&object, inject.status) {
        // Natural 200s of objects get conditionals and ranges; injected statuses do not.
        let (kind, size, id) = (*kind, *size, *id);
        let v = validators(etag_value.as_deref(), inject.last_modified);
        let method = http_method(req.method);
        match evaluate_preconditions(&method, req.headers, &v, Recipient::OriginServer) {
            Precondition::NotModified => status = 304,
            Precondition::Failed => {
                status = 412;
                content_type = CT_PLAIN.to_string();
                body = Body::literal(format!("{status} {}\n", reason(status)).into_bytes());
                literal = true;
            }
            Precondition::Proceed => match evaluate_range(&method, req.headers, &v, size) {
                RangeOutcome::Full(_) => {}
                RangeOutcome::Unsatisfiable => {
                    status = 416;
                    content_range = Some(format!("bytes */{size}"));
                    content_type = CT_PLAIN.to_string();
                    body = Body::literal(
                        format!("range not satisfiable (size {size})\n").into_bytes(),
                    );
                    literal = true;
                }
                RangeOutcome::Partial(rs) if rs.len() == 1 => {
                    let r = rs[0];
                    status = 206;
                    content_range = Some(format!("bytes {}-{}/{size}", r.first(), r.last()));
                    body = Body::slice(kind, size, id, r.first(), r.end());
                }
                RangeOutcome::Partial(rs) => {
                    status = 206;
                    let (pieces, _) = range::multipart(&rs, size, &content_type);
                    content_type = format!("multipart/byteranges; boundary={}", range::BOUNDARY);
                    body = Body::pieces(kind, size, id, pieces);
                }
            },
        }
    } else if !(200..300).contains(&status) && !literal {
        // An injected non-2xx on an object: a short text body instead of the object.
        content_type = CT_PLAIN.to_string();
        body = Body::literal(format!("{status} {}\n", reason(status)).into_bytes());
        literal = true;
    }

    // `ce=`: the whole 200 object encoded (ranges and conditionals concern the encoded
    // representation, which has its own ETag; a range asks for the whole of it here).
    let mut encoded = None;
    if let (Some(c), Some((kind, size, id, _)), true) =
        (inject.ce, &object, status == 200 || status == 206)
    {
        if *size > MAX_CE_SIZE {
            let msg = format!("bad query parameter ce: objects up to {MAX_CE_SIZE} bytes");
            return error_reply(ctx, req, 400, &msg, None);
        }
        let mut plain = vec![0u8; *size as usize];
        content::fill(*kind, *size, *id, 0, &mut plain);
        let levels = edge_compress::Levels::default();
        match edge_compress::codec::encode_all(c, &levels, &plain) {
            Ok(z) => {
                status = 200;
                content_range = None;
                body = Body::literal(z);
                encoded = Some(c);
            }
            Err(e) => return error_reply(ctx, req, 500, &format!("encoding failed: {e}"), None),
        }
    }
    let bodiless = status == 204 || status == 304;
    let framing = match (inject.chunked && !bodiless, req.minor) {
        (false, _) => Framing::Length,
        (true, 1) => Framing::Chunked,
        (true, _) => Framing::Close,
    };
    let close = !req.keep_alive || inject.reset || framing == Framing::Close;
    if !literal && !bodiless && !head_only {
        // Hot objects come from the thread's body cache (generated once); this also
        // leaves their checksum cached for the head below.
        let cached = ctx.bodies.get(body.kind, body.size, body.id);
        body = body.with_cached(cached);
    }

    let mut h = Vec::with_capacity(512);
    let _ = write!(
        h,
        "HTTP/1.1 {status} {}\r\nServer: edgeorigin\r\nDate: {}\r\n",
        reason(status),
        ctx.date.now()
    );
    if !bodiless {
        push(&mut h, "Content-Type", &content_type);
        match framing {
            Framing::Length => push(&mut h, "Content-Length", &body.len.to_string()),
            Framing::Chunked => push(&mut h, "Transfer-Encoding", "chunked"),
            Framing::Close => {}
        }
    }
    if let Some(cr) = &content_range {
        push(&mut h, "Content-Range", cr);
    }
    if let Some(c) = encoded {
        push(&mut h, "Content-Encoding", c.token());
    }
    if let Some((kind, size, id, extra)) = &object {
        if let Some(tag) = &etag_value {
            match encoded {
                // The encoded representation's own tag.
                Some(c) => push(
                    &mut h,
                    "ETag",
                    &format!("{}-{}\"", &tag[..tag.len() - 1], c.token()),
                ),
                None => push(&mut h, "ETag", tag),
            }
        }
        if inject.last_modified {
            push(&mut h, "Last-Modified", LAST_MODIFIED);
        }
        push(&mut h, "Accept-Ranges", "bytes");
        if (!literal || encoded.is_some()) && *size <= MAX_CHECKSUM_SIZE {
            // The whole object's checksum, also on a 206: clients verify slices by
            // regenerating them, whole bodies by this header.
            push(
                &mut h,
                "X-Checksum",
                &format!("{:016x}", content::checksum_of(*kind, *size, *id)),
            );
        }
        for (name, value) in extra {
            push(&mut h, name, value);
        }
    }
    if literal && !bodiless && encoded.is_none() {
        let mut bytes = Vec::with_capacity(body.len as usize);
        body.produce(0, usize::MAX, &mut bytes);
        push(
            &mut h,
            "X-Checksum",
            &format!("{:016x}", twox_hash::XxHash3_64::oneshot(&bytes)),
        );
    }
    // `/obj/rand` names a different object each time: not cacheable unless asked.
    let rand = req.path == "/obj/rand";
    push(
        &mut h,
        "Cache-Control",
        &cache_control(ctx.max_age, inject, rand),
    );
    if let Some(v) = &inject.vary {
        push(&mut h, "Vary", v);
    }
    if inject.set_cookie {
        push(&mut h, "Set-Cookie", "s=1");
    }
    if let Some(t) = &inject.tag {
        push(&mut h, "Cache-Tag", t);
        let keys: Vec<&str> = t
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        push(&mut h, "Surrogate-Key", &keys.join(" "));
    }
    end_head(&mut h, close, req.minor);

    Reply {
        status,
        head: h,
        body: (!head_only && !bodiless).then_some(body),
        framing,
        delay: Duration::from_millis(inject.delay_ms),
        slow_bps: inject.slow_bps,
        reset: inject.reset,
        close,
        class: Some(class),
    }
}

fn cache_control(max_age: u64, inject: &Inject, no_store_by_default: bool) -> String {
    if inject.no_store || (no_store_by_default && inject.max_age.is_none() && !inject.private) {
        "no-store".into()
    } else if inject.private {
        "private".into()
    } else {
        let mut cc = format!("max-age={}", inject.max_age.unwrap_or(max_age));
        if let Some(n) = inject.swr {
            cc.push_str(&format!(", stale-while-revalidate={n}"));
        }
        if let Some(n) = inject.sie {
            cc.push_str(&format!(", stale-if-error={n}"));
        }
        cc
    }
}

fn push(h: &mut Vec<u8>, name: &str, value: &str) {
    h.extend_from_slice(name.as_bytes());
    h.extend_from_slice(b": ");
    h.extend_from_slice(value.as_bytes());
    h.extend_from_slice(b"\r\n");
}

/// Writes the `Connection` header the reply needs and the blank line.
fn end_head(h: &mut Vec<u8>, close: bool, minor: u8) {
    if close {
        push(h, "Connection", "close");
    } else if minor == 0 {
        push(h, "Connection", "keep-alive");
    }
    h.extend_from_slice(b"\r\n");
}

/// A reply with a literal body and no injection (errors, `/stats`), marked not cacheable.
#[allow(clippy::too_many_arguments)]
fn literal_reply(
    ctx: &mut Ctx,
    status: u16,
    content_type: &str,
    body: Vec<u8>,
    extra: Option<(&str, &str)>,
    close: bool,
    head_only: bool,
    minor: u8,
) -> Reply {
    let mut h = Vec::with_capacity(256);
    let _ = write!(
        h,
        "HTTP/1.1 {status} {}\r\nServer: edgeorigin\r\nDate: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
        reason(status),
        ctx.date.now(),
        body.len()
    );
    if let Some((name, value)) = extra {
        push(&mut h, name, value);
    }
    end_head(&mut h, close, minor);
    Reply {
        status,
        head: h,
        body: (!head_only).then(|| Body::literal(body)),
        framing: Framing::Length,
        delay: Duration::ZERO,
        slow_bps: None,
        reset: false,
        close,
        class: Some(Class::Other),
    }
}

/// A short text error for a parsed request.
fn error_reply(
    ctx: &mut Ctx,
    req: &Request,
    status: u16,
    msg: &str,
    extra: Option<(&str, &str)>,
) -> Reply {
    let body = format!("{}\n", msg.trim_end()).into_bytes();
    literal_reply(
        ctx,
        status,
        CT_PLAIN,
        body,
        extra,
        !req.keep_alive,
        req.method == Method::Head,
        req.minor,
    )
}

/// The reply to a request that could not be parsed: always closes.
pub fn invalid_reply(ctx: &mut Ctx, inv: Invalid) -> Reply {
    let body = format!("{}\n", inv.message()).into_bytes();
    literal_reply(ctx, inv.status(), CT_PLAIN, body, None, true, false, 1)
}

/// `/stats` (GET, HEAD; `?reset=1` zeroes after reading) and `POST /stats/reset`. Both
/// answer the counters as they were before any reset. Not counted themselves.
fn stats_reply(ctx: &mut Ctx, req: &Request) -> Reply {
    let reset_param = req.query.split('&').any(|p| p == "reset=1" || p == "reset");
    let mut r = match (req.method, req.path) {
        (Method::Get | Method::Head, "/stats") | (Method::Post, "/stats/reset") => {
            let json = ctx.stats.snapshot().to_json();
            if reset_param || req.method == Method::Post {
                ctx.stats.reset();
            }
            let head_only = req.method == Method::Head;
            literal_reply(
                ctx,
                200,
                CT_JSON,
                json.into_bytes(),
                None,
                !req.keep_alive,
                head_only,
                req.minor,
            )
        }
        _ => {
            let allow = if req.path == "/stats" {
                "GET, HEAD"
            } else {
                "POST"
            };
            error_reply(ctx, req, 405, "method not allowed", Some(("Allow", allow)))
        }
    };
    r.class = None;
    r
}

/// The reason phrase for a status line (edge-http's table); statuses it does not name
/// (an injected `status=299`, say) get a generic one rather than an empty reason.
pub fn reason(status: u16) -> &'static str {
    match edge_http::reason_phrase(status) {
        "" => "Status",
        r => r,
    }
}

#[cfg(test)]
mod tests;
