//! One request/response exchange on a connection: the parsed request, what the handler
//! decided (status, keep-alive, cache status) and what was sent, for the access log.
//! Also the helpers every handler uses to write a response head and to take in a
//! request body (including `Expect: 100-continue`).
//!
//! The response head is version-neutral: a handler names the status
//! ([`Exchange::begin_head`]), writes the fields as `Name: value\r\n` lines, and ends
//! the head with how its body is delimited ([`BodyLen`], [`Exchange::end_head`]). The
//! protocol's encoder does the rest: for HTTP/1.x the status line, `Connection`,
//! `Transfer-Encoding: chunked` and the chunks' framing ([`Framing`]); for HTTP/2 the
//! field lines go to the stream as HEADERS ([`super::head::HeadSlot`]) and the
//! body's bytes as DATA frames. No handler writes a byte of either protocol's framing.

use super::conn::Conn;
pub use super::head::{BodyLen, Framing};
use edge_http::{BodyDecoder, BodyKind, RequestHead, Version};
use std::io;
use std::time::{Duration, Instant};

pub struct Exchange {
    /// Boxed: it moves from the parser into the exchange and back to the worker's
    /// spares as a pointer, not as its 144 bytes (a `memcpy` call per move).
    pub req: Box<RequestHead>,
    /// Whether the connection stays open after this response. Handlers clear it when
    /// they cannot leave the connection in a clean state (body not consumed, error).
    pub keep_alive: bool,
    pub status: u16,
    pub body_bytes_sent: u64,
    /// Response head bytes written (`$bytes_sent` is this and `body_bytes_sent`).
    pub header_bytes: u64,
    /// Where the head being written starts in its buffer (set by `begin_*head`).
    head_start: usize,
    /// Where its field lines start (past the HTTP/1 status line).
    fields_at: usize,
    /// The protocol that encodes the response head.
    encoder: Encoder,
    /// Request head bytes (`$request_length`, with the body read).
    pub head_length: u64,
    /// When the first upstream request of this exchange started
    /// (`$upstream_response_time` runs from it to the end of the response).
    pub upstream_started: Option<Instant>,
    pub cache_status: Option<&'static str>,
    /// What the cache did beyond the status, for `Cache-Status` (RFC 9211).
    pub cache: CacheReport,
    pub started: Instant,
    /// Request body not yet consumed from the connection.
    pub body: Option<BodyDecoder>,
    pub continue_sent: bool,
    /// What routing found (server, regex captures, the URI before a rewrite), for the
    /// templates the handlers render.
    pub routed: crate::vars::Routed,
    /// The route's response-field control (`add_header`, `proxy_hide_header`,
    /// `cache_status_header`), applied by [`Self::end_head`].
    pub out_fields: super::fields::OutFields,
    /// The route's `proxy_set_header`, rendered for this request (None: none set).
    pub upstream_fields: Option<std::rc::Rc<super::fields::UpstreamFields>>,
    /// Flips to true when the server starts draining: responses written after that
    /// close the connection even if the request arrived before.
    draining: std::rc::Rc<super::idle::IdleTimers>,
    /// See [`Exchange::client_addr`].
    client: std::net::SocketAddr,
    /// `Alt-Svc` for this response: the listener's (`[[listen]] alt_svc`), on TCP.
    pub alt_svc: Option<bytes::Bytes>,
}

/// Why an exchange ended without a clean response.
#[derive(Debug)]
pub enum ExchangeError {
    /// The client went away or timed out: close without writing.
    Client(io::Error),
    /// The response was cut mid-way (upstream broke after the head): close.
    Aborted(String),
}

impl From<io::Error> for ExchangeError {
    fn from(e: io::Error) -> Self {
        ExchangeError::Client(e)
    }
}

pub const SERVER: &[u8] = b"edgecache";
/// Our name in `Cache-Status` entries.
/// This node's default name in `Cache-Status` (see [`super::node`]: `node_name`).
pub const CACHE_STATUS_NAME: &str = super::node::DEFAULT_NAME;

/// The parameters of our `Cache-Status` entry (RFC 9211) besides the outcome, which
/// comes from the `X-Cache-Status` value.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheReport {
    /// Freshness left, in seconds, of a response served from the cache (negative when
    /// stale): `ttl`.
    pub ttl: Option<i64>,
    /// The status the origin answered with, when the request went forward: `fwd-status`.
    pub fwd_status: Option<u16>,
    /// The response is being stored: `stored`.
    pub stored: bool,
    /// The request waited on another request's fill instead of going forward itself:
    /// `collapsed`.
    pub collapsed: bool,
    /// Why, when the origin could not be used (a stale copy served on error): `detail`.
    pub detail: Option<&'static str>,
}
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The protocol an exchange's response head is encoded for.
enum Encoder {
    /// HTTP/1.x: the head is written as bytes into the handler's buffer.
    H1,
    /// An HTTP/2 stream: the fields go to the stream's slot, sent as HEADERS.
    H2(std::rc::Rc<super::head::HeadSlot>),
}

