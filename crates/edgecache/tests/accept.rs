//! Accept strategies, end to end: every strategy (with and without `multi_accept`)
//! serves new connections without error, `blocking` wakes its acceptors in FIFO order,
//! `reuseport_steering = "cpu"` serves and reports itself, and `return.burn_us` spends
//! what it says. Per-worker counts come from the admin `/status`.

mod common;

use edge_testkit::{bin, get, Proc};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

struct Server {
    p: Proc,
    listen: SocketAddr,
    admin: SocketAddr,
}

/// edgecache with one `return` location (`ret` is the inline table's extra keys) and an
/// admin listener; `top` holds top-level keys.
fn start(top: &str, ret: &str) -> Server {
    start_with(top, ret, "")
}

/// [`start`] with extra keys for the `[[listen]]` table.
fn start_with(top: &str, ret: &str, listen_extra: &str) -> Server {
    let (p, listen, admin) = common::edgecache(&format!(
        "{top}\nerror_log = {{ path = \"error.log\" }}\naccess_log = \"off\"\n\
         [[listen]]\naddr = \"{{listen}}\"\n{listen_extra}\n\
         [[location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"ok\"{ret} }}\n\
         [admin]\nlisten = \"{{admin}}\"\nallow = [\"127.0.0.1/32\"]\n"
    ));
    Server { p, listen, admin }
}

fn status(s: &Server) -> serde_json::Value {
    serde_json::from_slice(&get(s.admin, "/status", &[]).body).unwrap()
}

fn accepted_per_worker(s: &Server) -> Vec<u64> {
    status(s)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["accepted"].as_u64().unwrap())
        .collect()
}

