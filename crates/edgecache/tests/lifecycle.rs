//! The command line, the embedded default config, graceful and fast stops, reload and log
//! reopen.

mod common;
use common::*;
use edge_testkit::{bin, get, Client, Proc};
use std::process::Command;
use std::time::Duration;

#[test]
fn dash_t_accepts_a_good_file_and_rejects_a_bad_one_with_file_line_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[[listen]]\naddr = \"127.0.0.1:1\"\n").unwrap();
    let out = Command::new(bin("edgecache"))
        .args(["-t", "-c"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "workers = 1\n\nkeepalive_timeout = \"soon\"\n[[listen]]\naddr = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let out = Command::new(bin("edgecache"))
        .args(["-t", "-c"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:3: keepalive_timeout:", bad.display())),
        "{err}"
    );

    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "[[listen]]\naddr = \"127.0.0.1:1\"\nbaclog = 5\n").unwrap();
    let out = Command::new(bin("edgecache"))
        .args(["-t", "-c"])
        .arg(&unknown)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":3: listen.baclog: unknown key"), "{err}");

    // A bad config never opens a socket: running it (not -t) also exits 2.
    let out = Command::new(bin("edgecache"))
        .arg("-c")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin("edgecache"))
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin("edgecache")).arg("-V").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("edgecache"));
}

#[test]
fn bind_failure_is_exit_1_with_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("accept = \"shared\"\n[[listen]]\naddr = \"{addr}\"\n"),
    )
    .unwrap();
    let out = Command::new(bin("edgecache"))
        .arg("-c")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&addr.to_string()));
}

/// Waits until the server has sent a request upstream (`upstream_requests` in /status):
/// the client's request is in flight, not in a socket queue.
fn wait_upstream_request(admin: std::net::SocketAddr) {
    let every = Duration::from_millis(20);
    common::wait_status_at_least(admin, "upstream_requests", 1, every, "no request upstream");
}

/// SIGQUIT (nginx's graceful stop): a request in flight is answered whole, then the
/// process exits 0 and no longer accepts.
#[test]
fn graceful_stop_finishes_the_request_in_flight() {
    let (_o, oaddr) = origin();
    let (mut e, addr, admin) = edgecache(&proxy_config(oaddr, "shutdown_timeout = \"20s\"", ""));
    let t = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        c.get("/obj/1m/9?delay_ms=3000", &[])
    });
    wait_upstream_request(admin);
    e.signal("QUIT");
    let r = t.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 1 << 20);
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "a draining server closes after the response"
    );
    assert_eq!(e.wait_exit(Duration::from_secs(10)), Some(0));
    // And it no longer accepts.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// SIGTERM (nginx's fast stop): the process does not wait for a slow request (the
/// origin answers after 10 s; shutdown_timeout is 30 s): after a short linger the
/// connection is closed without a response and the process exits 0.
#[test]
fn fast_stop_cuts_a_slow_request_and_exits() {
    use std::io::Read;
    let (_o, oaddr) = origin();
    let (mut e, addr, admin) = edgecache(&proxy_config(oaddr, "shutdown_timeout = \"30s\"", ""));
    let t = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        c.set_read_timeout(Duration::from_secs(30));
        c.send(b"GET /obj/1m/9?delay_ms=10000 HTTP/1.1\r\nHost: test\r\n\r\n");
        // Until the server closes: EOF or a reset, never the read timeout.
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => return Ok(got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(got),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    });
    wait_upstream_request(admin);
    e.signal("TERM");
    // Well before the origin's 10 s (the linger is 1 s).
    assert_eq!(e.wait_exit(Duration::from_secs(8)), Some(0));
    let got = t
        .join()
        .unwrap()
        .expect("the connection is closed, not left open");
    assert!(
        got.is_empty(),
        "cut before any response: {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        e.stderr().contains("1 connection(s) still open"),
        "{}",
        e.stderr()
    );
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// A SIGTERM during a graceful stop makes it a fast one (as with nginx).
#[test]
fn sigterm_during_a_graceful_stop_makes_it_fast() {
    let (_o, oaddr) = origin();
    let (mut e, addr, admin) = edgecache(&proxy_config(oaddr, "shutdown_timeout = \"30s\"", ""));
    let t = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        c.set_read_timeout(Duration::from_secs(30));
        c.send(b"GET /obj/1m/9?delay_ms=10000 HTTP/1.1\r\nHost: test\r\n\r\n");
        c.read_to_close()
    });
    wait_upstream_request(admin);
    e.signal("QUIT");
    std::thread::sleep(Duration::from_millis(300));
    e.signal("TERM");
    assert_eq!(e.wait_exit(Duration::from_secs(8)), Some(0));
    assert!(t.join().unwrap().is_empty(), "cut before any response");
}