impl Exchange {
    pub fn new(
        req: Box<RequestHead>,
        keep_alive: bool,
        max_body: Option<u64>,
        draining: std::rc::Rc<super::idle::IdleTimers>,
        client: std::net::SocketAddr,
    ) -> Exchange {
        let body = match req.body {
            BodyKind::Empty | BodyKind::Length(0) => None,
            kind => Some(BodyDecoder::new(kind, max_body)),
        };
        Exchange {
            req,
            keep_alive,
            status: 0,
            body_bytes_sent: 0,
            header_bytes: 0,
            head_start: 0,
            fields_at: 0,
            encoder: Encoder::H1,
            head_length: 0,
            upstream_started: None,
            cache_status: None,
            cache: CacheReport::default(),
            started: Instant::now(),
            body,
            continue_sent: false,
            routed: crate::vars::Routed::default(),
            out_fields: super::fields::OutFields::default(),
            upstream_fields: None,
            draining,
            client,
            alt_svc: None,
        }
    }

    /// Encodes this exchange's response for an HTTP/2 stream (its head goes to `slot`).
    pub fn encode_for_h2(&mut self, slot: std::rc::Rc<super::head::HeadSlot>) {
        self.encoder = Encoder::H2(slot);
    }

    /// The request's client address, `$remote_addr`: the connection's client
    /// ([`Conn::client`]: the TCP peer, or a PROXY header's source), or the address a
    /// trusted proxy named in the `real_ip` field (port 0). What the access log shows,
    /// what goes upstream in `X-Forwarded-For` and what the PURGE allow-list checks
    /// (`docs/client-address.md`).
    pub fn client_addr(&self) -> std::net::SocketAddr {
        self.client
    }

    /// The request, once the exchange is over (its allocations are reused).
    pub fn into_request(self) -> Box<RequestHead> {
        self.req
    }

    pub fn is_head(&self) -> bool {
        self.req.method == edge_http::Method::Head
    }

    /// True when the client can take a chunked body (HTTP/1.1).
    fn chunked_ok(&self) -> bool {
        self.req.version != Version::Http10
    }

    /// Starts a response head with `status`: the status line (HTTP/1), Date and Server.
    /// The caller adds its fields, then [`Self::end_head`].
    pub fn begin_head(&mut self, out: &mut Vec<u8>, status: u16) {
        self.status = status;
        self.head_start = out.len();
        if let Encoder::H1 = self.encoder {
            edge_http::write_status_line(out, status);
        }
        self.fields_at = out.len();
        edge_http::write_header(out, "Date", &edge_http::http_date_now());
        edge_http::write_header(out, "Server", SERVER);
    }

    /// [`Self::begin_head`] for a head whose `Date` comes with the stored header block
    /// that follows (a cached response keeps the origin's `Date`; `Age` tells its age).
    /// The status line (HTTP/1) and Server.
    pub fn begin_stored_head(&mut self, out: &mut Vec<u8>, status: u16) {
        self.status = status;
        self.head_start = out.len();
        if let Encoder::H1 = self.encoder {
            edge_http::write_status_line(out, status);
        }
        self.fields_at = out.len();
        edge_http::write_header(out, "Server", SERVER);
    }

