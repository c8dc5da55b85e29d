//! `--h3`: HTTP/3 load over QUIC (quinn + h3, rustls on ring), in place of [`crate::conn`]'s
//! HTTP/1.1 loop.
//!
//! How it fits: [`crate::worker`] spawns one [`run`] task per connection when
//! `cfg.h3`. Each connection is one QUIC connection on its own quinn `Endpoint` (its own
//! UDP socket, bound to the unspecified address or to its `--source` address), so every
//! connection has its own 4-tuple, as a real client population would. After the
//! handshake, `--pipeline N` *lanes* share the connection: each lane is a local task
//! that sends one request stream at a time (take a `--requests` ticket, send the
//! request, finish the send side, read the response and its body, record), so N streams
//! are in flight per connection. With `-R` the lanes take the connection's send times in
//! order (`t0 + k·interval`, as [`crate::conn`] does), each sleeping until its turn;
//! latency starts at the intended time unless only the timer's slack separates the two
//! (`conn::open_loop_start`).
//!
//! Requests are the ones the HTTP/1.1 path sends: the class writes its HTTP/1.1 request
//! head ([`crate::target::Class::write_request`], or `write_range_request` for `--seek`)
//! and [`to_request`] turns it into an `http::Request` (method, `https://authority/path`,
//! headers except `Host`, which becomes `:authority`, and the connection-specific ones
//! HTTP/3 forbids). [`check_headers`] and [`check_classes`] refuse at start-up what
//! could not be converted.
//!
//! Measurements, as the https path records them:
//! - `connect` and `tls_handshake`: QUIC has no transport handshake of its own (the TLS
//!   1.3 handshake *is* the connection handshake), so both get the QUIC handshake time,
//!   from the first Initial packet to the established connection.
//! - `tls.handshakes`, `tls.resumed` (a handshake that checked no certificate: the
//!   rustls session was resumed), `tls.failed` with the first reason, `connections`.
//! - `bytes`: response body bytes (DATA frame payloads). Response heads arrive
//!   QPACK-compressed inside h3 and are not counted.
//!
//! Sessions: each edgeload connection is one client, with its own rustls config and
//! session cache, kept across its reconnects (so `--no-keepalive` resumes from the
//! connection's previous session, unless `--tls-no-resume`). It cannot be the run's one
//! cache as over TCP: rustls resumes a session only under the very certificate
//! verifier that made it, and the verifier is per connection, wrapped to tell a full
//! handshake (it checks a certificate) from a resumed one (it does not).
//!
//! Errors: a stream the server resets (or a response that cannot be read) is a `read`
//! error of that request and the connection carries on; a connection-level failure
//! closes the connection and every request still in flight on it counts once (`read`,
//! or `timeout` when a request passed `-T`, which also closes the connection, as in
//! HTTP/1.1); then edgeload reconnects, with [`crate::conn`]'s backoff after failed
//! connects. A server that closes an idle connection (idle timeout, GOAWAY) costs no
//! error: the request that found it closing before it was sent goes out on the next
//! connection (requests in flight may still complete). In open loop a replaced
//! connection opens when its next request is due, not at once. `--no-keepalive` opens
//! a new QUIC connection per request.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::h3::client::SendRequest;
use ::h3::error::StreamError;
use bytes::{Buf, Bytes};
use http::header::HeaderValue;
use http::Request;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, timeout_at};

use crate::conn::{open_loop_start, Pacing, MAX_RETRY_BACKOFF, RETRY_BACKOFF};
use crate::mix::SplitMix64;
use crate::shared::Shared;
use crate::stats::{record, ThreadStats};
use crate::target::SeekState;
use crate::tls::TlsClient;
use crate::verify::{BodyCheck, Verdict};

pub use crate::h3req::{check_classes, check_headers, quic_client_config, to_request};

/// Largest response header section accepted (decoded): the bound the HTTP/1.1 path's
/// read buffer puts on a response head.
pub const MAX_FIELD_SECTION: u64 = crate::conn::READ_BUF as u64;

