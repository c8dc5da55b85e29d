//! The HTTP/2 defences against hostile clients, end to end: the real `edgecache` with an
//! h2c (prior knowledge) listener, and a client that writes HTTP/2 frames by hand over a
//! plain TCP socket, so that it can send what no well-behaved client library would:
//! rapid resets (CVE-2023-44487), paced resets of accepted streams, CONTINUATION floods,
//! HPACK bombs, bodies that contradict their content-length. Each test asserts the exact
//! frame and error code the server answers with, that a well-behaved client is not hit,
//! and that the server still serves new connections afterwards.

mod common;

use common::{edgecache, get_text, metric_in};
use edge_testkit::Proc;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

// Error codes (RFC 9113 7).
const PROTOCOL_ERROR: u32 = 0x1;
const CANCEL: u32 = 0x8;
const ENHANCE_YOUR_CALM: u32 = 0xb;

// SETTINGS parameters.
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// Bounds every wait of these tests.
const WAIT: Duration = Duration::from_secs(10);

/// A `return 200 "ok"` location on an h2c + HTTP/1.1 listener.
const RETURN_OK: &str = r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{listen}"
http2 = true
[[location]]
prefix = "/"
return = { status = 200, body = "ok" }
[admin]
listen = "{admin}"
"#;

// ---- Frames ----

#[derive(Debug, Clone)]
struct Frame {
    ty: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// GOAWAY: (last stream id, error code, debug data).
    fn goaway(&self) -> (u32, u32, String) {
        assert_eq!(self.ty, GOAWAY);
        let p = &self.payload;
        (
            u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff,
            u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
            String::from_utf8_lossy(&p[8..]).into_owned(),
        )
    }

    /// RST_STREAM: the error code.
    fn rst_code(&self) -> u32 {
        assert_eq!(self.ty, RST_STREAM, "not a RST_STREAM: {self:?}");
        let p = &self.payload;
        u32::from_be_bytes([p[0], p[1], p[2], p[3]])
    }
}

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    assert!(len < 1 << 24);
    let mut f = Vec::with_capacity(9 + len);
    f.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags]);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn settings(params: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in params {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &p)
}

fn headers(stream: u32, flags: u8, block: &[u8]) -> Vec<u8> {
    frame(HEADERS, flags, stream, block)
}

fn rst(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

// ---- HPACK (RFC 7541), the little these tests need ----

/// An HPACK integer with an `n`-bit prefix, `first` holding the bits above it.
fn hpack_int(out: &mut Vec<u8>, n: u32, first: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal, not Huffman-coded.
fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 7, 0, s.len());
    out.extend_from_slice(s);
}

/// A literal header field without indexing, with a new name.
fn hpack_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// `:method GET`, `:scheme http`, `:path /`, `:authority a`.
fn get_block() -> Vec<u8> {
    // 0x82 :method GET, 0x86 :scheme http, 0x84 :path /; :authority is static index 1,
    // a literal without indexing: 0x01, then the value.
    vec![0x82, 0x86, 0x84, 0x01, 0x01, b'a']
}

/// `:method POST`, `:scheme http`, `:path /`, `:authority a`, `content-length: <len>`.
fn post_block(content_length: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86, 0x84, 0x01, 0x01, b'a'];
    // content-length is static index 28: literal without indexing, 4-bit prefix.
    hpack_int(&mut b, 4, 0x00, 28);
    hpack_str(&mut b, content_length.as_bytes());
    b
}

/// Huffman decoding of a string of decimal digits (RFC 7541 Appendix B: '0'-'2' are
/// the 5-bit codes 0-2, '3'-'9' the 6-bit codes 0x19-0x1f); None on anything else.
fn huffman_digits(data: &[u8]) -> Option<String> {
    let bits: Vec<u8> = data
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let mut out = String::new();
    let mut i = 0;
    while i < bits.len() {
        let rest = &bits[i..];
        // Padding: fewer than 8 bits, all ones.
        if rest.len() < 8 && rest.iter().all(|&b| b == 1) {
            break;
        }
        let val = |n: usize| -> Option<u8> {
            (rest.len() >= n).then(|| rest[..n].iter().fold(0u8, |a, &b| a << 1 | b))
        };
        if let Some(v @ 0..=2) = val(5) {
            out.push((b'0' + v) as char);
            i += 5;
        } else if let Some(v @ 0x19..=0x1f) = val(6) {
            out.push((b'3' + v - 0x19) as char);
            i += 6;
        } else {
            return None;
        }
    }
    Some(out)
}

/// The `:status` of a response header block, which leads the block (RFC 9113 8.3):
/// indexed (static 8-14) or a literal with the indexed name 8 (what the `h2` crate
/// writes for other codes, Huffman-coded). None when it is anything else.
fn status_of(block: &[u8]) -> Option<u16> {
    let mut i = 0;
    // Dynamic table size updates may come first.
    while i < block.len() && block[i] & 0xe0 == 0x20 {
        i += 1;
        if block[i - 1] & 0x1f == 0x1f {
            while block.get(i)? & 0x80 != 0 {
                i += 1;
            }
            i += 1;
        }
    }
    let b = *block.get(i)?;
    if b & 0x80 != 0 {
        return match b & 0x7f {
            8 => Some(200),
            9 => Some(204),
            10 => Some(206),
            11 => Some(304),
            12 => Some(400),
            13 => Some(404),
            14 => Some(500),
            _ => None,
        };
    }
    // Literal with incremental indexing (6-bit name index) or without / never indexed
    // (4-bit): the name must be static index 8, :status.
    let name = if b & 0xc0 == 0x40 { b & 0x3f } else { b & 0x0f };
    if name != 8 {
        return None;
    }
    let h = *block.get(i + 1)?;
    let len = (h & 0x7f) as usize;
    let raw = block.get(i + 2..i + 2 + len)?;
    let text = if h & 0x80 != 0 {
        huffman_digits(raw)?
    } else {
        String::from_utf8(raw.to_vec()).ok()?
    };
    text.parse().ok()
}

