//! Helpers for integration tests that start the real binaries on 127.0.0.1 and talk real
//! HTTP to them.
//!
//! How it fits: every crate's `tests/` uses this kit, so that "start edgeorigin, start
//! edgecache in front of it, send bytes, assert on bytes" reads the same everywhere.
//! Nothing here is a mock: [`Proc`] is a child process, [`Client`] is a blocking TCP
//! socket, and [`Response`] is parsed from the bytes that came off that socket.
//!
//! Binaries are found next to the test executable (`target/<profile>/`). The project's
//! `./test` script runs `cargo build --workspace --bins` first, so every binary exists.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of a workspace binary (`edgecache`, `edgeorigin`, `edgeload`, `edgebench`).
///
/// Panics with a clear message when the binary was not built.
pub fn bin(name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(format!("CARGO_BIN_EXE_{name}")) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test-binary>  ->  target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "binary {} not found: run `cargo build --workspace --bins` first (./test does)",
        p.display()
    );
    p
}

/// The environment variable that lets a test accept running less than it was asked to
/// (`EDGECACHE_TEST_ALLOW_FALLBACK=1`): io_uring refused by the kernel (the test then
/// ran on the thread pool), or a full-disk filesystem that could not be mounted.
pub const ALLOW_FALLBACK_ENV: &str = "EDGECACHE_TEST_ALLOW_FALLBACK";

/// Whether [`ALLOW_FALLBACK_ENV`] is `1`.
pub fn fallback_allowed() -> bool {
    std::env::var(ALLOW_FALLBACK_ENV).is_ok_and(|v| v == "1")
}

/// A test could not set up what it exists to test (`what`), because of `why`: it fails,
/// unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`, when it prints one line saying what ran
/// instead and returns. The line goes to the process's stderr itself, not through
/// `eprintln!`, which the test harness captures for passing tests: a run that fell back
/// shows it. A test that quietly tests something else (a `threads` run
/// reported as `io_uring`, a skipped full-disk test reported as passed) is how a
/// regression ships; the variable is for machines known to lack the feature.
pub fn fallback(what: &str, why: &str) {
    assert!(
        fallback_allowed(),
        "{what}: {why} (set {ALLOW_FALLBACK_ENV}=1 to accept this on a machine that cannot run it)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "FALLBACK ({ALLOW_FALLBACK_ENV}=1): {what}: {why}"
    );
}

