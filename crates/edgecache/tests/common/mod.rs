//! Shared pieces of the edgecache integration tests: start the real binaries on
//! 127.0.0.1, and a small recording upstream for checks that edgeorigin cannot make
//! (what exactly arrived upstream).
#![allow(dead_code)]

pub mod pki;

use edge_testkit::{bin, free_addr, Proc};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const START: Duration = Duration::from_secs(15);

/// Starts `edgeorigin` on a free port.
pub fn origin() -> (Proc, SocketAddr) {
    edge_testkit::start_listening(|| {
        let addr = free_addr();
        let mut p = Proc::spawn(&bin("edgeorigin"), &["--listen", &addr.to_string()]);
        p.try_wait_port(addr, START)?;
        Ok((p, addr))
    })
}

/// Starts `edgecache -c <config>`; `{listen}` in the text is replaced by a free address
/// (returned) and `{admin}` by another.
///
/// The file I/O backend matrix: with `EDGECACHE_TEST_AIO=off|threads|io_uring|auto` in
/// the environment, a config without an `[aio]` table gets `[aio] mode = "..."`, so
/// `./test` runs the same integration tests once per backend. Once the server is up,
/// every worker's backend in `/status` must be the one asked for (a config without
/// `[admin]` gets one for this): a kernel that refuses io_uring fails the run instead
/// of quietly testing `threads`, unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`, which lets
/// it pass and prints the fallback.
pub fn edgecache(config: &str) -> (Proc, SocketAddr, SocketAddr) {
    edgecache_env(config, &[])
}

/// `config` with its `{listen}` and `{admin}` placeholders filled in.
pub fn fill(config: &str, listen: SocketAddr, admin: SocketAddr) -> String {
    config
        .replace("{listen}", &listen.to_string())
        .replace("{admin}", &admin.to_string())
}

/// `config_generation` in the `/status` of the admin listener at `admin`.
pub fn config_generation(admin: SocketAddr) -> u64 {
    json_number(&get_text(admin, "/status"), "config_generation").expect("config_generation")
}