    /// `X-Cache-Status` (nginx's values) and our `Cache-Status` entry (RFC 9211), for a
    /// response of a cached location. An origin's or a parent cache's own `Cache-Status`
    /// lines, forwarded or stored, come before ours, so the list reads from the origin
    /// to the client.
    /// Nothing with `cache_status_header = false`.
    pub fn write_cache_status(&self, out: &mut Vec<u8>) {
        let Some(cs) = self.cache_status else {
            return;
        };
        if !self.out_fields.cache_status {
            return;
        }
        edge_http::write_header(out, "X-Cache-Status", cs.as_bytes());
        // Written in place (no allocation: this is on every hit).
        out.extend_from_slice(b"Cache-Status: ");
        out.extend_from_slice(super::node::get().name.as_bytes());
        let r = &self.cache;
        out.extend_from_slice(match cs {
            "HIT" | "UPDATING" => b"; hit",
            "BYPASS" => b"; fwd=bypass",
            "MISS" => b"; fwd=uri-miss",
            _ => b"; fwd=stale", // EXPIRED, STALE, REVALIDATED
        });
        if let (Some(s), false) = (r.fwd_status, matches!(cs, "HIT" | "UPDATING")) {
            out.extend_from_slice(b"; fwd-status=");
            edge_http::write_decimal(out, u64::from(s));
        }
        if let Some(t) = r.ttl {
            out.extend_from_slice(b"; ttl=");
            if t < 0 {
                out.push(b'-');
            }
            edge_http::write_decimal(out, t.unsigned_abs());
        }
        if r.stored {
            out.extend_from_slice(b"; stored");
        }
        if r.collapsed {
            out.extend_from_slice(b"; collapsed");
        }
        if let Some(d) = r.detail {
            out.extend_from_slice(b"; detail=");
            out.extend_from_slice(d.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Ends the head: the route's field control (hidden fields removed, `add_header`
    /// lines added for the status), then the protocol's encoding. For HTTP/1.x the
    /// framing of a body of unknown length (`Transfer-Encoding: chunked` to a 1.1
    /// client; to a 1.0 one the connection closes after it), the Connection field when
    /// needed and the blank line, in `out`. For HTTP/2 the field lines leave `out` for
    /// the stream, which sends them as HEADERS before the body's first bytes (the
    /// stream drops connection-specific fields). Returns how the body's bytes are
    /// framed.
    pub fn end_head(&mut self, out: &mut Vec<u8>, body: BodyLen) -> Framing {
        if let Some(hide) = &self.out_fields.hide {
            super::fields::hide_fields(out, self.fields_at, hide);
        }
        if self.out_fields.adds_to(self.status) {
            match &self.out_fields.add {
                super::fields::AddFields::None => {}
                super::fields::AddFields::Static(lines) => out.extend_from_slice(lines),
                super::fields::AddFields::Render(f) => {
                    let f = f.clone();
                    f(self, out);
                }
            }
        }
        if let Some(v) = &self.alt_svc {
            edge_http::write_header(out, "Alt-Svc", v);
        }
        if let Encoder::H2(slot) = &self.encoder {
            let fields = &out[self.fields_at.min(out.len())..];
            self.header_bytes = fields.len() as u64;
            slot.put(self.status, fields, body, self.is_head());
            out.truncate(self.head_start);
            return Framing::default();
        }
        let mut framing = Framing::default();
        if body == BodyLen::Unknown && !self.is_head() {
            if self.chunked_ok() {
                edge_http::write_header(out, "Transfer-Encoding", b"chunked");
                framing = Framing::chunked();
            } else {
                self.keep_alive = false; // HTTP/1.0: the body ends when we close
            }
        }
        if self.draining.is_draining() {
            self.keep_alive = false;
        }
        if !self.keep_alive {
            edge_http::write_header(out, "Connection", b"close");
        } else if self.req.version == Version::Http10 {
            edge_http::write_header(out, "Connection", b"keep-alive");
        }
        out.extend_from_slice(b"\r\n");
        self.header_bytes = out.len().saturating_sub(self.head_start) as u64;
        framing
    }

    /// Sends `100 Continue` once, if the client asked for it and the body is wanted.
    pub async fn send_continue(
        &mut self,
        conn: &mut Conn,
        send_timeout: Duration,
    ) -> io::Result<()> {
        // (HTTP/2 drops `Expect`: its clients send the body without waiting.)
        if self.req.expect_continue
            && matches!(self.encoder, Encoder::H1)
            && !self.continue_sent
            && self.body.is_some()
            && conn.rbuf.is_empty()
        {
            self.continue_sent = true;
            conn.write_all(CONTINUE, send_timeout).await?;
        }
        Ok(())
    }

    /// Reads and discards the request body (handlers that do not use it), so the next
    /// pipelined request parses. A body over the limit or a broken one is an error: the
    /// caller answers 413/400 and closes.
    pub async fn discard_body(
        &mut self,
        conn: &mut Conn,
        timeout: Duration,
        send_timeout: Duration,
    ) -> Result<(), u16> {
        if self.body.is_none() {
            return Ok(());
        }
        self.send_continue(conn, send_timeout)
            .await
            .map_err(|_| 400u16)?;
        let mut dec = self.body.take().expect("checked");
        loop {
            if !conn.rbuf.is_empty() {
                let d = dec.decode(&conn.rbuf).map_err(|e| e.status())?;
                let n = d.consumed;
                let done = d.done;
                bytes::Buf::advance(&mut conn.rbuf, n);
                if done {
                    return Ok(());
                }
                if n > 0 {
                    continue;
                }
            }
            match conn.fill(timeout).await {
                Ok(0) | Err(_) => return Err(400),
                Ok(_) => {}
            }
        }
    }
}