/// HTTP/3 error codes edgeload closes connections with (RFC 9114 §8.1).
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);
const H3_INTERNAL_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x102);
const H3_REQUEST_CANCELLED: quinn::VarInt = quinn::VarInt::from_u32(0x10c);

/// The request type every lane sends on.
type Sender = SendRequest<h3_quinn::OpenStreams, Bytes>;

/// What one edgeload connection keeps across its QUIC connections.
struct Conn {
    shared: Arc<Shared>,
    stats: Rc<RefCell<ThreadStats>>,
    pacing: Cell<Pacing>,
    /// Open-loop send times a lane took but could not use (its connection closed while
    /// it waited): the next lanes send them first.
    requeued: RefCell<BinaryHeap<Reverse<Instant>>>,
    /// Tickets taken from the `--requests` budget and not used yet: the one taken before
    /// connecting (so that no connection opens with nothing to send), and those of
    /// requests a closed connection refused before they were sent.
    held: Cell<u64>,
    /// The request budget ran out.
    exhausted: Cell<bool>,
    rng: RefCell<SplitMix64>,
    /// `--seek`: where this connection's current read is.
    seek: RefCell<SeekState>,
}

impl Conn {
    /// Takes one request from the `--requests` budget.
    fn ticket(&self) -> bool {
        if self.held.get() > 0 {
            self.held.set(self.held.get() - 1);
            return true;
        }
        if self.exhausted.get() || !self.shared.take_ticket() {
            self.exhausted.set(true);
            return false;
        }
        true
    }

    /// The next open-loop send time (`None` in closed loop).
    fn next_due(&self) -> Option<Instant> {
        if let Some(Reverse(due)) = self.requeued.borrow_mut().pop() {
            return Some(due);
        }
        let mut pacing = self.pacing.get();
        let due = pacing.due()?;
        pacing.advance();
        self.pacing.set(pacing);
        Some(due)
    }

    /// The next open-loop send time, without taking it (`None` in closed loop).
    fn peek_due(&self) -> Option<Instant> {
        let requeued = self.requeued.borrow().peek().map(|r| r.0);
        requeued.or_else(|| self.pacing.get().due())
    }

    /// A request that was not sent: its ticket, and its send time in open loop, go to
    /// the next one.
    fn give_back(&self, due: Option<Instant>) {
        if self.shared.cfg.requests.is_some() {
            self.held.set(self.held.get() + 1);
        }
        if let Some(d) = due {
            self.give_back_slot(d);
        }
    }

    /// An open-loop send time taken by a lane whose connection closed before it came.
    fn give_back_slot(&self, due: Instant) {
        self.requeued.borrow_mut().push(Reverse(due));
    }

    /// Writes the next request's HTTP/1.1 head into `out`; returns its class.
    fn write_request(&self, out: &mut Vec<u8>) -> usize {
        let cfg = &self.shared.cfg;
        let mut rng = self.rng.borrow_mut();
        match &cfg.seek {
            None => {
                let class = self.shared.picker.pick(rng.next_u64());
                cfg.classes[class].write_request(&mut rng, out);
                class
            }
            Some(seek) => {
                let picker = &self.shared.picker;
                let (class, id, first, last) =
                    self.seek
                        .borrow_mut()
                        .next(seek, &cfg.classes, |r| picker.pick(r), &mut rng);
                cfg.classes[class].write_range_request(id, first, last, out);
                class
            }
        }
    }
}

/// Why edgeload closed a QUIC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// Nothing wrong: `--no-keepalive`, or the server closed it.
    Done,
    /// A request passed `-T`.
    Timeout,
    /// A connection-level error.
    Failed,
}

