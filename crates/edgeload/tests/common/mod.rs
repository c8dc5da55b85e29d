//! A small real HTTP/1.1 server for the integration tests, and a runner for the real
//! `edgeload` binary.
//!
//! The server is std threads on a 127.0.0.1 listener: it counts connections, requests,
//! paths and `Connection: close` requests, and answers with Content-Length, chunked or
//! close-delimited bodies carrying an `X-Checksum` (xxh3-64), optionally corrupting
//! every Nth body (checksum of the right body, wrong bytes) or never answering.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use twox_hash::XxHash3_64;

/// How the server frames its responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length,
    Chunked,
    /// No length: the body ends when the server closes.
    Close,
    /// Reads requests, never answers.
    Silent,
}

/// What the server saw.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicU64,
    pub connections: AtomicU64,
    pub close_requests: AtomicU64,
    pub paths: Mutex<HashMap<String, u64>>,
    pub accepted_at: Mutex<Vec<Instant>>,
    /// Connections per peer address (`--source` tests), in accept order too.
    pub peers: Mutex<Vec<std::net::IpAddr>>,
    /// Every request that carried a `Range`: (connection number from 0, path, value).
    pub ranges: Mutex<Vec<(u64, String, String)>>,
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
}

impl TestServer {
    /// Starts a server; `corrupt_every`: every Nth response body (counted over the whole
    /// server) has one byte flipped while its X-Checksum stays that of the right body.
    pub fn start(framing: Framing, corrupt_every: Option<u64>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let conn = s.connections.fetch_add(1, Ordering::SeqCst);
                s.accepted_at.lock().unwrap().push(Instant::now());
                if let Ok(peer) = stream.peer_addr() {
                    s.peers.lock().unwrap().push(peer.ip());
                }
                let s = s.clone();
                std::thread::spawn(move || serve(stream, conn, framing, corrupt_every, &s));
            }
        });
        TestServer { addr, seen }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> u64 {
        self.seen.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> u64 {
        self.seen.connections.load(Ordering::SeqCst)
    }

    /// The peer address of every accepted connection, in accept order.
    pub fn peers(&self) -> Vec<String> {
        self.seen
            .peers
            .lock()
            .unwrap()
            .iter()
            .map(|ip| ip.to_string())
            .collect()
    }
}

/// The status line for a path: `/429...` is rate limited (a client that counts 429s
/// apart is tested against it), anything else 200.
fn status_for(path: &str) -> &'static str {
    if path.starts_with("/429") {
        "429 Too Many Requests"
    } else {
        "200 OK"
    }
}

/// The body for a path: deterministic, a few hundred bytes.
pub fn body_for(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..40 {
        b.extend_from_slice(format!("{path}:{i};").as_bytes());
    }
    b
}

fn serve(
    mut stream: TcpStream,
    conn_no: u64,
    framing: Framing,
    corrupt_every: Option<u64>,
    seen: &Seen,
) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    loop {
        // Answer every complete request in the buffer (pipelining).
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            let n = match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => break,
                Err(_) => return,
            };
            let path = req.path.unwrap_or("").to_string();
            let close = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close")
            });
            if let Some(r) = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("range"))
            {
                let value = String::from_utf8_lossy(r.value).into_owned();
                seen.ranges
                    .lock()
                    .unwrap()
                    .push((conn_no, path.clone(), value));
            }
            buf.drain(..n);
            let count = seen.requests.fetch_add(1, Ordering::SeqCst) + 1;
            *seen.paths.lock().unwrap().entry(path.clone()).or_default() += 1;
            if close {
                seen.close_requests.fetch_add(1, Ordering::SeqCst);
            }
            if framing == Framing::Silent {
                continue;
            }
            let good = body_for(&path);
            let mut body = good.clone();
            if corrupt_every.is_some_and(|k| count.checked_rem(k) == Some(0)) {
                body[5] ^= 0x20;
            }
            let sum = format!("{:016x}", XxHash3_64::oneshot(&good));
            let conn = if close || framing == Framing::Close {
                "Connection: close\r\n"
            } else {
                ""
            };
            let mut out = match framing {
                Framing::Length => {
                    format!("HTTP/1.1 {}\r\nContent-Length: {}\r\nX-Checksum: {sum}\r\n{conn}\r\n", status_for(&path), body.len())
                        .into_bytes()
                }
                Framing::Chunked => {
                    format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Checksum: {sum}\r\n{conn}\r\n")
                        .into_bytes()
                }
                Framing::Close => format!("HTTP/1.1 200 OK\r\nX-Checksum: {sum}\r\n{conn}\r\n").into_bytes(),
                Framing::Silent => unreachable!(),
            };
            if framing == Framing::Chunked {
                let (a, b) = body.split_at(body.len() / 3);
                for part in [a, b] {
                    out.extend_from_slice(format!("{:x};ext=1\r\n", part.len()).as_bytes());
                    out.extend_from_slice(part);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
            } else {
                out.extend_from_slice(&body);
            }
            if stream.write_all(&out).is_err() {
                return;
            }
            if close || framing == Framing::Close {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
        match stream.read(&mut tmp) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// Result of one `edgeload` run.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the real binary with `args`; kills it (and fails) after `limit`.
pub fn edgeload(args: &[&str], limit: Duration) -> Run {
    let child = Command::new(env!("CARGO_BIN_EXE_edgeload"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn edgeload");
    finish(child, limit)
}

/// Runs the real binary with `--json FILE` and then `args`; returns the run and the JSON
/// it wrote (`Null` when it wrote none, so a test asserts the exit code first).
pub fn edgeload_json(args: &[&str], limit: Duration) -> (Run, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let mut all = vec!["--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    let r = edgeload(&all, limit);
    let v = if json.exists() {
        json_of(&json)
    } else {
        serde_json::Value::Null
    };
    (r, v)
}

/// The JSON file a run wrote, parsed.
pub fn json_of(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("json file written");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{text}"))
}

/// Waits for a spawned child with a limit and collects its output.
pub fn finish(mut child: std::process::Child, limit: Duration) -> Run {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "edgeload ran longer than {limit:?}; stdout:\n{}",
                t_out.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// The number in "N requests in T, B read".
pub fn reported_requests(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.contains(" requests in "))
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}