// ---- The connection ----

enum Event {
    Frame(Frame),
    /// The connection ended: UnexpectedEof for a clean close, else the read error.
    End(io::ErrorKind),
}

/// An HTTP/2 client connection written by hand: frames go out as given, frames read by
/// a thread come back through a channel (so a flood can be written while the server
/// answers), and every frame read is kept in `log`.
struct H2 {
    w: TcpStream,
    rx: Receiver<Event>,
    end: Option<io::ErrorKind>,
    log: Vec<Frame>,
}

fn read_frames(mut s: TcpStream, tx: Sender<Event>) {
    loop {
        let mut head = [0u8; 9];
        if let Err(e) = s.read_exact(&mut head) {
            let _ = tx.send(Event::End(e.kind()));
            return;
        }
        let len = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
        let mut payload = vec![0u8; len];
        if let Err(e) = s.read_exact(&mut payload) {
            let _ = tx.send(Event::End(e.kind()));
            return;
        }
        let f = Frame {
            ty: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            payload,
        };
        if tx.send(Event::Frame(f)).is_err() {
            return;
        }
    }
}

impl H2 {
    /// Connects, sends the preface and a SETTINGS frame with `params`.
    fn connect(addr: SocketAddr, params: &[(u16, u32)]) -> H2 {
        let w = TcpStream::connect(addr).unwrap();
        w.set_nodelay(true).unwrap();
        w.set_write_timeout(Some(WAIT)).unwrap();
        let r = w.try_clone().unwrap();
        // A last resort: the waits below are bounded by their own deadlines.
        r.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_frames(r, tx));
        let mut c = H2 {
            w,
            rx,
            end: None,
            log: Vec::new(),
        };
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&settings(params));
        c.send(&hello).unwrap();
        c
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.w.write_all(bytes)
    }

    fn take(&mut self, ev: Event) -> Option<Frame> {
        match ev {
            Event::Frame(f) => {
                if f.ty == SETTINGS && f.flags & ACK == 0 {
                    // A well-behaved client acknowledges (a failure shows up as the end).
                    let _ = self.send(&frame(SETTINGS, ACK, 0, &[]));
                }
                self.log.push(f.clone());
                Some(f)
            }
            Event::End(kind) => {
                self.end = Some(kind);
                None
            }
        }
    }

    /// The next frame, or None at the deadline or the end of the connection.
    fn next(&mut self, deadline: Instant) -> Option<Frame> {
        if self.end.is_some() {
            return None;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(ev) => self.take(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("reader thread gone"),
        }
    }

    /// A frame already read, without waiting.
    fn poll(&mut self) -> Option<Frame> {
        if self.end.is_some() {
            return None;
        }
        let ev = self.rx.try_recv().ok()?;
        self.take(ev)
    }

    /// Frames until one matches (returned), the deadline or the end of the connection.
    fn until(&mut self, timeout: Duration, mut pred: impl FnMut(&Frame) -> bool) -> Option<Frame> {
        let deadline = Instant::now() + timeout;
        while let Some(f) = self.next(deadline) {
            if pred(&f) {
                return Some(f);
            }
        }
        None
    }

    /// The GOAWAY the server sends, within `timeout`.
    fn goaway(&mut self, timeout: Duration) -> Option<(u32, u32, String)> {
        self.until(timeout, |f| f.ty == GOAWAY).map(|f| f.goaway())
    }

    /// Reads (and logs) until the server closes the connection; how it ended, or None
    /// if it was still open after `timeout`.
    fn closed(&mut self, timeout: Duration) -> Option<io::ErrorKind> {
        let deadline = Instant::now() + timeout;
        while self.end.is_none() && Instant::now() < deadline {
            self.next(deadline);
        }
        self.end
    }

    /// The frames read so far on `stream` of type `ty`.
    fn logged(&self, stream: u32, ty: u8) -> Vec<&Frame> {
        self.log
            .iter()
            .filter(|f| f.stream == stream && f.ty == ty)
            .collect()
    }
}

impl Drop for H2 {
    fn drop(&mut self) {
        // Unblocks the reader thread.
        let _ = self.w.shutdown(Shutdown::Both);
    }
}

/// A clean close after GOAWAY: EOF, or a reset because the server closed with our flood
/// still unread (which Linux answers with RST). Not a read timeout.
fn assert_closed(c: &mut H2) {
    let end = c.closed(WAIT);
    assert!(
        matches!(
            end,
            Some(io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset)
        ),
        "the connection was not closed after GOAWAY: {end:?}"
    );
}

// ---- Server checks ----

fn metrics(admin: SocketAddr) -> String {
    get_text(admin, "/metrics")
}

fn metric(text: &str, name: &str) -> u64 {
    metric_in(text, name).unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

const CALM: &str = "edgecache_h2_connection_errors_total{reason=\"enhance_your_calm\"}";
const RAPID: &str = "edgecache_h2_rapid_reset_goaways_total";
const CLIENT_RESETS: &str = "edgecache_h2_client_resets_total";

/// Waits (bounded) until `name` reaches at least `want`; its last value.
fn wait_metric(admin: SocketAddr, name: &str, want: u64) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = metric(&metrics(admin), name);
        if v >= want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_alive(p: &mut Proc) {
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "edgecache exited; stderr:\n{}",
        p.stderr()
    );
}