/// One established QUIC connection and what its lanes share.
struct Link {
    quic: quinn::Connection,
    /// When the connection was meant to exist (for the Delay figure).
    scheduled: Instant,
    first_send: Cell<bool>,
    /// Responses completed on it.
    completed: Cell<u64>,
    /// Set once when the connection is closed (by edgeload, or seen closed).
    closed: Cell<Option<Cause>>,
    /// The server is closing it (GOAWAY, idle timeout): no new requests, but those in
    /// flight may still complete.
    draining: Cell<bool>,
    /// Wakes lanes that wait for their send time when the connection closes.
    closing: Notify,
}

impl Link {
    /// True when no new request may start on it.
    fn done(&self) -> bool {
        self.draining.get() || self.closed.get().is_some()
    }

    /// Stops new requests and wakes lanes waiting for their send time; requests in
    /// flight carry on.
    fn drain(&self) {
        self.draining.set(true);
        self.closing.notify_waiters();
    }

    /// Closes the connection: requests in flight fail at once.
    fn close(&self, cause: Cause) {
        if self.closed.get().is_some() {
            return;
        }
        self.closed.set(Some(cause));
        let code = match cause {
            Cause::Done => H3_NO_ERROR,
            Cause::Timeout => H3_REQUEST_CANCELLED,
            Cause::Failed => H3_INTERNAL_ERROR,
        };
        // Requests still in flight fail at once (`LocallyClosed`).
        self.quic.close(code, b"");
        self.closing.notify_waiters();
    }
}

/// How a lane ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LaneEnd {
    /// No more requests to send (`--requests` reached).
    Finished,
    /// The connection is closed: open a new one.
    Reconnect,
}

/// A complete response.
struct Done {
    status: u16,
    bytes: u64,
    verdict: Verdict,
}

/// Where a request failed; `fatal`: the connection failed with it.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// Opening the stream or sending the request head.
    Unsent { fatal: bool },
    /// Finishing the request's send side.
    Write { fatal: bool },
    /// Reading the response or its body.
    Read { fatal: bool },
}

/// True when `e` ended the whole connection rather than one stream.
fn connection_level(e: &StreamError) -> bool {
    !matches!(
        e,
        StreamError::StreamError { .. }
            | StreamError::RemoteTerminate { .. }
            | StreamError::HeaderTooBig { .. }
    )
}

/// Why a connection could not be opened.
enum ConnectFailure {
    /// No UDP socket: a connect error.
    Socket,
    /// The QUIC (TLS) handshake failed, or did not complete within `-T` (`timeout`):
    /// a failed handshake, with its reason for stderr.
    Handshake { timeout: bool, why: String },
    /// The handshake completed but HTTP/3 could not be set up on the connection (its
    /// control streams), or not within `-T`: a connect error.
    Setup { timeout: bool },
}

/// A connection ready for requests.
struct Established {
    /// Kept for the connection's life (its driver owns the UDP socket), and closed by
    /// [`close_all`] at the end of a timed run.
    endpoint: quinn::Endpoint,
    quic: quinn::Connection,
    driver: ::h3::client::Connection<h3_quinn::Connection, Bytes>,
    send: Sender,
    handshake: Duration,
}