/// Rewrites the config file of `p` (started by [`edgecache`]) with `config`, filled in
/// with `listen` and `admin`, sends SIGHUP, and waits (up to 10 s) until `/status`
/// shows a new generation.
pub fn reload(p: &Proc, listen: SocketAddr, admin: SocketAddr, config: &str) {
    let before = config_generation(admin);
    std::fs::write(p.dir().join("edgecache.toml"), fill(config, listen, admin)).unwrap();
    p.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while config_generation(admin) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the reload was not applied; stderr:\n{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `[aio] mode` the matrix asks of `config`: `EDGECACHE_TEST_AIO`, unless the
/// config has its own `[aio]` table.
fn matrix_aio(config: &str) -> Option<String> {
    let mode = std::env::var("EDGECACHE_TEST_AIO").ok()?;
    (!mode.is_empty() && !config.contains("[aio]")).then_some(mode)
}

/// [`edgecache`] with extra environment variables for the server.
pub fn edgecache_env(config: &str, env: &[(&str, &str)]) -> (Proc, SocketAddr, SocketAddr) {
    let aio = matrix_aio(config);
    let mut config = config.to_string();
    if let Some(mode) = &aio {
        config.push_str(&format!("\n[aio]\nmode = \"{mode}\"\n"));
        if !config.contains("[admin]") {
            // Where the check below reads the backend in use.
            config.push_str("\n[admin]\nlisten = \"{admin}\"\n");
        }
    }
    let (p, listen, admin, text) = edge_testkit::start_listening(|| {
        let listen = free_addr();
        let admin = free_addr();
        let dir = tempfile::tempdir().unwrap();
        let text = fill(&config, listen, admin);
        let path = dir.path().join("edgecache.toml");
        std::fs::write(&path, &text).unwrap();
        let path = path.to_string_lossy().into_owned();
        let has_admin = config.contains("{admin}");
        let mut p = Proc::spawn_in_env(&bin("edgecache"), &["-c", &path], dir, env);
        p.try_wait_port(listen, START)?;
        // The admin listener opens beside the data listeners, not before them: a test
        // that asks /status at once must not race it.
        if has_admin {
            p.try_wait_port(admin, START)?;
        }
        Ok((p, listen, admin, text))
    });
    if let Some(mode) = aio {
        let at = admin_listen(&text).expect("an [admin] listen address to read /status from");
        check_aio_backend(&p, at, &mode);
    }
    (p, listen, admin)
}

/// `listen` of the `[admin]` table of a config text.
fn admin_listen(text: &str) -> Option<SocketAddr> {
    let table = &text[text.find("[admin]")?..];
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("listen"))?;
    line.split('"').nth(1)?.parse().ok()
}

/// Every worker's file I/O backend, as `/status` reports it once the worker has
/// started (`workers[].aio.mode`), must be `want`; `EDGECACHE_TEST_ALLOW_FALLBACK=1`
/// accepts another and prints it.
fn check_aio_backend(p: &Proc, admin: SocketAddr, want: &str) {
    let deadline = std::time::Instant::now() + START;
    let modes = loop {
        let r = edge_testkit::get(admin, "/status", &[]);
        assert_eq!(
            r.status,
            200,
            "EDGECACHE_TEST_AIO={want}: /status must be readable to check the backend in use (admin.allow must let 127.0.0.1 in)"
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("/status is JSON");
        let modes: Option<Vec<String>> = v["workers"]
            .as_array()
            .expect("/status workers")
            .iter()
            .map(|w| w["aio"]["mode"].as_str().map(str::to_string))
            .collect();
        match modes {
            Some(m) if !m.is_empty() => break m,
            _ => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "workers never reported their backend: {v}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    if let Some(other) = modes.iter().find(|m| *m != want) {
        let log = p.stderr();
        let why = log
            .lines()
            .find(|l| l.contains("aio.mode"))
            .unwrap_or("no log line says why");
        edge_testkit::fallback(
            &format!("EDGECACHE_TEST_AIO={want}: the server runs [aio] mode \"{other}\""),
            why,
        );
    }
}

/// A plain proxy config in front of `upstream`.
pub fn proxy_config(upstream: SocketAddr, extra_top: &str, extra_upstream: &str) -> String {
    format!(
        r#"workers = 1
worker_cpu_affinity = "off"
{extra_top}
[[listen]]
addr = "{{listen}}"

[[upstream]]
name = "origin"
servers = ["{upstream}"]
{extra_upstream}

[[location]]
prefix = "/"
proxy = "origin"

[admin]
listen = "{{admin}}"
"#
    )
}

/// What the recording upstream saw: raw heads and decoded bodies, one per request.
#[derive(Default, Clone)]
pub struct Seen {
    pub heads: Vec<String>,
    pub bodies: Vec<Vec<u8>>,
    pub connections: usize,
}

/// A real HTTP/1.1 server on 127.0.0.1 that records each request and answers with its
/// body echoed back (chunked when the request carried `X-Reply-Chunked: 1`).
pub fn recording_upstream() -> (SocketAddr, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            s2.lock().unwrap().connections += 1;
            let s3 = s2.clone();
            std::thread::spawn(move || serve_recording(conn, s3));
        }
    });
    (addr, seen)
}