/// The server still serves: an HTTP/1.1 GET and an HTTP/2 GET on new connections both
/// get 200 "ok".
fn assert_serves(p: &mut Proc, addr: SocketAddr) {
    assert_alive(p);
    let r = edge_testkit::get(addr, "/", &[]);
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
    let mut c = H2::connect(addr, &[]);
    c.send(&headers(1, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    let (status, body) = response(&mut c, 1);
    assert_eq!((status, &body[..]), (Some(200), &b"ok"[..]));
}

/// The response on `stream`: its status and body, read until END_STREAM (panics on a
/// reset, GOAWAY or timeout).
fn response(c: &mut H2, stream: u32) -> (Option<u16>, Vec<u8>) {
    let mut status = None;
    let mut body = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let f = c
            .next(deadline)
            .unwrap_or_else(|| panic!("no response on stream {stream}; got {:?}", c.log));
        assert_ne!(f.ty, GOAWAY, "GOAWAY {:?}", f.goaway());
        if f.stream != stream {
            continue;
        }
        match f.ty {
            HEADERS => status = status_of(&f.payload),
            DATA => body.extend_from_slice(&f.payload),
            RST_STREAM => panic!("stream {stream} reset: {:#x}", f.rst_code()),
            _ => {}
        }
        if f.flags & END_STREAM != 0 && (f.ty == HEADERS || f.ty == DATA) {
            return (status, body);
        }
    }
}

// ---- The tests ----

#[test]
fn hpack_helpers_decode_what_they_should() {
    // The decoder of these tests, on RFC 7541's own examples and h2's encoding of 431.
    assert_eq!(status_of(&[0x88]), Some(200));
    assert_eq!(status_of(&[0x3f, 0xe1, 0x1f, 0x88]), Some(200));
    // '4' 011010, '3' 011001, '1' 00001, then 7 bits of padding.
    assert_eq!(huffman_digits(&[0x69, 0x90, 0xff]).as_deref(), Some("431"));
    assert_eq!(status_of(&[0x48, 0x83, 0x69, 0x90, 0xff]), Some(431));
    assert_eq!(status_of(&[0x08, 0x03, b'4', b'3', b'1']), Some(431));
    assert_eq!(status_of(&[0x82]), None);
    let mut v = Vec::new();
    hpack_int(&mut v, 7, 0, 4000);
    assert_eq!(v, [0x7f, 0xa1, 0x1e]);
}

/// CVE-2023-44487: thousands of streams, each reset (CANCEL) right after its HEADERS,
/// written in large batches. The server must answer GOAWAY ENHANCE_YOUR_CALM, close
/// the connection, count it, and go on serving others.
#[test]
fn rapid_reset_flood_gets_goaway_enhance_your_calm() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    let block = get_block();
    let mut goaway = None;
    let mut written = 0;
    'flood: for batch in 0..8u32 {
        let mut buf = Vec::new();
        for i in 0..250u32 {
            let id = 1 + 2 * (batch * 250 + i);
            buf.extend_from_slice(&headers(id, END_STREAM | END_HEADERS, &block));
            buf.extend_from_slice(&rst(id, CANCEL));
        }
        if c.send(&buf).is_err() {
            break;
        }
        written += 250;
        while let Some(f) = c.poll() {
            if f.ty == GOAWAY {
                goaway = Some(f.goaway());
                break 'flood;
            }
        }
    }
    let goaway = goaway.or_else(|| c.goaway(WAIT));
    let (last, code, debug) = goaway.expect("no GOAWAY after a rapid-reset flood");
    eprintln!(
        "rapid reset: GOAWAY last={last} code={code:#x} debug={debug:?} after {written} streams"
    );
    assert_eq!(code, ENHANCE_YOUR_CALM, "GOAWAY debug data {debug:?}");
    assert!(
        last <= 2 * written,
        "last stream id {last} of {written} streams"
    );
    assert_closed(&mut c);
    // Whichever defence fired (the h2 crate's pending-accept reset limit, counted as a
    // connection error, or ours), it is counted.
    let deadline = Instant::now() + WAIT;
    let (calm, rapid) = loop {
        let m = metrics(admin);
        let (calm, rapid) = (metric(&m, CALM), metric(&m, RAPID));
        if calm + rapid >= 1 || Instant::now() > deadline {
            break (calm, rapid);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        calm + rapid,
        1,
        "enhance_your_calm={calm} rapid_reset={rapid}"
    );
    match debug.as_str() {
        // The h2 crate's own limit: streams reset before they were accepted (what
        // fires when the flood comes in large writes).
        "too_many_resets" => assert_eq!((calm, rapid), (1, 0)),
        // Ours: streams reset after they were accepted.
        "" => assert_eq!((calm, rapid), (0, 1)),
        other => panic!("GOAWAY with unexpected debug data {other:?}"),
    }
    assert_serves(&mut p, addr);
}