/// Runs connection number `g` (0..connections) over HTTP/3 until the worker drops it at
/// the end of the test, or until `--requests` is used up.
pub async fn run(shared: Arc<Shared>, stats: Rc<RefCell<ThreadStats>>, g: usize) {
    // `--h3` needs an https:// URL (checked by the CLI), so there is always a client.
    let Some(tls) = shared.cfg.tls.clone() else {
        return;
    };
    let checked = Arc::new(AtomicBool::new(false));
    // Built once by the CLI already (`quic_client_config` is deterministic), so this
    // does not fail.
    let Ok(quic_config) = quic_client_config(&tls, checked.clone()) else {
        return;
    };
    let (open_at, pacing) = crate::conn::schedule(&shared, g);
    let c = Rc::new(Conn {
        pacing: Cell::new(pacing),
        requeued: RefCell::new(BinaryHeap::new()),
        held: Cell::new(0),
        exhausted: Cell::new(false),
        rng: RefCell::new(SplitMix64::new(crate::conn::seed(&shared, g))),
        seek: Default::default(),
        stats,
        shared: shared.clone(),
    });
    let cfg = &shared.cfg;
    sleep_until(open_at.into()).await;
    let mut scheduled = open_at;
    let mut backoff = RETRY_BACKOFF;
    // Sockets this connection has opened: picks its `--source` address.
    let mut sockets: u64 = 0;
    loop {
        if cfg.requests.is_some() && c.held.get() == 0 {
            if !c.ticket() {
                return;
            }
            c.held.set(1);
        }
        let source = cfg
            .source
            .as_ref()
            .map(|s| s.pick(g, sockets, cfg.connections));
        sockets += 1;
        checked.store(false, Ordering::Relaxed);
        let est = match connect(
            &shared,
            &tls,
            &quic_config,
            source,
            Instant::now() + cfg.timeout,
        )
        .await
        {
            Ok(est) => {
                OPEN.with(|o| o.borrow_mut().insert(g, est.endpoint.clone()));
                est
            }
            Err(e) => {
                {
                    let mut s = c.stats.borrow_mut();
                    let timeout = match e {
                        ConnectFailure::Socket => false,
                        ConnectFailure::Setup { timeout } => timeout,
                        ConnectFailure::Handshake { timeout, why } => {
                            s.tls.failed += 1;
                            s.tls_error.get_or_insert(why);
                            timeout
                        }
                    };
                    if timeout {
                        s.errors.connect_timeout += 1;
                    } else {
                        s.errors.connect += 1;
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                continue;
            }
        };
        backoff = RETRY_BACKOFF;
        {
            let mut s = c.stats.borrow_mut();
            record(&mut s.connect, est.handshake);
            record(&mut s.tls_handshake, est.handshake);
            s.tls.handshakes += 1;
            // No certificate checked: the session was resumed.
            s.tls.resumed += u64::from(tls.verifier.is_some() && !checked.load(Ordering::Relaxed));
            s.connections += 1;
        }
        let link = Rc::new(Link {
            quic: est.quic,
            scheduled,
            first_send: Cell::new(true),
            completed: Cell::new(0),
            closed: Cell::new(None),
            draining: Cell::new(false),
            closing: Notify::new(),
        });
        let mut driver = est.driver;
        let driver_link = link.clone();
        let driver = tokio::task::spawn_local(async move {
            // Reads the control stream (SETTINGS, GOAWAY) until the connection closes.
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            driver_link.close(Cause::Done);
        });
        let mut lanes = JoinSet::new();
        for _ in 0..cfg.pipeline {
            lanes.spawn_local(lane(c.clone(), link.clone(), est.send.clone()));
        }
        // The lanes hold the only senders: h3 closes the connection when all are gone.
        drop(est.send);
        let mut reconnect = false;
        while let Some(end) = lanes.join_next().await {
            reconnect |= !matches!(end, Ok(LaneEnd::Finished));
        }
        link.close(Cause::Done);
        driver.abort();
        if !reconnect {
            // Let quinn send the CONNECTION_CLOSE before the worker stops the runtime.
            tokio::task::yield_now().await;
            return;
        }
        scheduled = Instant::now();
        if let Some(next) = c.peek_due() {
            // Open loop: reconnect when the next request is due, as a client does, and
            // not at once (a connection opened early would sit idle, and a server that
            // closes idle connections would have it churn).
            if next > scheduled {
                sleep_until(next.into()).await;
                scheduled = next;
            }
        }
    }
}

thread_local! {
    /// Each of this thread's connections' latest endpoint, by connection number: what
    /// [`close_all`] closes at the end of the run.
    static OPEN: RefCell<std::collections::HashMap<usize, quinn::Endpoint>> =
        RefCell::new(std::collections::HashMap::new());
}

/// Closes this thread's QUIC connections with CONNECTION_CLOSE (`H3_NO_ERROR`) and
/// waits up to `grace` for the frames to leave, so the server sees a clean close at the
/// end of a timed run instead of keeping each connection until its idle timeout. Runs
/// after the measurement has ended.
pub async fn close_all(grace: Duration) {
    let open: Vec<quinn::Endpoint> =
        OPEN.with(|o| o.borrow_mut().drain().map(|(_, e)| e).collect());
    for e in &open {
        e.close(H3_NO_ERROR, b"");
    }
    let _ = tokio::time::timeout(grace, async {
        for e in &open {
            e.wait_idle().await;
        }
    })
    .await;
}

/// Opens a QUIC connection (its own endpoint and UDP socket, bound to `source` when
/// given) and sets up HTTP/3 on it, all by `deadline`.
async fn connect(
    shared: &Shared,
    tls: &TlsClient,
    config: &quinn::ClientConfig,
    source: Option<IpAddr>,
    deadline: Instant,
) -> Result<Established, ConnectFailure> {
    let cfg = &shared.cfg;
    let bind = match (source, cfg.addr) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, SocketAddr::V4(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        (None, SocketAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    };
    let endpoint = quinn::Endpoint::client(bind).map_err(|_| ConnectFailure::Socket)?;
    let t0 = Instant::now();
    let connecting = endpoint
        .connect_with(config.clone(), cfg.addr, &cfg.url.host)
        .map_err(|e| ConnectFailure::Handshake {
            timeout: false,
            why: format!("QUIC connect to {}: {e}", cfg.addr),
        })?;
    let quic = match timeout_at(deadline.into(), connecting).await {
        Err(_) | Ok(Err(quinn::ConnectionError::TimedOut)) => {
            return Err(ConnectFailure::Handshake {
                timeout: true,
                why: format!(
                    "QUIC handshake timed out (--timeout): is an HTTP/3 server listening on \
                     UDP {}?",
                    cfg.addr
                ),
            })
        }
        Ok(Err(e)) => {
            let detail = e.to_string();
            return Err(ConnectFailure::Handshake {
                timeout: false,
                why: format!("QUIC handshake failed: {detail}{}", tls.hint(&detail)),
            });
        }
        Ok(Ok(q)) => q,
    };
    let handshake = t0.elapsed();
    let mut builder = ::h3::client::builder();
    builder.max_field_section_size(MAX_FIELD_SECTION);
    let setup = builder.build(h3_quinn::Connection::new(quic.clone()));
    let (driver, send) = match timeout_at(deadline.into(), setup).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(_)) => {
            quic.close(H3_INTERNAL_ERROR, b"");
            return Err(ConnectFailure::Setup { timeout: false });
        }
        Err(_) => {
            quic.close(H3_INTERNAL_ERROR, b"");
            return Err(ConnectFailure::Setup { timeout: true });
        }
    };
    Ok(Established {
        endpoint,
        quic,
        driver,
        send,
        handshake,
    })
}

/// One request stream at a time on `link`, until the connection closes or the
/// `--requests` budget runs out.
async fn lane(c: Rc<Conn>, link: Rc<Link>, mut send: Sender) -> LaneEnd {
    let cfg = &c.shared.cfg;
    let timeout = cfg.timeout;
    let mut head = Vec::with_capacity(512);
    let mut check = cfg.verify.then(BodyCheck::new);
    loop {
        if link.done() {
            return LaneEnd::Reconnect;
        }
        let free_since = Instant::now();
        let due = c.next_due();
        if let Some(d) = due {
            tokio::select! {
                () = sleep_until(d.into()) => {}
                () = link.closing.notified() => {
                    c.give_back_slot(d);
                    return LaneEnd::Reconnect;
                }
            }
        }
        if !c.ticket() {
            return LaneEnd::Finished;
        }
        let now = Instant::now();
        let (intended, from) = match due {
            None => (now, now),
            Some(d) => (d, open_loop_start(d, now, free_since)),
        };
        if link.first_send.replace(false) {
            let wanted = if due.is_some() {
                intended
            } else {
                link.scheduled
            };
            let delay = now.saturating_duration_since(wanted);
            let mut s = c.stats.borrow_mut();
            record(&mut s.delay, delay);
            if delay > timeout {
                s.errors.delay_timeout += 1;
            }
        }
        head.clear();
        let class = c.write_request(&mut head);
        let req = match to_request(&head, &cfg.url.authority) {
            Ok(r) => r,
            Err(_) => {
                // Checked at start-up (`check_classes`); counted, never a busy loop.
                {
                    let mut s = c.stats.borrow_mut();
                    s.errors.write += 1;
                    s.class_error(class);
                }
                tokio::task::yield_now().await;
                continue;
            }
        };
        let sent = Instant::now();
        let result = timeout_at(
            (sent + timeout).into(),
            exchange(&mut send, req, check.as_mut()),
        )
        .await;
        match result {
            Ok(Ok(done)) => {
                let now = Instant::now();
                link.completed.set(link.completed.get() + 1);
                {
                    let mut s = c.stats.borrow_mut();
                    s.bytes += done.bytes;
                    s.response(
                        class,
                        done.status,
                        done.bytes,
                        done.verdict,
                        now.saturating_duration_since(from),
                        now.saturating_duration_since(sent),
                    );
                }
                if !cfg.keepalive {
                    link.close(Cause::Done);
                    return LaneEnd::Reconnect;
                }
            }
            Err(_elapsed) => {
                {
                    let mut s = c.stats.borrow_mut();
                    s.errors.timeout += 1;
                    s.class_error(class);
                }
                link.close(Cause::Timeout);
                return LaneEnd::Reconnect;
            }
            Ok(Err(failure)) => {
                let fatal = match failure {
                    Failure::Unsent { fatal }
                    | Failure::Write { fatal }
                    | Failure::Read { fatal } => fatal || link.quic.close_reason().is_some(),
                };
                if matches!(failure, Failure::Unsent { .. }) && fatal && link.completed.get() > 0 {
                    // A connection that served requests is closing (idle timeout,
                    // GOAWAY, or edgeload itself) and refused this one before it left:
                    // not an error, it goes out on the next connection; requests in
                    // flight may still complete. (A connection that closes before its
                    // first response is counted, so that a server that drops every
                    // connection is no silent busy loop.)
                    c.give_back(due.map(|_| intended));
                    link.drain();
                    return LaneEnd::Reconnect;
                }
                {
                    let mut s = c.stats.borrow_mut();
                    match (link.closed.get(), failure) {
                        // Closed under it by another lane's timeout.
                        (Some(Cause::Timeout), _) => s.errors.timeout += 1,
                        (Some(_), _) | (None, Failure::Read { .. }) => s.errors.read += 1,
                        (None, Failure::Unsent { .. } | Failure::Write { .. }) => {
                            s.errors.write += 1
                        }
                    }
                    s.class_error(class);
                }
                if fatal {
                    link.close(Cause::Failed);
                    return LaneEnd::Reconnect;
                }
                // A stream-level failure (a reset stream) costs no reconnect, but may
                // come back at once: let the rest of the thread run meanwhile.
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Sends one request on a new stream and reads its response to the end.
async fn exchange(
    send: &mut Sender,
    req: Request<()>,
    check: Option<&mut BodyCheck>,
) -> Result<Done, Failure> {
    let mut stream = send.send_request(req).await.map_err(|e| Failure::Unsent {
        fatal: connection_level(&e),
    })?;
    stream.finish().await.map_err(|e| Failure::Write {
        fatal: connection_level(&e),
    })?;
    let read = |e: StreamError| Failure::Read {
        fatal: connection_level(&e),
    };
    let resp = stream.recv_response().await.map_err(read)?;
    let status = resp.status().as_u16();
    let mut check = check;
    if let Some(c) = check.as_deref_mut() {
        c.start(resp.headers().get("x-checksum").map(HeaderValue::as_bytes));
    }
    let mut bytes: u64 = 0;
    while let Some(mut chunk) = stream.recv_data().await.map_err(read)? {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            let n = part.len();
            bytes += n as u64;
            if let Some(c) = check.as_deref_mut() {
                c.update(part);
            }
            chunk.advance(n);
        }
    }
    Ok(Done {
        status,
        bytes,
        verdict: check.map_or(Verdict::Skipped, |c| c.finish()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Class;
    use http::Method;

    fn class_head(extra: &[&str], close: bool) -> Vec<u8> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let c = Class::new("/obj/1k", 1000, "example.com:8443", &extra, close, None);
        let mut out = Vec::new();
        c.write_request(&mut SplitMix64::new(1), &mut out);
        out
    }

    #[test]
    fn http11_head_becomes_an_h3_request() {
        let head = class_head(&["X-Test: 1", "Accept: */*"], true);
        let r = to_request(&head, "ignored:1").unwrap();
        assert_eq!(r.method(), Method::GET);
        assert_eq!(r.uri().to_string(), "https://example.com:8443/obj/1k");
        assert_eq!(r.uri().scheme_str(), Some("https"));
        assert_eq!(r.uri().authority().unwrap().as_str(), "example.com:8443");
        // Host became :authority; Connection: close is HTTP/1.1's and dropped.
        assert!(r.headers().get("host").is_none());
        assert!(r.headers().get("connection").is_none());
        assert_eq!(r.headers()["x-test"], "1");
        assert_eq!(r.headers()["accept"], "*/*");
        assert_eq!(r.headers().len(), 2);
    }

    #[test]
    fn host_header_overrides_the_authority_and_ranges_pass() {
        let c = Class::new(
            "/v?x=1",
            1000,
            "127.0.0.1:1",
            &["Host: cdn.example".to_string()],
            false,
            Some(crate::target::Ids::new(5, None)),
        );
        let mut head = Vec::new();
        c.write_range_request(3, 0, 1023, &mut head);
        let r = to_request(&head, "127.0.0.1:1").unwrap();
        assert_eq!(r.uri().to_string(), "https://cdn.example/v?x=1/3");
        assert_eq!(r.headers()["range"], "bytes=0-1023");
        // Without a Host line the default authority is used, IPv6 brackets kept.
        let r = to_request(b"GET /a HTTP/1.1\r\nX: y\r\n\r\n", "[::1]:8443").unwrap();
        assert_eq!(r.uri().to_string(), "https://[::1]:8443/a");
    }

    #[test]
    fn bad_heads_are_errors_not_panics() {
        for (head, want) in [
            (&b"GET /a HTTP/1.1\r\nHost: h\r\n"[..], "incomplete"),
            (
                b"GET /a HTTP/1.1\r\nBad Name: v\r\n\r\n",
                "invalid request head",
            ),
            (b"\x01\x02 / HTTP/1.1\r\n\r\n", "invalid request head"),
            (b"GET /a HTTP/1.1\r\nHost: a b\r\n\r\n", "invalid URI"),
        ] {
            let e = to_request(head, "h").unwrap_err();
            assert!(e.contains(want), "{head:?}: {e}");
        }
    }

    #[test]
    fn forbidden_headers_are_refused() {
        for h in [
            "Connection: keep-alive",
            "keep-alive: 5",
            "Transfer-Encoding: chunked",
            "Upgrade: h2c",
            "Proxy-Connection: x",
        ] {
            let e = check_headers(&[h.to_string()]).unwrap_err();
            assert!(e.contains("connection-specific"), "{h}: {e}");
        }
        assert!(check_headers(&["TE: gzip".to_string()])
            .unwrap_err()
            .contains("TE: trailers"));
        check_headers(&["TE: trailers".into(), "X-A: 1".into()]).unwrap();
        let classes = [Class::new("/x", 1000, "h:1", &[], false, None)];
        check_classes(&classes, "h:1").unwrap();
    }
}