fn serve_recording(mut c: TcpStream, seen: Arc<Mutex<Seen>>) {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // head
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let mut tmp = [0u8; 8192];
            match c.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let lower = head.to_ascii_lowercase();
        let body = if lower.contains("transfer-encoding: chunked") {
            read_chunked(&mut c, &mut buf)
        } else if let Some(cl) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
        {
            let n: usize = cl.trim().parse().unwrap();
            while buf.len() < n {
                let mut tmp = [0u8; 8192];
                match c.read(&mut tmp) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => buf.extend_from_slice(&tmp[..k]),
                }
            }
            buf.drain(..n).collect()
        } else {
            Vec::new()
        };
        {
            let mut s = seen.lock().unwrap();
            s.heads.push(head.clone());
            s.bodies.push(body.clone());
        }
        let mut resp = Vec::new();
        if lower.contains("x-reply-chunked: 1") {
            resp.extend_from_slice(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Upstream: rec\r\n\r\n",
            );
            for piece in body.chunks(1000) {
                resp.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                resp.extend_from_slice(piece);
                resp.extend_from_slice(b"\r\n");
            }
            resp.extend_from_slice(b"0\r\n\r\n");
        } else {
            resp.extend_from_slice(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nKeep-Alive: timeout=5\r\nX-Upstream: rec\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            resp.extend_from_slice(&body);
        }
        if c.write_all(&resp).is_err() {
            return;
        }
    }
}

fn read_chunked(c: &mut TcpStream, buf: &mut Vec<u8>) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                break p;
            }
            let mut tmp = [0u8; 8192];
            let n = c.read(&mut tmp).unwrap_or(0);
            if n == 0 {
                return body;
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap().trim(), 16)
            .unwrap();
        buf.drain(..line_end + 2);
        while buf.len() < size + 2 {
            let mut tmp = [0u8; 8192];
            let n = c.read(&mut tmp).unwrap_or(0);
            if n == 0 {
                return body;
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        if size == 0 {
            buf.drain(..2);
            return body;
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

/// The value of the first `name` field (any case) of a raw request or response head,
/// trimmed.
pub fn head_field(head: &str, name: &str) -> Option<String> {
    head.lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        })
        .map(|(_, v)| v.trim().to_string())
}

/// A deterministic test payload.
pub fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// A caching proxy config in front of `upstream`: one cache `c1` at `cache_dir`
/// (`cache_extra` adds `[[cache]]` keys), one `prefix = "/"` location using it
/// (`location_extra` adds location keys), and the admin listener with `admin_allow`.
pub fn cached_config(
    upstream: SocketAddr,
    cache_dir: &std::path::Path,
    cache_extra: &str,
    location_extra: &str,
    admin_allow: &str,
) -> String {
    format!(
        r#"workers = 1
worker_cpu_affinity = "off"

[[listen]]
addr = "{{listen}}"

[[cache]]
name = "c1"
path = "{dir}"
{cache_extra}

[[upstream]]
name = "origin"
servers = ["{upstream}"]

[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]
{location_extra}

[admin]
listen = "{{admin}}"
allow = [{admin_allow}]
"#,
        dir = cache_dir.display()
    )
}

/// Body of `GET path` on an admin or origin address, as text.
pub fn get_text(addr: SocketAddr, path: &str) -> String {
    String::from_utf8_lossy(&edge_testkit::get(addr, path, &[]).body).into_owned()
}

/// The number in `"key":<n>` of a flat JSON text (first occurrence), for `/stats`.
pub fn json_number(text: &str, key: &str) -> Option<u64> {
    let pat = format!("\"{key}\":");
    let at = text.find(&pat)? + pat.len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Polls `/status` at `admin` every `every` until its number at `key` is at least
/// `min`; fails after 10 s, saying `what` and the last `/status`.
pub fn wait_status_at_least(admin: SocketAddr, key: &str, min: u64, every: Duration, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = get_text(admin, "/status");
        if json_number(&status, key).is_some_and(|n| n >= min) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {status}");
        std::thread::sleep(every);
    }
}

/// Requests edgeorigin has answered so far (its `/stats`), read until two reads 50 ms
/// apart agree, so a reply being recorded right now is counted.
pub fn origin_requests(origin: SocketAddr) -> u64 {
    let mut last = json_number(&get_text(origin, "/stats"), "requests").expect("origin /stats");
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = json_number(&get_text(origin, "/stats"), "requests").expect("origin /stats");
        if now == last {
            return now;
        }
        last = now;
    }
}