/// Every strategy, with and without `multi_accept`, and with the listener's
/// `deferred` on (the default: the request is in when the connection is accepted, so
/// it is answered without registering the socket) and off (the first read may find
/// nothing and wait).
#[test]
fn every_strategy_serves_a_thousand_new_connections() {
    for accept in ["reuseport", "shared", "blocking", "mutex", "exclusive"] {
        for (multi, deferred) in [(false, true), (true, true), (false, false)] {
            let s = start_with(
                &format!("workers = 2\naccept = \"{accept}\"\nmulti_accept = {multi}"),
                "",
                &format!("deferred = {deferred}"),
            );
            let json = s.p.dir().join("load.json");
            let out = Command::new(bin("edgeload"))
                .args([
                    "-c",
                    "8",
                    "-d",
                    "30s",
                    "--requests",
                    "1000",
                    "--no-keepalive",
                    "--json",
                ])
                .arg(&json)
                .arg(format!("http://{}/", s.listen))
                .output()
                .unwrap();
            let what = format!("accept = {accept}, multi_accept = {multi}, deferred = {deferred}");
            assert!(
                out.status.success(),
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
            assert_eq!(v["status"]["200"].as_u64(), Some(1000), "{what}: {v}");
            for (kind, n) in v["errors"].as_object().unwrap() {
                assert_eq!(n.as_u64(), Some(0), "{what}: {kind} errors: {v}");
            }
            let st = status(&s);
            assert_eq!(st["accept"], accept, "{what}");
            assert_eq!(st["multi_accept"], multi, "{what}");
            let per: u64 = accepted_per_worker(&s).iter().sum();
            assert!(per >= 1000, "{what}: {per} accepted over the workers");
            assert_eq!(Some(per), st["totals"]["accepted"].as_u64(), "{what}");
        }
    }
}

/// New connections whose requests do not arrive whole at once: a head split over two
/// packets 100 ms apart (the first read gets half, the socket must then wait), two
/// pipelined requests, and a kept-alive connection's second request after an idle
/// pause (the connection is parked and resumed). With `deferred` on and off.
#[test]
fn new_connections_that_must_wait_are_served() {
    use std::io::{Read, Write};
    for deferred in [true, false] {
        let s = start_with("workers = 1", "", &format!("deferred = {deferred}"));
        let read_responses = |c: &mut std::net::TcpStream, n: usize| {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while got.windows(4).filter(|w| w == b"\r\n\r\n").count() < n || !got.ends_with(b"ok") {
                let k = c.read(&mut buf).expect("a response within 10 s");
                assert!(k > 0, "deferred = {deferred}: closed early: {got:?}");
                got.extend_from_slice(&buf[..k]);
            }
            String::from_utf8(got).unwrap()
        };
        // Split head.
        let mut c = std::net::TcpStream::connect(s.listen).unwrap();
        c.write_all(b"GET /a HTTP/1.1\r\nHo").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        c.write_all(b"st: x\r\nConnection: close\r\n\r\n").unwrap();
        let r = read_responses(&mut c, 1);
        assert!(r.starts_with("HTTP/1.1 200"), "deferred = {deferred}: {r}");
        // Pipelined, then the connection stays open for a third after a pause.
        let mut c = std::net::TcpStream::connect(s.listen).unwrap();
        c.write_all(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = read_responses(&mut c, 2);
        assert_eq!(r.matches("HTTP/1.1 200").count(), 2, "{r}");
        std::thread::sleep(Duration::from_millis(300));
        c.write_all(b"GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let r = read_responses(&mut c, 1);
        assert!(r.starts_with("HTTP/1.1 200"), "deferred = {deferred}: {r}");
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "closed after Connection: close");
    }
}

/// Seed 004: threads blocked in accept() are woken in FIFO order, so sequential
/// connections go round the workers.
#[test]
fn blocking_wakes_acceptors_in_fifo_order() {
    let s = start("workers = 3\naccept = \"blocking\"", "");
    let one = || {
        let r = get(s.listen, "/", &["Connection: close"]);
        assert_eq!(r.status, 200);
        // The next connection only once this one's acceptor is back in accept().
        std::thread::sleep(Duration::from_millis(50));
    };
    // Until every acceptor has been round once (startup order is the threads').
    for _ in 0..3 {
        one();
    }
    let before = accepted_per_worker(&s);
    for _ in 0..6 {
        one();
    }
    let after = accepted_per_worker(&s);
    let spread: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(spread, [2, 2, 2], "before {before:?}, after {after:?}");
}

/// Seed 004's point: a worker busy with CPU-heavy work is not accepting, so new
/// connections go to the free one. For the strategies that accept on threads, each
/// acceptor waits for its worker to come round its loop before it accepts again: while
/// one worker burns a second on a request, every short request is served by the other,
/// before the long one ends.
#[test]
fn threaded_acceptors_leave_new_connections_to_free_workers() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for strategy in ["blocking", "mutex", "exclusive"] {
        let slow = "[[location]]\nprefix = \"/slow\"\nreturn = { status = 200, body = \"slow\", burn_us = 1000000 }\n";
        let s = start_with(&format!("workers = 2\naccept = \"{strategy}\""), "", slow);
        // Every acceptor has been round once.
        for _ in 0..4 {
            assert_eq!(get(s.listen, "/", &["Connection: close"]).status, 200);
        }
        // The warm-up connections are closed on the server's side too.
        let idle = |st: &serde_json::Value| {
            st["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["active"].as_u64() == Some(0))
        };
        let t0 = Instant::now();
        while !idle(&status(&s)) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "connections left open"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let done = Arc::new(AtomicBool::new(false));
        let long = {
            let (done, addr) = (done.clone(), s.listen);
            std::thread::spawn(move || {
                let r = get(addr, "/slow", &["Connection: close"]);
                done.store(true, Ordering::SeqCst);
                r
            })
        };
        // Until the slow request is on a worker (its connection is the only one open).
        let busy = loop {
            let st = status(&s);
            let w = st["workers"].as_array().unwrap();
            if let Some(i) = w.iter().position(|w| w["active"].as_u64() == Some(1)) {
                break i;
            }
            assert!(
                !long.is_finished(),
                "{strategy}: the slow request went by unseen"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let before = accepted_per_worker(&s);
        for _ in 0..6 {
            let r = get(s.listen, "/", &["Connection: close"]);
            assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
        }
        let answered_first = !done.load(Ordering::SeqCst);
        let after = accepted_per_worker(&s);
        let r = long.join().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"slow"[..]));
        assert!(
            answered_first,
            "{strategy}: short requests waited for the busy worker {busy}: {before:?} -> {after:?}"
        );
        assert_eq!(
            after[busy], before[busy],
            "{strategy}: the busy worker {busy} took none: {before:?} -> {after:?}"
        );
    }
}

#[test]
fn reuseport_steering_by_cpu_serves_and_shows_in_status() {
    let s = start(
        "workers = 2\naccept = \"reuseport\"\nworker_cpu_affinity = \"auto\"\nreuseport_steering = \"cpu\"",
        "",
    );
    for _ in 0..50 {
        assert_eq!(get(s.listen, "/", &["Connection: close"]).status, 200);
    }
    let st = status(&s);
    assert_eq!(st["reuseport_steering"], "cpu");
    let cpus: Vec<_> = st["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["cpu"].clone())
        .collect();
    assert!(
        cpus.iter().all(|c| c.is_u64()),
        "every worker pinned: {cpus:?}"
    );
    // 50, and the start-up probe's connection.
    assert!(accepted_per_worker(&s).iter().sum::<u64>() >= 50);
    let metrics = String::from_utf8(get(s.admin, "/metrics", &[]).body).unwrap();
    assert!(
        metrics.contains("edgecache_worker_connections_accepted_total{worker=\"0\"}"),
        "{metrics}"
    );
}

/// `burn_us` holds the worker for at least that long (a lower bound: the burn loops on
/// the clock, so no machine can make it shorter).
#[test]
fn burn_us_spends_its_time_on_the_worker() {
    let s = start("workers = 1", ", burn_us = 100000");
    let t0 = Instant::now();
    let r = get(s.listen, "/", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
    assert!(
        t0.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    drop(s.p);
}