/// A free TCP port on 127.0.0.1 for a server a test starts (bound, released).
///
/// Taken below Linux's ephemeral range (32768-60999), walking a per-process sequence:
/// a port the kernel hands out as `bind(0)` or as a client socket's local port can be
/// taken by another test's connection before the server binds it ("Address already in
/// use", seen in CI-like runs); these never are, and the walk keeps this process's
/// picks apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // 7 and SPAN are coprime: the walk visits every port of the span.
        let port = (LOW + (seed + n.wrapping_mul(7)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// `127.0.0.1:<free port>`.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Why a started process is not listening ([`Proc::try_wait_port`]).
#[derive(Debug)]
pub struct NotListening {
    /// It exited because a port it was to bind was taken: a port [`free_port`] found
    /// free was bound by another process before the server bound it.
    pub port_taken: bool,
    pub message: String,
}

/// Starts a server with `start` (which picks its ports with [`free_addr`], spawns, and
/// waits for them) and starts it again, on new ports, when it exits because a port
/// was taken between the pick and its bind (seen once in a full run on a loaded
/// machine); any other failure panics.
pub fn start_listening<T>(mut start: impl FnMut() -> Result<T, NotListening>) -> T {
    const TRIES: usize = 3;
    let mut tries = 1;
    loop {
        match start() {
            Ok(v) => return v,
            Err(e) if e.port_taken && tries < TRIES => {
                tries += 1;
                eprintln!("port taken before the server bound it; again on new ports");
            }
            Err(e) => panic!("{}", e.message),
        }
    }
}

/// A child process that is killed (SIGKILL) when dropped, so a failing test never leaks
/// servers. Its stderr goes to a temp file that [`Proc::stderr`] reads back.
pub struct Proc {
    pub child: Child,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proc {
    /// Starts `bin` with `args` in a fresh temp working directory.
    pub fn spawn(bin: &Path, args: &[&str]) -> Proc {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::spawn_in(bin, args, dir)
    }

    /// Starts `bin` with `args`, working directory `dir` (kept alive with the process).
    pub fn spawn_in(bin: &Path, args: &[&str], dir: tempfile::TempDir) -> Proc {
        Self::spawn_in_env(bin, args, dir, &[])
    }

    /// [`Proc::spawn_in`] with extra environment variables.
    pub fn spawn_in_env(
        bin: &Path,
        args: &[&str],
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Proc {
        let stderr_path = dir.path().join("stderr.log");
        let err = std::fs::File::create(&stderr_path).expect("stderr file");
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Proc {
            child,
            stderr_path,
            _dir: dir,
        }
    }

    /// The process's working directory.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Waits until `addr` accepts TCP connections; panics (with stderr) after `timeout`.
    pub fn wait_port(&mut self, addr: SocketAddr, timeout: Duration) {
        if let Err(e) = self.try_wait_port(addr, timeout) {
            panic!("{}", e.message);
        }
    }

    /// [`Proc::wait_port`] that returns why the process is not listening instead of
    /// panicking.
    pub fn try_wait_port(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(), NotListening> {
        let start = Instant::now();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                let stderr = self.stderr();
                return Err(NotListening {
                    port_taken: stderr.contains("Address already in use"),
                    message: format!(
                        "process exited ({st}) before listening on {addr}; stderr:\n{stderr}"
                    ),
                });
            }
            if start.elapsed() > timeout {
                return Err(NotListening {
                    port_taken: false,
                    message: format!(
                        "{addr} not listening after {timeout:?}; stderr:\n{}",
                        self.stderr()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (e.g. `libc::SIGTERM` = 15) through `kill(1)`.
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{sig} failed");
    }

    /// Waits for exit up to `timeout`; returns the exit code (None: killed by a signal).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.code();
            }
            if start.elapsed() > timeout {
                panic!(
                    "process still running after {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed HTTP/1.x response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub version: u8,
    pub reason: String,
    /// Header names lower-cased, in wire order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The exact bytes of the head, status line to the blank line.
    pub head_bytes: Vec<u8>,
}

impl Response {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
    /// Every value of header `name`.
    pub fn headers_all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A blocking HTTP/1.1 client over one TCP connection. It writes exactly the bytes it is
/// given and parses what comes back, so tests can send malformed or pipelined requests.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn set_read_timeout(&self, d: Duration) {
        self.stream.set_read_timeout(Some(d)).unwrap();
    }

    /// Writes raw bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Writes `GET path` with `Host: test` plus extra header lines (`"Name: value"`).
    pub fn get(&mut self, path: &str, headers: &[&str]) -> Response {
        self.request("GET", path, headers)
    }

    /// Writes a body-less request and reads its response.
    pub fn request(&mut self, method: &str, path: &str, headers: &[&str]) -> Response {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        self.send(req.as_bytes());
        self.read_response(method == "HEAD")
    }

    fn fill(&mut self) -> usize {
        let mut tmp = [0u8; 65536];
        match read_retrying(&mut self.stream, &mut tmp) {
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => panic!(
                "read: {e} (buffered so far: {:?})",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads whatever arrives until the peer closes (or the read timeout passes).
    pub fn read_to_close(&mut self) -> Vec<u8> {
        loop {
            match self.fill_opt() {
                Some(0) | None => break,
                Some(_) => {}
            }
        }
        std::mem::take(&mut self.buf)
    }

    fn fill_opt(&mut self) -> Option<usize> {
        let mut tmp = [0u8; 65536];
        match read_retrying(&mut self.stream, &mut tmp) {
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Some(n)
            }
            Err(_) => None,
        }
    }

    /// True if the server closed the connection (EOF or reset) within the read timeout.
    pub fn is_closed(&mut self) -> bool {
        matches!(self.fill_opt(), Some(0) | None) && self.buf.is_empty()
    }

    /// Reads one response. `head_request`: the request was HEAD (no body follows).
    pub fn read_response(&mut self, head_request: bool) -> Response {
        // Head.
        let (status, version, reason, headers, head_len) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 128];
            let mut r = httparse::Response::new(&mut hs);
            match r.parse(&self.buf).expect("parse response head") {
                httparse::Status::Complete(n) => {
                    let headers: Vec<(String, String)> = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    break (
                        r.code.unwrap(),
                        r.version.unwrap(),
                        r.reason.unwrap_or("").to_string(),
                        headers,
                        n,
                    );
                }
                httparse::Status::Partial => {
                    if self.fill() == 0 {
                        panic!(
                            "connection closed mid-head: {:?}",
                            String::from_utf8_lossy(&self.buf)
                        );
                    }
                }
            }
        };
        let head_bytes = self.buf[..head_len].to_vec();
        self.buf.drain(..head_len);
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let chunked =
            get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let body = if head_request || status < 200 || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            self.read_chunked()
        } else if let Some(cl) = get("content-length") {
            let n: usize = cl.trim().parse().expect("content-length");
            while self.buf.len() < n {
                if self.fill() == 0 {
                    panic!("closed after {} of {n} body bytes", self.buf.len());
                }
            }
            self.buf.drain(..n).collect()
        } else {
            while self.fill() > 0 {}
            std::mem::take(&mut self.buf)
        };
        Response {
            status,
            version,
            reason,
            headers,
            body,
            head_bytes,
        }
    }

    fn read_chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                if self.fill() == 0 {
                    panic!("closed inside chunked body");
                }
            };
            let line = String::from_utf8_lossy(&self.buf[..line_end]).to_string();
            let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                .expect("chunk size");
            self.buf.drain(..line_end + 2);
            if size == 0 {
                // trailers until blank line
                loop {
                    if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        let blank = p == 0;
                        self.buf.drain(..p + 2);
                        if blank {
                            return body;
                        }
                    } else if self.fill() == 0 {
                        panic!("closed inside trailers");
                    }
                }
            }
            while self.buf.len() < size + 2 {
                if self.fill() == 0 {
                    panic!("closed inside chunk");
                }
            }
            body.extend_from_slice(&self.buf[..size]);
            assert_eq!(
                &self.buf[size..size + 2],
                b"\r\n",
                "chunk not followed by CRLF"
            );
            self.buf.drain(..size + 2);
        }
    }
}

/// One request on a fresh connection.
pub fn get(addr: SocketAddr, path: &str, headers: &[&str]) -> Response {
    Client::connect(addr).get(path, headers)
}

/// Writes `text` to `dir/name` (a config file, say) and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write file");
    p
}

/// `read`, again after EINTR (a signal sent to another test's child process may
/// interrupt this test's blocking read).
fn read_retrying(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