/// `POST path` with a form body on a fresh connection.
pub fn post_form(addr: SocketAddr, path: &str, form: &str) -> edge_testkit::Response {
    let mut c = edge_testkit::Client::connect(addr);
    c.send(
        format!(
            "POST {path} HTTP/1.1\r\nHost: admin\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        )
        .as_bytes(),
    );
    c.read_response(false)
}

// ---- The cache tests' fixtures (tests/cache.rs). ----

/// `admin.allow` for loopback clients.
pub const LOCAL: &str = "\"127.0.0.1/32\"";

/// Origin + edgecache with a fresh cache dir (returned so a test can restart on it).
pub struct Setup {
    pub origin: Proc,
    pub origin_addr: SocketAddr,
    pub cache: Proc,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
}

pub fn setup(cache_extra: &str, location_extra: &str) -> Setup {
    setup_allow(cache_extra, location_extra, LOCAL)
}

pub fn setup_allow(cache_extra: &str, location_extra: &str, allow: &str) -> Setup {
    let (origin, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = cached_config(
        origin_addr,
        &dir.path().join("cache"),
        cache_extra,
        location_extra,
        allow,
    );
    let (cache, addr, admin) = edgecache(&cfg);
    Setup {
        origin,
        origin_addr,
        cache,
        addr,
        admin,
        dir,
    }
}

impl Setup {
    pub fn config(&self, cache_extra: &str, location_extra: &str) -> String {
        cached_config(
            self.origin_addr,
            &self.dir.path().join("cache"),
            cache_extra,
            location_extra,
            LOCAL,
        )
    }
    pub fn get(&self, path: &str, headers: &[&str]) -> edge_testkit::Response {
        edge_testkit::get(self.addr, path, headers)
    }
    pub fn origin_count(&self) -> u64 {
        origin_requests(self.origin_addr)
    }
    pub fn status_json(&self) -> String {
        get_text(self.admin, "/status")
    }
}

/// Reads one response on a raw socket, noting when the first body byte and the last
/// arrived (relative to `t0`). Returns (status line, X-Cache-Status, body length, body
/// hash, first byte, last byte).
pub fn timed_get(
    addr: SocketAddr,
    path: &str,
    t0: std::time::Instant,
) -> (String, String, usize, u64, Duration, Duration) {
    use std::hash::Hasher;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut body_len = 0usize;
    let mut first = None;
    let mut head_done = false;
    loop {
        // A reset is how a cut response ends (the session aborts with RST).
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => panic!("read: {e}"),
        };
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        if !head_done {
            head.extend_from_slice(chunk);
            match head.windows(4).position(|w| w == b"\r\n\r\n") {
                Some(p) => {
                    head_done = true;
                    let body = head.split_off(p + 4);
                    if !body.is_empty() {
                        first.get_or_insert_with(|| t0.elapsed());
                    }
                    hasher.write(&body);
                    body_len += body.len();
                }
                None => continue,
            }
            chunk = &[];
        }
        if !chunk.is_empty() {
            first.get_or_insert_with(|| t0.elapsed());
            hasher.write(chunk);
            body_len += chunk.len();
        }
    }
    let last = t0.elapsed();
    let head = String::from_utf8_lossy(&head).into_owned();
    let status_line = head.lines().next().unwrap_or("").to_string();
    let cs = head
        .lines()
        .find_map(|l| l.strip_prefix("X-Cache-Status: "))
        .unwrap_or("-")
        .to_string();
    (
        status_line,
        cs,
        body_len,
        hasher.finish(),
        first.unwrap_or(last),
        last,
    )
}

/// Every regular file under `dir`, with its size.
pub fn files(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        // A temp file may be renamed or removed between the listing and this call (the
        // server is running): what is gone is not listed.
        let Ok(md) = e.metadata() else {
            continue;
        };
        if md.is_dir() {
            out.extend(files(&e.path()));
        } else {
            out.push((e.path().to_string_lossy().into_owned(), md.len()));
        }
    }
    out
}