#[test]
fn idle_connections_do_not_delay_a_stop() {
    let (_o, oaddr) = origin();
    let (mut e, addr, _) = edgecache(&proxy_config(oaddr, "shutdown_timeout = \"30s\"", ""));
    let mut idle = Client::connect(addr);
    assert_eq!(idle.get("/obj/10/1", &[]).status, 200);
    let start = std::time::Instant::now();
    e.signal("INT");
    assert_eq!(e.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// An idle keep-alive connection leaves its task after a grace period and the worker
/// keeps only its socket ("parked", counted in /status); a request on it later is served
/// as on any keep-alive connection, and a stop closes it at once.
#[test]
fn parked_idle_connections_resume_and_do_not_delay_a_stop() {
    let (_o, oaddr) = origin();
    let cfg = proxy_config(oaddr, "shutdown_timeout = \"30s\"", "");
    let (mut e, addr, admin) = edgecache(&cfg);
    let mut idle = Client::connect(addr);
    let first = idle.get("/obj/1k/1", &[]);
    assert_eq!(first.status, 200);
    // Parked after 300 ms of silence; /status counts it within a second more.
    let every = Duration::from_millis(100);
    common::wait_status_at_least(admin, "parked", 1, every, "never parked");
    // Resumed: two requests on the same connection, bytes as before.
    let again = idle.get("/obj/1k/1", &[]);
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);
    assert_eq!(idle.get("/obj/1k/2", &[]).status, 200);
    // Parked again, then a stop: no waiting for the idle connection.
    std::thread::sleep(Duration::from_millis(1500));
    let start = std::time::Instant::now();
    e.signal("INT");
    assert_eq!(e.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(idle.is_closed());
}

/// `edgecache ARGS` under a stock shell's descriptor limit: `ulimit -n 1024` (soft and
/// hard), so that raising the soft limit to the hard one gains nothing.
fn spawn_under_1024_fds(args: &[&str]) -> Proc {
    let edgecache = bin("edgecache");
    let mut argv = vec![
        "-c",
        "ulimit -n 1024 && exec \"$0\" \"$@\"",
        edgecache.to_str().unwrap(),
    ];
    argv.extend_from_slice(args);
    Proc::spawn(std::path::Path::new("/bin/sh"), &argv)
}

#[test]
fn embedded_default_serves_the_demo_origin() {
    // The README's first command (`./run`): no -c, the demo origin in-process on :8081,
    // on a stock machine's 1024 descriptors.
    let mut p = spawn_under_1024_fds(&[]);
    p.wait_port("127.0.0.1:8080".parse().unwrap(), START);
    let r = get("127.0.0.1:8080".parse().unwrap(), "/obj/10k/1", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 10240);
    // No worker_connections in it: sized to the limit (1 worker, the default open file
    // cache), shown in /status, and not a word of warning.
    let status = get_text("127.0.0.1:9090".parse().unwrap(), "/status");
    assert_eq!(
        json_number(&status, "worker_connections"),
        Some(edge_core::server::nofile::auto(1024, 1, 1000) as u64),
        "{status}"
    );
    p.signal("TERM");
    assert_eq!(p.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(p.stderr(), "", "a default run prints nothing");
}

/// A worker_connections the user set is kept, and warned about when the descriptor
/// limit cannot carry it; the same config without it starts silently.
#[test]
fn only_a_configured_worker_connections_is_warned_about() {
    let (_o, oaddr) = origin();
    for (extra, warns) in [("worker_connections = 65536", true), ("", false)] {
        let dir = tempfile::tempdir().unwrap();
        let (addr, admin) = (edge_testkit::free_addr(), edge_testkit::free_addr());
        let text = proxy_config(oaddr, extra, "")
            .replace("{listen}", &addr.to_string())
            .replace("{admin}", &admin.to_string());
        let cfg = dir.path().join("edgecache.toml");
        std::fs::write(&cfg, text).unwrap();
        let mut p = spawn_under_1024_fds(&["-c", cfg.to_str().unwrap()]);
        p.wait_port(admin, START);
        assert_eq!(get(addr, "/obj/1k/1", &[]).status, 200);
        let status = get_text(admin, "/status");
        let expect = if warns {
            65536
        } else {
            edge_core::server::nofile::auto(1024, 1, 1000)
        };
        assert_eq!(
            json_number(&status, "worker_connections"),
            Some(expect as u64),
            "{status}"
        );
        p.signal("TERM");
        assert_eq!(p.wait_exit(Duration::from_secs(10)), Some(0));
        let err = p.stderr();
        if warns {
            assert!(
                err.contains("descriptor limit 1024 is below") && err.contains("WARN"),
                "{err}"
            );
        } else {
            assert!(!err.contains("WARN"), "{err}");
        }
    }
}

#[test]
fn sighup_reloads_and_a_bad_reload_keeps_the_old_config() {
    let s = ReturnServer::start("", "one");
    assert_eq!(get(s.listen, "/", &[]).body, b"one");
    assert!(s.reload_to("two"), "reload did not take effect");
    std::fs::write(&s.cfg, "this is not toml [").unwrap();
    s.p.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        get(s.listen, "/", &[]).body,
        b"two",
        "a bad reload keeps the running config"
    );
    assert!(s.p.stderr().contains("reload failed"), "{}", s.p.stderr());
}

#[test]
fn access_log_lines_and_sigusr1_reopen() {
    let (_o, oaddr) = origin();
    let (p, addr, _) = edgecache(&proxy_config(
        oaddr,
        "access_log = { path = \"logs/access.log\", buffer = \"64k\", flush = \"100ms\" }",
        "",
    ));
    let r = get(
        addr,
        "/obj/1k/1?x=\"y",
        &["User-Agent: test-agent", "Referer: http://r/"],
    );
    assert_eq!(r.status, 200);
    let log = p.dir().join("logs/access.log");
    let mut text = String::new();
    for _ in 0..50 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if !text.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = text.lines().next().expect("one access log line");
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(
        line.contains("\"GET /obj/1k/1?x=\\x22y HTTP/1.1\" 200 1024 \"http://r/\" \"test-agent\" "),
        "{line}"
    );
    assert!(line.ends_with(" -"), "cache status field: {line}");
    // logrotate: move the file away, SIGUSR1, the next line goes to a new file.
    std::fs::rename(&log, p.dir().join("logs/access.log.1")).unwrap();
    p.signal("USR1");
    std::thread::sleep(Duration::from_millis(200));
    get(addr, "/obj/1k/2", &[]);
    let mut reopened = false;
    for _ in 0..50 {
        if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("/obj/1k/2")) {
            reopened = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(reopened, "SIGUSR1 did not reopen the access log");
}

#[test]
fn every_accept_strategy_serves_and_stops_cleanly() {
    for accept in ["reuseport", "shared", "blocking", "mutex", "exclusive"] {
        let mut s = ReturnServer::start(&format!("workers = 2\naccept = \"{accept}\""), accept);
        for _ in 0..20 {
            let r = get(s.listen, "/", &["Connection: close"]);
            assert_eq!(r.body, accept.as_bytes(), "accept = {accept}");
        }
        s.p.signal("TERM");
        assert_eq!(
            s.p.wait_exit(Duration::from_secs(10)),
            Some(0),
            "accept = {accept}: {}",
            s.p.stderr()
        );
    }
}

#[test]
fn reloads_under_load_fail_no_request() {
    let mut s = ReturnServer::start("workers = 2", "a");
    let json = s.cfg.with_file_name("load.json");
    let mut load = Command::new(bin("edgeload"))
        .args(["-t", "1", "-c", "8", "-d", "3s", "--json"])
        .arg(&json)
        .arg(format!("http://{}/", s.listen))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..10 {
        s.write(if i % 2 == 0 { "b" } else { "a" });
        s.p.signal("HUP");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(load.wait().unwrap().success());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let requests = v["requests"].as_u64().unwrap();
    assert!(requests > 100, "load ran: {v}");
    for (kind, n) in v["errors"].as_object().unwrap() {
        assert_eq!(n.as_u64(), Some(0), "{kind} errors during reloads: {v}");
    }
    let statuses = v["status"].as_object().unwrap();
    assert_eq!(
        statuses.keys().collect::<Vec<_>>(),
        vec!["200"],
        "only 200s: {v}"
    );
    // The reloads were applied, not ignored: a last one is visible at once.
    assert!(
        s.reload_to("final"),
        "the last reload did not take effect; stderr: {}",
        s.p.stderr()
    );
    s.p.signal("TERM");
    assert_eq!(s.p.wait_exit(Duration::from_secs(10)), Some(0));
}

/// edgecache whose only location returns a body, from a config file the test rewrites
/// and reloads. `top` holds extra top-level keys (workers, accept...).
struct ReturnServer {
    p: Proc,
    listen: std::net::SocketAddr,
    cfg: std::path::PathBuf,
    top: String,
    _dir: tempfile::TempDir,
}

impl ReturnServer {
    fn start(top: &str, body: &str) -> ReturnServer {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.toml");
        let listen = edge_testkit::free_addr();
        write_return_config(&cfg, top, listen, body);
        let cfg_s = cfg.to_string_lossy().into_owned();
        let mut p = Proc::spawn(&bin("edgecache"), &["-c", &cfg_s]);
        p.wait_port(listen, START);
        ReturnServer {
            p,
            listen,
            cfg,
            top: top.to_string(),
            _dir: dir,
        }
    }

    fn write(&self, body: &str) {
        write_return_config(&self.cfg, &self.top, self.listen, body);
    }

    /// Rewrites the body, sends SIGHUP, and waits (up to 2 s) until `/` answers it.
    fn reload_to(&self, body: &str) -> bool {
        self.write(body);
        self.p.signal("HUP");
        for _ in 0..100 {
            if get(self.listen, "/", &[]).body == body.as_bytes() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn write_return_config(
    path: &std::path::Path,
    top: &str,
    listen: std::net::SocketAddr,
    body: &str,
) {
    let text = format!(
        "{top}\n[[listen]]\naddr = \"{listen}\"\n[[location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"{body}\" }}\n"
    );
    std::fs::write(path, text).unwrap();
}