/// Rapid reset paced so that the h2 crate's pending-accept limit cannot fire: each
/// stream is reset only after its response HEADERS came (it was accepted and answered;
/// the body waits for flow-control window, as the client grants none). More than
/// RESET_FLOOD (200) such resets, more than half of the streams: our own defence sends
/// GOAWAY ENHANCE_YOUR_CALM and counts it, and every reset is counted.
#[test]
fn paced_resets_of_accepted_streams_get_goaway() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)]);
    let block = get_block();
    let mut id = 1u32;
    // Three rounds of 100 streams (under the 128 concurrent streams the server allows).
    for _ in 0..3 {
        let ids: Vec<u32> = (0..100).map(|i| id + 2 * i).collect();
        id += 200;
        let mut buf = Vec::new();
        for &s in &ids {
            buf.extend_from_slice(&headers(s, END_STREAM | END_HEADERS, &block));
        }
        c.send(&buf).unwrap();
        let mut pending: std::collections::HashSet<u32> = ids.iter().copied().collect();
        while !pending.is_empty() {
            let f = c
                .until(WAIT, |f| {
                    f.ty == HEADERS || f.ty == GOAWAY || f.ty == RST_STREAM
                })
                .unwrap_or_else(|| panic!("{} response heads missing", pending.len()));
            assert_eq!(f.ty, HEADERS, "early {f:?}");
            assert_eq!(status_of(&f.payload), Some(200));
            // No window was granted: the body cannot have been sent.
            assert_eq!(f.flags & END_STREAM, 0);
            pending.remove(&f.stream);
        }
        let mut buf = Vec::new();
        for &s in &ids {
            buf.extend_from_slice(&rst(s, CANCEL));
        }
        c.send(&buf).unwrap();
    }
    // The check runs as the next stream is accepted; the server learns of the resets
    // as each stream's task sees them, so a few more streams may be needed.
    let mut goaway = None;
    for _ in 0..20 {
        if c.send(&headers(id, END_STREAM | END_HEADERS, &block))
            .is_err()
        {
            break;
        }
        let f = c.until(WAIT, |f| {
            f.ty == GOAWAY || (f.stream == id && (f.ty == HEADERS || f.ty == RST_STREAM))
        });
        match f {
            Some(f) if f.ty == GOAWAY => {
                goaway = Some(f.goaway());
                break;
            }
            Some(_) => {
                let _ = c.send(&rst(id, CANCEL));
                id += 2;
                std::thread::sleep(Duration::from_millis(100));
            }
            None => break,
        }
    }
    let (last, code, debug) = goaway.unwrap_or_else(|| {
        panic!(
            "no GOAWAY after 300 resets of 300 streams; {CLIENT_RESETS} = {}",
            metric(&metrics(admin), CLIENT_RESETS)
        )
    });
    eprintln!("paced resets: GOAWAY last={last} code={code:#x} debug={debug:?}");
    assert_eq!(code, ENHANCE_YOUR_CALM);
    assert!(last >= 601, "last stream id {last}");
    assert_closed(&mut c);
    assert_eq!(wait_metric(admin, RAPID, 1), 1);
    let m = metrics(admin);
    // Ours, not the h2 crate's.
    assert_eq!(metric(&m, CALM), 0);
    // Every reset of a stream whose response was not complete is counted.
    let resets = wait_metric(admin, CLIENT_RESETS, 300);
    assert!((300..=320).contains(&resets), "client resets {resets}");
    assert_serves(&mut p, addr);
}

/// No false positive: a client that makes 300 requests (never more than 100 at once),
/// resets 10 of them and reads every response is served and never sent GOAWAY.
#[test]
fn a_few_resets_among_normal_requests_are_fine() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    let block = get_block();
    let mut reset = Vec::new();
    for round in 0..3u32 {
        let mut want: std::collections::HashSet<u32> = Default::default();
        let mut buf = Vec::new();
        for i in 0..100u32 {
            let n = round * 100 + i;
            let id = 1 + 2 * n;
            buf.extend_from_slice(&headers(id, END_STREAM | END_HEADERS, &block));
            if n % 30 == 7 {
                buf.extend_from_slice(&rst(id, CANCEL));
                reset.push(id);
            } else {
                want.insert(id);
            }
        }
        c.send(&buf).unwrap();
        let deadline = Instant::now() + WAIT;
        let mut status = std::collections::HashMap::new();
        let mut bodies: std::collections::HashMap<u32, Vec<u8>> = Default::default();
        while !want.is_empty() {
            let f = c
                .next(deadline)
                .unwrap_or_else(|| panic!("{} responses missing: {want:?}", want.len()));
            assert_ne!(f.ty, GOAWAY, "GOAWAY {:?}", f.goaway());
            if !want.contains(&f.stream) {
                continue;
            }
            match f.ty {
                HEADERS => {
                    status.insert(f.stream, status_of(&f.payload));
                }
                DATA => bodies.entry(f.stream).or_default().extend(&f.payload),
                RST_STREAM => panic!("stream {} reset: {:#x}", f.stream, f.rst_code()),
                _ => {}
            }
            if f.flags & END_STREAM != 0 && (f.ty == DATA || f.ty == HEADERS) {
                assert_eq!(status.get(&f.stream), Some(&Some(200)), "{f:?}");
                assert_eq!(bodies.get(&f.stream).map(|b| &b[..]), Some(&b"ok"[..]));
                want.remove(&f.stream);
            }
        }
    }
    assert_eq!(reset.len(), 10);
    // Still open and serving; no GOAWAY of any kind came.
    c.send(&headers(601, END_STREAM | END_HEADERS, &block))
        .unwrap();
    let (status, body) = response(&mut c, 601);
    assert_eq!((status, &body[..]), (Some(200), &b"ok"[..]));
    assert!(c.log.iter().all(|f| f.ty != GOAWAY));
    assert!(c.end.is_none());
    let m = metrics(admin);
    assert_eq!(metric(&m, RAPID), 0);
    assert_eq!(metric(&m, CALM), 0);
    // A reset counts only when it caught a response under way (these are answered at
    // once, so most resets find theirs complete, or come before the stream is taken).
    assert!(metric(&m, CLIENT_RESETS) <= 10);
    assert!(metric(&m, "edgecache_h2_streams_total") >= 291);
    assert_alive(&mut p);
}