/// [`files`] without temp files (fills in progress, and the spare temp files a cache
/// keeps in its root once it has had a miss): the stored objects.
pub fn object_files(dir: &std::path::Path) -> Vec<(String, u64)> {
    files(dir)
        .into_iter()
        .filter(|(p, _)| !p.contains(".tmp."))
        .collect()
}

/// Writes back and drops the pages of every file under `dir`; true when the kernel
/// really dropped them all (a tmpfs cannot: its pages are the file). It checks with
/// mincore(2), which never starts a read: a RWF_NOWAIT probe would start readahead of
/// the very page it finds missing, and on a fast disk that page is back before the
/// test's request arrives.
pub fn evict(dir: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let mut all = true;
    for (path, _) in files(dir) {
        // A temp file renamed since the listing: its object is listed under its name.
        let Ok(f) = std::fs::File::open(&path) else {
            continue;
        };
        f.sync_all().unwrap();
        // SAFETY: a valid open fd; fadvise takes no pointers.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0, "fadvise {path}");
        all &= !resident_pages(&f).contains(&true);
    }
    all
}

/// Whether each page of `f` is in the page cache: mincore(2) over a mapping, which
/// (unlike a RWF_NOWAIT read) never starts readahead. Empty for an empty file.
pub fn resident_pages(f: &std::fs::File) -> Vec<bool> {
    use std::os::fd::AsRawFd;
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return Vec::new();
    }
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: a read-only shared mapping of a file we hold open, unmapped below; only
    // mincore looks at it, nothing dereferences it. `vec` has one byte per page.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let r = libc::mincore(p, len, vec.as_mut_ptr());
        libc::munmap(p, len);
        assert_eq!(r, 0);
    }
    vec.iter().map(|b| b & 1 == 1).collect()
}

/// `edgecache -t` on `text` written to a file: (exit code, stderr, the file's path).
pub fn check_config(text: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let (code, stderr) = config_test(&path);
    (code, stderr, path.display().to_string())
}

/// `edgecache -t -c DIR/edgecache.toml` holding `text`, with `files` (name, contents)
/// beside it: (exit code, stderr, DIR).
pub fn check_config_in_dir(text: &str, files: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    for (name, contents) in files {
        std::fs::write(dir.path().join(name), contents).unwrap();
    }
    let path = dir.path().join("edgecache.toml");
    std::fs::write(&path, text).unwrap();
    let (code, stderr) = config_test(&path);
    (code, stderr, dir.path().display().to_string())
}

/// `edgecache -t -c path`: (exit code, stderr).
fn config_test(path: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(bin("edgecache"))
        .args(["-t", "-c"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of a series in a `/metrics` text: a family without labels, or one series
/// named with its labels (`name{coding="gzip"}`).
pub fn metric_in(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// One request on a connection the server closes after it; returns the status and the
/// body bytes received, and whether the body was complete (a cut response is not
/// wrong bytes: the client sees it is short).
pub fn get_closing(addr: SocketAddr, path: &str) -> (u16, Vec<u8>, bool, Option<String>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The same Host as edge_testkit's requests: the same cache key.
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw); // a reset ends it too
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (0, Vec::new(), false, None);
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head[9..12].parse().unwrap();
    let header = |n: &str| {
        head.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(n)))
            .map(|(_, v)| v.trim().to_string())
    };
    let len: usize = header("content-length").unwrap().parse().unwrap();
    let body = raw[end + 4..].to_vec();
    let complete = body.len() == len;
    (status, body, complete, header("x-checksum"))
}

/// Cuts a stored file to half its length under the running server (a disk that lost
/// writes, or an operator's mistake), for the tests that a cut object is never served
/// whole.
pub fn truncate_half(file: &std::path::Path) {
    let len = std::fs::metadata(file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
}