/// A header block split over HEADERS and CONTINUATION frames without END_HEADERS,
/// `per_frame` header fields of 1 KiB each per CONTINUATION frame, up to 4 MiB in all:
/// the GOAWAY that ends it (written while it is being sent), and the connection.
fn continuation_flood(addr: SocketAddr, per_frame: usize) -> ((u32, u32, String), H2, usize) {
    let mut c = H2::connect(addr, &[]);
    // HEADERS with END_STREAM but not END_HEADERS.
    c.send(&headers(1, END_STREAM, &get_block())).unwrap();
    let value = vec![b'v'; 1024];
    let mut sent = 0usize;
    let mut n = 0usize;
    let mut goaway = None;
    'flood: while sent < 4 << 20 {
        let mut buf = Vec::new();
        for _ in 0..16 {
            let mut block = Vec::new();
            for _ in 0..per_frame {
                hpack_literal(&mut block, format!("x-fill-{n}").as_bytes(), &value);
                n += 1;
            }
            sent += block.len();
            buf.extend_from_slice(&frame(CONTINUATION, 0, 1, &block));
        }
        if c.send(&buf).is_err() {
            break;
        }
        while let Some(f) = c.poll() {
            if f.ty == GOAWAY {
                goaway = Some(f.goaway());
                break 'flood;
            }
            assert_ne!(f.ty, RST_STREAM, "{f:?}");
        }
    }
    let goaway = goaway
        .or_else(|| c.goaway(WAIT))
        .expect("no GOAWAY after a CONTINUATION flood");
    (goaway, c, sent)
}

/// CONTINUATION flood (CVE-2024-27316 and kin) with small frames, one 1 KiB header
/// each: the h2 crate allows a header block at most max(5, list limit / frame size *
/// 1.25) CONTINUATION frames (5 here: 16 KiB of client_max_header_size, 16 KiB frames),
/// then GOAWAY ENHANCE_YOUR_CALM "too_many_continuations" on stream 0 (the stream was
/// never opened).
#[test]
fn continuation_flood_of_small_frames_gets_goaway() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let ((last, code, debug), mut c, sent) = continuation_flood(addr, 1);
    eprintln!("continuation flood (small): GOAWAY last={last} code={code:#x} debug={debug:?}; {sent} bytes written before it was seen");
    assert_eq!(
        (last, code, debug.as_str()),
        (0, ENHANCE_YOUR_CALM, "too_many_continuations")
    );
    assert_closed(&mut c);
    // The request never reached a handler.
    assert!(c.logged(1, HEADERS).is_empty());
    assert_eq!(wait_metric(admin, CALM, 1), 1);
    assert_eq!(metric(&metrics(admin), "edgecache_h2_streams_total"), 0);
    assert_serves(&mut p, addr);
}

/// CONTINUATION flood with full frames (15 headers of 1 KiB each, ~16 KB a frame):
/// the list passes client_max_header_size in the first CONTINUATION frame, after which
/// the h2 crate decodes the fields only to keep the HPACK state, without keeping them
/// (and its "four times the limit" abuse check then counts one frame at a time, so it
/// cannot fire here); the frame count limit ends it: GOAWAY ENHANCE_YOUR_CALM
/// "too_many_continuations", not a 431.
#[test]
fn continuation_flood_of_large_frames_gets_goaway() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let ((last, code, debug), mut c, sent) = continuation_flood(addr, 15);
    eprintln!("continuation flood (large): GOAWAY last={last} code={code:#x} debug={debug:?}; {sent} bytes written before it was seen");
    assert_eq!(
        (last, code, debug.as_str()),
        (0, ENHANCE_YOUR_CALM, "too_many_continuations")
    );
    assert_closed(&mut c);
    assert!(c.logged(1, HEADERS).is_empty());
    assert_eq!(wait_metric(admin, CALM, 1), 1);
    assert_serves(&mut p, addr);
}

/// The control of the CONTINUATION tests: a header block legitimately split over
/// HEADERS and three CONTINUATION frames, within the limits, is served.
#[test]
fn split_header_block_within_limits_is_served() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    let mut buf = headers(1, END_STREAM, &get_block());
    for i in 0..3 {
        let mut block = Vec::new();
        hpack_literal(&mut block, format!("x-part-{i}").as_bytes(), &[b'v'; 1024]);
        let flags = if i == 2 { END_HEADERS } else { 0 };
        buf.extend_from_slice(&frame(CONTINUATION, flags, 1, &block));
    }
    c.send(&buf).unwrap();
    let (status, body) = response(&mut c, 1);
    assert_eq!((status, &body[..]), (Some(200), &b"ok"[..]));
    assert_eq!(metric(&metrics(admin), CALM), 0);
    assert_alive(&mut p);
}

/// A header block that inserts one ~4000-byte field into the HPACK dynamic table, then
/// refers to it `refs` times (one byte each).
fn hpack_bomb(refs: usize) -> Vec<u8> {
    let mut b = get_block();
    // Literal with incremental indexing, new name.
    b.push(0x40);
    hpack_str(&mut b, b"x-bomb");
    hpack_str(&mut b, &vec![b'b'; 4000]);
    // The entry is now dynamic index 62.
    b.extend(std::iter::repeat_n(0xbe, refs));
    b
}

/// HPACK bomb: a 4.5 KB header block that decodes to ~2 MB (500 references to a
/// 4000-byte entry). The h2 crate stops decoding past four times the header list limit
/// and ends the connection: GOAWAY ENHANCE_YOUR_CALM "header_list_way_too_large".
#[test]
fn hpack_bomb_gets_goaway() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    let block = hpack_bomb(500);
    assert!(block.len() < 5000);
    c.send(&headers(1, END_STREAM | END_HEADERS, &block))
        .unwrap();
    let (last, code, debug) = c.goaway(WAIT).expect("no GOAWAY after an HPACK bomb");
    eprintln!("hpack bomb: GOAWAY last={last} code={code:#x} debug={debug:?}");
    assert_eq!(
        (last, code, debug.as_str()),
        (0, ENHANCE_YOUR_CALM, "header_list_way_too_large")
    );
    assert!(c.logged(1, HEADERS).is_empty());
    assert_closed(&mut c);
    assert_eq!(wait_metric(admin, CALM, 1), 1);
    assert_eq!(metric(&metrics(admin), "edgecache_h2_streams_total"), 0);
    assert_serves(&mut p, addr);
}

/// A header list just over client_max_header_size (16 KiB: five 4000-byte fields, four
/// of them references to the dynamic table) but under the abuse limit: the stream gets
/// a 431 with END_STREAM from the h2 crate, the connection lives on.
#[test]
fn header_list_over_the_limit_gets_431() {
    let (mut p, addr, admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    c.send(&headers(1, END_STREAM | END_HEADERS, &hpack_bomb(4)))
        .unwrap();
    let f = c
        .until(WAIT, |f| f.stream == 1 || f.ty == GOAWAY)
        .expect("no answer to an oversized header list");
    assert_eq!(f.ty, HEADERS, "{f:?}");
    assert_eq!(status_of(&f.payload), Some(431), "{:x?}", f.payload);
    assert_ne!(f.flags & END_STREAM, 0);
    // The connection (and its HPACK state) is intact: the next request is served.
    c.send(&headers(3, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    let (status, body) = response(&mut c, 3);
    assert_eq!((status, &body[..]), (Some(200), &b"ok"[..]));
    // The 431 (HEADERS with END_STREAM) is all that came on stream 1: no RST_STREAM.
    let on_1: Vec<(u8, u8)> = c
        .log
        .iter()
        .filter(|f| f.stream == 1)
        .map(|f| (f.ty, f.flags))
        .collect();
    assert_eq!(on_1, [(HEADERS, END_STREAM | END_HEADERS)]);
    assert!(c.log.iter().all(|f| f.ty != GOAWAY));
    // The refused stream never reached a handler.
    assert_eq!(metric(&metrics(admin), "edgecache_h2_streams_total"), 1);
    assert_alive(&mut p);
}

/// A request body that contradicts its content-length, shorter (10 announced, 3 sent
/// with END_STREAM) and longer (2 announced, 5 sent), in one write with the HEADERS or
/// after them: RST_STREAM PROTOCOL_ERROR, never a response, and the origin never
/// receives a complete request.
#[test]
fn body_not_matching_content_length_is_reset() {
    let (up, seen) = common::recording_upstream();
    let config = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
http2 = true
[[upstream]]
name = "origin"
servers = ["{up}"]
[[location]]
prefix = "/"
proxy = "origin"
[admin]
listen = "{{admin}}"
"#
    );
    let (mut p, addr, _admin) = edgecache(&config);
    let mut c = H2::connect(addr, &[]);
    let cases: [(u32, &str, &[u8], bool); 4] = [
        (1, "10", b"abc", false),
        (3, "2", b"abcde", false),
        (5, "10", b"abc", true),
        (7, "2", b"abcde", true),
    ];
    for (id, cl, body, pause) in cases {
        let mut buf = headers(id, END_HEADERS, &post_block(cl));
        if pause {
            // The request is under way (forwarded upstream) before its body comes.
            c.send(&buf).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            buf.clear();
        }
        buf.extend_from_slice(&frame(DATA, END_STREAM, id, body));
        c.send(&buf).unwrap();
        let f = c
            .until(WAIT, |f| f.stream == id || f.ty == GOAWAY)
            .unwrap_or_else(|| panic!("no answer on stream {id}"));
        assert_eq!(f.ty, RST_STREAM, "stream {id}: {f:?}");
        assert_eq!(f.rst_code(), PROTOCOL_ERROR, "stream {id}");
    }
    // Nothing more on those streams: no response after the reset.
    c.send(&headers(9, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    let (status, _) = response(&mut c, 9);
    assert_eq!(status, Some(200));
    for id in [1, 3, 5, 7] {
        assert!(
            c.logged(id, HEADERS).is_empty(),
            "a response on stream {id}"
        );
        assert!(c.logged(id, DATA).is_empty(), "a response on stream {id}");
    }
    assert!(c.log.iter().all(|f| f.ty != GOAWAY));
    let s = seen.lock().unwrap();
    // Only the GET of stream 9.
    assert_eq!(s.heads.len(), 1, "{:?}", s.heads);
    assert!(s.heads[0].starts_with("GET / HTTP/1.1"), "{:?}", s.heads);
    drop(s);
    assert_alive(&mut p);
}

/// `keepalive_timeout` applies to an HTTP/2 connection once its last stream is done,
/// however the streams ended (here: each answered while the connection waited for
/// more), and streams that follow one another are each served (by the connection's
/// stream runners, reused and retired when the connection goes idle).
#[test]
fn idle_h2_connection_gets_goaway_after_keepalive_timeout() {
    let cfg = RETURN_OK.replace("workers = 1", "workers = 1\nkeepalive_timeout = \"1s\"");
    let (mut p, addr, _admin) = edgecache(&cfg);
    let mut c = H2::connect(addr, &[]);
    // Streams one after another, some past the runners' grace (100 ms), some within it.
    for (i, pause) in [0u64, 20, 300, 0, 150].into_iter().enumerate() {
        std::thread::sleep(Duration::from_millis(pause));
        let id = 1 + 2 * i as u32;
        c.send(&headers(id, END_STREAM | END_HEADERS, &get_block()))
            .unwrap();
        let (status, body) = response(&mut c, id);
        assert_eq!((status, &body[..]), (Some(200), &b"ok"[..]), "stream {id}");
    }
    let last = Instant::now();
    let (_, code, _) = c
        .goaway(WAIT)
        .unwrap_or_else(|| panic!("no GOAWAY after keepalive_timeout; got {:?}", c.log));
    let waited = last.elapsed();
    assert_eq!(code, 0, "GOAWAY NO_ERROR");
    assert!(
        waited >= Duration::from_millis(900),
        "GOAWAY after {waited:?}"
    );
    assert_closed(&mut c);
    assert_serves(&mut p, addr);
}

/// A response the server is done with but that still waits in it for the client's
/// flow-control window (here: past send_timeout, after which the server hands the `h2`
/// crate the rest to send as the window opens) is not cut short by keepalive_timeout
/// or the GOAWAY that follows it: the connection waits for the client as long as the
/// client takes something within send_timeout.
#[test]
fn queued_response_outlives_keepalive_timeout() {
    let body = "x".repeat(10_000);
    let cfg = RETURN_OK
        .replace(
            "workers = 1",
            "workers = 1\nkeepalive_timeout = \"1s\"\nsend_timeout = \"3s\"",
        )
        .replace("body = \"ok\"", &format!("body = \"{body}\""));
    let (mut p, addr, _admin) = edgecache(&cfg);
    let mut c = H2::connect(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 1000)]);
    let start = Instant::now();
    c.send(&headers(1, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    // The first 1000 bytes come at once; the rest waits for a WINDOW_UPDATE, which
    // comes 5.5 s later: past send_timeout (3 s, the server is then done with the
    // stream) plus keepalive_timeout and a 1 s linger.
    let first = c
        .until(WAIT, |f| f.ty == DATA && f.stream == 1)
        .expect("the first DATA frame");
    assert_eq!(first.payload.len(), 1000);
    std::thread::sleep(Duration::from_millis(5500).saturating_sub(start.elapsed()));
    let more = 0x7fff_0000u32.to_be_bytes();
    let mut upd = frame(WINDOW_UPDATE, 0, 1, &more);
    upd.extend_from_slice(&frame(WINDOW_UPDATE, 0, 0, &more));
    c.send(&upd).unwrap();
    let mut got = first.payload.len();
    let deadline = Instant::now() + WAIT;
    loop {
        let f = c
            .next(deadline)
            .unwrap_or_else(|| panic!("no END_STREAM after {got} bytes; got {:?}", c.log));
        if f.ty == DATA && f.stream == 1 {
            got += f.payload.len();
            if f.flags & END_STREAM != 0 {
                break;
            }
        }
        assert_ne!(f.ty, RST_STREAM, "stream reset after {got} bytes");
    }
    assert_eq!(got, body.len());
    assert_alive(&mut p);
}

// ---- The protocol itself (our HTTP/2 implementation, RFC 9113) ----

const PING: u8 = 0x6;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// Our SETTINGS come first and are acknowledged by us in turn; a PING is answered with
/// its payload; a PING ACK from the client is not answered.
#[test]
fn settings_and_ping_are_answered() {
    let (mut p, addr, _admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    let first = c
        .next(Instant::now() + WAIT)
        .expect("the server's SETTINGS");
    assert_eq!((first.ty, first.flags, first.stream), (SETTINGS, 0, 0));
    // MAX_CONCURRENT_STREAMS 128 among them.
    let params: Vec<(u16, u32)> = first
        .payload
        .chunks(6)
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            )
        })
        .collect();
    assert!(params.contains(&(0x3, 128)), "{params:?}");
    c.until(WAIT, |f| f.ty == SETTINGS && f.flags & ACK != 0)
        .expect("our SETTINGS acknowledged");
    c.send(&frame(PING, ACK, 0, b"ignored!")).unwrap();
    c.send(&frame(PING, 0, 0, b"12345678")).unwrap();
    let pong = c.until(WAIT, |f| f.ty == PING).expect("PING ACK");
    assert_eq!((pong.flags, &pong.payload[..]), (ACK, &b"12345678"[..]));
    assert_eq!(c.log.iter().filter(|f| f.ty == PING).count(), 1);
    c.send(&headers(1, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    assert_eq!(response(&mut c, 1), (Some(200), b"ok".to_vec()));
    assert_alive(&mut p);
}

/// Malformed requests (RFC 9113 8.1.1) are reset with PROTOCOL_ERROR, never answered
/// nor passed on; the connection serves the next stream.
#[test]
fn malformed_requests_are_reset_and_the_connection_lives() {
    let (mut p, addr, _admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[]);
    let with = |name: &[u8], value: &[u8]| {
        let mut b = get_block();
        hpack_literal(&mut b, name, value);
        b
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("uppercase name", with(b"X-Upper", b"1")),
        ("connection field", with(b"connection", b"close")),
        ("te gzip", with(b"te", b"gzip")),
        ("CR LF in a value", with(b"x-a", b"b\r\nx-injected: 1")),
        ("pseudo-header after a field", {
            let mut b = with(b"x-a", b"1");
            hpack_literal(&mut b, b":path", b"/again");
            b
        }),
        ("no :path", vec![0x82, 0x86, 0x01, 0x01, b'a']),
        ("unknown pseudo-header", with(b":protocol", b"websocket")),
    ];
    let mut id = 1;
    for (what, block) in &cases {
        c.send(&headers(id, END_STREAM | END_HEADERS, block))
            .unwrap();
        let f = c
            .until(WAIT, |f| f.stream == id || f.ty == GOAWAY)
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(f.ty, RST_STREAM, "{what}: {f:?}");
        assert_eq!(f.rst_code(), PROTOCOL_ERROR, "{what}");
        id += 2;
    }
    c.send(&headers(id, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    assert_eq!(response(&mut c, id), (Some(200), b"ok".to_vec()));
    assert!(c.log.iter().all(|f| f.ty != HEADERS || f.stream == id));
    assert_alive(&mut p);
}

/// Connection errors end the connection with GOAWAY and the error's code.
#[test]
fn connection_errors_get_goaway_with_their_code() {
    let (mut p, addr, _admin) = edgecache(RETURN_OK);
    let cases: Vec<(&str, Vec<u8>, u32)> = vec![
        (
            "even stream id",
            headers(2, END_STREAM | END_HEADERS, &get_block()),
            PROTOCOL_ERROR,
        ),
        ("DATA on stream 0", frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR),
        (
            "DATA on an idle stream",
            frame(DATA, 0, 9, b"x"),
            PROTOCOL_ERROR,
        ),
        (
            "connection window overflow",
            frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            FLOW_CONTROL_ERROR,
        ),
        (
            "frame over 16 KiB",
            frame(0xfa, 0, 0, &vec![0; 16_385]),
            0x6,
        ),
        (
            "bad HPACK",
            headers(1, END_STREAM | END_HEADERS, &[0x80]),
            0x9,
        ),
        (
            "CONTINUATION without HEADERS",
            frame(CONTINUATION, END_HEADERS, 1, &get_block()),
            PROTOCOL_ERROR,
        ),
        (
            "another frame inside a header block",
            [
                headers(1, END_STREAM, &get_block()),
                frame(PING, 0, 0, b"12345678"),
            ]
            .concat(),
            PROTOCOL_ERROR,
        ),
    ];
    for (what, bytes, code) in cases {
        let mut c = H2::connect(addr, &[]);
        c.send(&bytes).unwrap();
        let (_, got, _) = c
            .goaway(WAIT)
            .unwrap_or_else(|| panic!("{what}: no GOAWAY"));
        assert_eq!(got, code, "{what}");
        assert_closed(&mut c);
    }
    assert_serves(&mut p, addr);
}

/// A body larger than the client's windows goes out as the windows open, in frames no
/// larger than 16 KiB less a frame head (one TLS record each) even when the client
/// allows larger frames, never past a window, and byte for byte.
#[test]
fn response_bodies_follow_the_clients_windows() {
    let body: String = (0..40_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let cfg = RETURN_OK.replace("body = \"ok\"", &format!("body = \"{body}\""));
    let (mut p, addr, _admin) = edgecache(&cfg);
    let mut c = H2::connect(
        addr,
        &[
            (SETTINGS_INITIAL_WINDOW_SIZE, 10_000),
            (SETTINGS_MAX_FRAME_SIZE, 1 << 20),
        ],
    );
    c.send(&headers(1, END_STREAM | END_HEADERS, &get_block()))
        .unwrap();
    let mut got = Vec::new();
    let mut granted = 10_000usize;
    let deadline = Instant::now() + WAIT;
    loop {
        let f = c
            .next(deadline)
            .unwrap_or_else(|| panic!("stalled at {}", got.len()));
        assert_ne!(f.ty, GOAWAY);
        assert_ne!(f.ty, RST_STREAM);
        if f.ty != DATA || f.stream != 1 {
            continue;
        }
        assert!(f.payload.len() <= 16 * 1024 - 9, "{}", f.payload.len());
        got.extend_from_slice(&f.payload);
        assert!(
            got.len() <= granted,
            "{} bytes past a window of {granted}",
            got.len()
        );
        if f.flags & END_STREAM != 0 {
            break;
        }
        if got.len() == granted {
            // The stream's window is used up: 10,000 more (the connection's is 65,535).
            let more = 10_000u32.to_be_bytes();
            c.send(&frame(WINDOW_UPDATE, 0, 1, &more)).unwrap();
            granted += 10_000;
        }
    }
    assert_eq!(got, body.as_bytes());
    assert_alive(&mut p);
}

/// A client that allows no HPACK dynamic table gets heads without it: a size update to
/// 0 first, then only static references and literals that are not indexed.
#[test]
fn a_client_without_a_dynamic_table_gets_heads_without_one() {
    let (mut p, addr, _admin) = edgecache(RETURN_OK);
    let mut c = H2::connect(addr, &[(SETTINGS_HEADER_TABLE_SIZE, 0)]);
    for id in [1u32, 3, 5] {
        c.send(&headers(id, END_STREAM | END_HEADERS, &get_block()))
            .unwrap();
        assert_eq!(response(&mut c, id), (Some(200), b"ok".to_vec()));
        let h = c.logged(id, HEADERS)[0].payload.clone();
        let mut b = &h[..];
        if id == 1 {
            assert_eq!(b[0], 0x20, "size update first: {h:x?}");
            b = &b[1..];
        }
        // No representation that adds to the table (01xxxxxx), no reference into it.
        let mut i = 0;
        while i < b.len() {
            let x = b[i];
            assert!(x & 0xc0 != 0x40, "indexed literal in {h:x?}");
            if x & 0x80 != 0 {
                assert!((x & 0x7f) <= 61, "dynamic reference in {h:x?}");
                i += 1;
                continue;
            }
            // Literal: name (index or string), then value string.
            let mut j = i + 1;
            if x & 0x0f == 0 {
                j += 1 + (b[j] & 0x7f) as usize;
            } else if x & 0x0f == 0x0f {
                while b[j] & 0x80 != 0 {
                    j += 1;
                }
                j += 1;
            }
            j += 1 + (b[j] & 0x7f) as usize;
            i = j;
        }
    }
    assert_alive(&mut p);
}
