//! `limit_req` and `limit_conn` against the real binary: bursts with and without
//! `nodelay`, `delay`, the status, dry runs in `/metrics` and the access log, several
//! zones, a limit held for the node over two `reuseport` workers, connection counts per
//! request and at accept (a slow-header flood from one address cut while another is
//! served), HTTP/2 connections counted once, zones kept across a reload, and `-t`.
//!
//! Every check counts answers (no timing): rates are slow enough (1 r/min, 1 r/s) that
//! the counts cannot change within a test.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A config with one `return 200` location at `/` and one at `/two`, the zones and
/// keys of `top` (top-level keys first) and `tables`, and `loc` inside the `/`
/// location, `two` inside `/two`.
fn config(top: &str, tables: &str, loc: &str, two: &str) -> String {
    format!(
        "worker_cpu_affinity = \"off\"\n{top}\n\
         [[listen]]\naddr = \"{{listen}}\"\n\
         {tables}\n\
         [[location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"ok\" }}\n{loc}\n\
         [[location]]\nprefix = \"/two\"\nreturn = {{ status = 200, body = \"two\" }}\n{two}\n\
         [admin]\nlisten = \"{{admin}}\"\n"
    )
}

const PERIP: &str = r#"[[limit_req_zone]]
name = "perip"
key = "$binary_remote_addr"
rate = "1r/m"
size = "1m"
"#;

/// Statuses of `n` requests for `path` on one keep-alive connection.
fn statuses(addr: SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let mut c = edge_testkit::Client::connect(addr);
    (0..n).map(|_| c.get(path, &[]).status).collect()
}

fn count(v: &[u16], status: u16) -> usize {
    v.iter().filter(|s| **s == status).count()
}

fn metric(admin: SocketAddr, series: &str) -> u64 {
    let text = get_text(admin, "/metrics");
    metric_in(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

fn req_total(admin: SocketAddr, zone: &str, result: &str) -> u64 {
    metric(
        admin,
        &format!("edgecache_limit_req_total{{zone=\"{zone}\",result=\"{result}\"}}"),
    )
}

fn conn_total(admin: SocketAddr, zone: &str, result: &str) -> u64 {
    metric(
        admin,
        &format!("edgecache_limit_conn_total{{zone=\"{zone}\",result=\"{result}\"}}"),
    )
}

/// Whether a new connection's `GET path` is answered 200 (false when it is refused
/// or closed unanswered).
fn served(addr: SocketAddr, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    read_all(&mut s).starts_with(b"HTTP/1.1 200 ")
}

/// Polls `check` every 20 ms until it holds; fails after 10 s saying `what`.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines of a log file once it has at least `n` (or after 10 s).
fn log_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    eventually(&format!("{n} lines in {}", path.display()), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        lines = text.lines().map(str::to_owned).collect();
        lines.len() >= n
    });
    lines
}

#[test]
fn a_burst_with_nodelay_passes_burst_plus_one_then_refuses_with_429() {
    let cfg = config(
        "workers = 1",
        PERIP,
        "limit_req = [{ zone = \"perip\", burst = 5, nodelay = true }]",
        "",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let mut c = edge_testkit::Client::connect(addr);
    let got: Vec<edge_testkit::Response> = (0..20).map(|_| c.get("/", &[])).collect();
    let st: Vec<u16> = got.iter().map(|r| r.status).collect();
    assert_eq!(&st[..6], &[200; 6], "{st:?}");
    assert_eq!(&st[6..], &[429; 14], "{st:?}");
    // A refused request leaves its connection open (the same one answered all 20).
    assert_eq!(got[19].header("connection"), None);
    assert!(String::from_utf8_lossy(&got[19].body).contains("429 Too Many Requests"));
    // Another location without limit_req: not limited.
    assert_eq!(count(&statuses(addr, "/two", 10), 200), 10);
    assert_eq!(req_total(admin, "perip", "passed"), 6);
    assert_eq!(req_total(admin, "perip", "rejected"), 14);
    assert_eq!(req_total(admin, "perip", "delayed"), 0);
}

/// Two zones on one location: both must take a request; the one that refuses gives
/// its status, and the other gives back what it took (as nginx accounts).
#[test]
fn several_zones_all_must_pass_and_the_refusing_zone_gives_the_status() {
    let tables = format!(
        "{PERIP}[[limit_req_zone]]\nname = \"tight\"\nkey = \"$binary_remote_addr\"\nrate = \"1r/m\"\n"
    );
    let cfg = config(
        "workers = 1",
        &tables,
        "limit_req = [{ zone = \"perip\", burst = 5, nodelay = true }]",
        "limit_req = [{ zone = \"perip\", burst = 5, nodelay = true }, { zone = \"tight\", burst = 2, nodelay = true, status = 503 }]",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let two = statuses(addr, "/two", 10);
    assert_eq!(&two[..3], &[200; 3], "{two:?}");
    // All refused by `tight` (503), none by `perip`: it gave back each it took.
    assert_eq!(&two[3..], &[503; 7], "{two:?}");
    assert_eq!(req_total(admin, "perip", "passed"), 3);
    assert_eq!(req_total(admin, "perip", "rejected"), 0);
    assert_eq!(req_total(admin, "tight", "passed"), 3);
    assert_eq!(req_total(admin, "tight", "rejected"), 7);
    // `perip` alone: 6 - 3 left.
    let one = statuses(addr, "/", 5);
    assert_eq!(one, [200, 200, 200, 429, 429]);
}

/// Without `nodelay` the burst is delayed to the rate; `delay = 1` serves one of it at
/// once. Six requests at once (within a second) at 1 r/s with burst 3: 2 served at
/// once, 2 delayed (by 1 and 2 s), 2 refused, as the access log's `$limit_req_status`
/// says too.
#[test]
fn delay_serves_part_of_the_burst_at_once_and_delays_the_rest() {
    let tables =
        "[[limit_req_zone]]\nname = \"slow\"\nkey = \"$binary_remote_addr\"\nrate = \"1r/s\"\n";
    let top = "workers = 1\naccess_log = { path = \"logs/access.log\", format = \"lim\", flush = \"50ms\" }";
    let cfg = config(
        top,
        tables,
        "limit_req = [{ zone = \"slow\", burst = 3, delay = 1 }]",
        "",
    ) + "[log_format.lim]\nformat = '$status $limit_req_status'\n";
    let (p, addr, admin) = edgecache(&cfg);
    let threads: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || statuses(addr, "/", 1)[0]))
        .collect();
    let st: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(count(&st, 200), 4, "{st:?}");
    assert_eq!(count(&st, 429), 2, "{st:?}");
    assert_eq!(req_total(admin, "slow", "passed"), 2);
    assert_eq!(req_total(admin, "slow", "delayed"), 2);
    assert_eq!(req_total(admin, "slow", "rejected"), 2);
    let mut lines = log_lines(&p.dir().join("logs/access.log"), 6);
    lines.sort();
    assert_eq!(
        lines,
        [
            "200 DELAYED",
            "200 DELAYED",
            "200 PASSED",
            "200 PASSED",
            "429 REJECTED",
            "429 REJECTED"
        ]
    );
}

/// `hold`: a refused request's answer waits until a request of its key would pass, so a
/// client that sends its next request as soon as it is answered is answered at the
/// rate: on one keep-alive connection every refusal is followed by a pass. Without it
/// (the control, on another location) the same client gets a refusal after refusal.
#[test]
fn a_held_refusal_answers_a_fast_client_at_the_rate() {
    let tables = "[[limit_req_zone]]\nname = \"slow\"\nkey = \"$binary_remote_addr\"\nrate = \"2r/s\"\n\
                  [[limit_req_zone]]\nname = \"other\"\nkey = \"$binary_remote_addr\"\nrate = \"2r/s\"\n";
    let cfg = config(
        "workers = 1",
        tables,
        "limit_req = [{ zone = \"slow\", hold = \"1s\" }]",
        "limit_req = [{ zone = \"other\" }]",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let held = statuses(addr, "/", 6);
    assert_eq!(
        held,
        [200, 429, 200, 429, 200, 429],
        "held: answered at the rate"
    );
    assert_eq!(req_total(admin, "slow", "rejected"), 3);
    assert_eq!(req_total(admin, "slow", "passed"), 3);
    let at_once = statuses(addr, "/two", 6);
    assert_eq!(at_once, [200, 429, 429, 429, 429, 429], "not held: at once");
}

/// `dry_run`: everything is served; `/metrics` and the access log say what would have
/// been refused.
#[test]
fn a_dry_run_refuses_nothing_and_counts_and_logs_what_it_would() {
    let top = "workers = 1\naccess_log = { path = \"logs/access.log\", format = \"lim\", flush = \"50ms\" }";
    let cfg = config(
        top,
        PERIP,
        "limit_req = [{ zone = \"perip\", burst = 1, nodelay = true, dry_run = true }]",
        "",
    ) + "[log_format.lim]\nformat = '$status $limit_req_status'\n";
    let (p, addr, admin) = edgecache(&cfg);
    assert_eq!(statuses(addr, "/", 10), [200; 10]);
    assert_eq!(req_total(admin, "perip", "passed"), 2);
    assert_eq!(req_total(admin, "perip", "rejected_dry_run"), 8);
    assert_eq!(req_total(admin, "perip", "rejected"), 0);
    let lines = log_lines(&p.dir().join("logs/access.log"), 10);
    assert_eq!(&lines[..2], &["200 PASSED", "200 PASSED"]);
    assert!(
        lines[2..].iter().all(|l| l == "200 REJECTED_DRY_RUN"),
        "{lines:?}"
    );
    // A location without limit_req logs `-`.
    statuses(addr, "/two", 1);
    assert_eq!(log_lines(&p.dir().join("logs/access.log"), 11)[10], "200 -");
}

/// Two workers on `reuseport` sockets: one client's connections land on both, and the
/// burst it gets is the node's, burst + 1, not twice that.
#[test]
fn the_limit_holds_for_the_node_over_two_reuseport_workers() {
    let cfg = config(
        "workers = 2\naccept = \"reuseport\"",
        PERIP,
        "limit_req = [{ zone = \"perip\", burst = 10, nodelay = true }]",
        "",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| {
                        // A connection per request: new source ports, spread over both
                        // workers by the kernel.
                        let r = edge_testkit::get(addr, "/", &["Connection: close"]);
                        r.status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let st: Vec<u16> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(count(&st, 200), 11, "{st:?}");
    assert_eq!(count(&st, 429), 49, "{st:?}");
    let status: serde_json::Value = serde_json::from_str(&get_text(admin, "/status")).unwrap();
    let served: Vec<u64> = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(served.len(), 2);
    assert!(
        served.iter().all(|&n| n > 0),
        "one worker took every connection: {served:?}"
    );
    assert_eq!(req_total(admin, "perip", "passed"), 11);
}

const ADDR_ZONE: &str = r#"[[limit_conn_zone]]
name = "addr"
key = "$binary_remote_addr"
size = "1m"
"#;

/// A location's `limit_conn`: counted at a connection's first request there, held while
/// it stays open, the connection over the limit answered 429 and closed.
#[test]
fn limit_conn_counts_open_connections_and_frees_them_on_close() {
    let cfg = config(
        "workers = 2",
        ADDR_ZONE,
        "",
        "limit_conn = { zone = \"addr\", max = 2 }",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let mut a = edge_testkit::Client::connect(addr);
    let mut b = edge_testkit::Client::connect(addr);
    assert_eq!(a.get("/two", &[]).status, 200);
    assert_eq!(b.get("/two", &[]).status, 200);
    // Its next requests: the same count.
    assert_eq!(a.get("/two", &[]).status, 200);
    let mut c = edge_testkit::Client::connect(addr);
    // Not limited elsewhere.
    assert_eq!(c.get("/", &[]).status, 200);
    let r = c.get("/two", &[]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed());
    assert_eq!(conn_total(admin, "addr", "rejected"), 1);
    assert_eq!(
        metric(admin, "edgecache_limit_conn_active{zone=\"addr\"}"),
        2
    );
    drop(a);
    eventually("a closed connection gives its count back", || {
        served(addr, "/two")
    });
    assert_eq!(b.get("/two", &[]).status, 200);
}

/// Reads what the server sends until it closes; None when it sends nothing within
/// 10 s.
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    // A reset (our bytes left unread) ends it too.
    let _ = s.read_to_end(&mut got);
    got
}

/// A server-level `limit_conn` keyed by the address is counted when the connection is
/// accepted: the one over the limit is closed with no response.
#[test]
fn limit_conn_at_the_server_level_closes_the_extra_connection_at_accept() {
    let cfg = config(
        "workers = 1\nlimit_conn = { zone = \"addr\", max = 2 }",
        ADDR_ZONE,
        "",
        "",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let mut a = edge_testkit::Client::connect(addr);
    let mut b = edge_testkit::Client::connect(addr);
    assert_eq!(a.get("/", &[]).status, 200);
    assert_eq!(b.get("/", &[]).status, 200);
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(
        read_all(&mut c),
        b"",
        "an over-limit connection got an answer"
    );
    assert_eq!(conn_total(admin, "addr", "rejected"), 1);
    assert_eq!(
        metric(admin, "edgecache_limit_conn_active{zone=\"addr\"}"),
        2
    );
    drop(b);
    eventually("a closed connection gives its count back", || {
        served(addr, "/")
    });
    assert_eq!(a.get("/", &[]).status, 200);
}

/// On a `proxy_protocol` listener the count is taken after the PROXY header, for the
/// client it names: two connections through the same balancer are two clients.
#[test]
fn limit_conn_at_accept_counts_the_proxy_protocol_client() {
    let cfg = config(
        "workers = 1\nlimit_conn = { zone = \"addr\", max = 1 }",
        ADDR_ZONE,
        "",
        "",
    )
    .replace(
        "addr = \"{listen}\"",
        "addr = \"{listen}\"\nproxy_protocol = true",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let open = |client: &str| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let pp = format!("PROXY TCP4 {client} 127.0.0.1 5000 80\r\n");
        s.write_all(pp.as_bytes()).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        s
    };
    let first_line = |s: &mut TcpStream| {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n") {
            match s.read(&mut byte) {
                Ok(1) => got.push(byte[0]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    let mut a = open("203.0.113.9");
    assert!(first_line(&mut a).starts_with("HTTP/1.1 200"));
    // The same client through the balancer again: over its limit, closed unanswered.
    let mut b = open("203.0.113.9");
    assert_eq!(read_all(&mut b), b"");
    // Another client through the same balancer.
    let mut c = open("203.0.113.10");
    assert!(first_line(&mut c).starts_with("HTTP/1.1 200"));
    assert_eq!(conn_total(admin, "addr", "rejected"), 1);
    assert_eq!(conn_total(admin, "addr", "passed"), 2);
}

/// A proxy that `real_ip` trusts to name its clients in `X-Forwarded-For` is not
/// counted at accept: its requests are, each for the client it names.
#[test]
fn a_trusted_proxy_is_counted_per_named_client_not_at_accept() {
    let top = "workers = 1\nlimit_conn = { zone = \"addr\", max = 1 }\n\
               real_ip = { from = [\"127.0.0.0/8\"], header = \"X-Forwarded-For\" }";
    let (_p, addr, admin) = edgecache(&config(top, ADDR_ZONE, "", ""));
    let mut a = edge_testkit::Client::connect(addr);
    let mut b = edge_testkit::Client::connect(addr);
    assert_eq!(a.get("/", &["X-Forwarded-For: 203.0.113.9"]).status, 200);
    assert_eq!(b.get("/", &["X-Forwarded-For: 203.0.113.10"]).status, 200);
    // A third connection of the proxy, for the first client: that client has one.
    let mut c = edge_testkit::Client::connect(addr);
    let r = c.get("/", &["X-Forwarded-For: 203.0.113.9"]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("connection"), Some("close"));
    // The first connection now speaks for another client: its count moves.
    assert_eq!(a.get("/", &["X-Forwarded-For: 203.0.113.11"]).status, 200);
    let mut d = edge_testkit::Client::connect(addr);
    assert_eq!(d.get("/", &["X-Forwarded-For: 203.0.113.9"]).status, 200);
    assert_eq!(
        metric(admin, "edgecache_limit_conn_active{zone=\"addr\"}"),
        3
    );
}

/// A TCP connection from `src` (another loopback address) to `to`.
fn connect_from(src: &str, to: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{src}:0").parse().unwrap()).unwrap();
        s.connect(to).await.unwrap()
    });
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// One address opens far more connections than `worker_connections` and sends each a
/// head it never finishes. `limit_conn` (top level, by address) closes all but 5 of
/// them as they are accepted, so the worker never fills and another address is served.
#[test]
fn a_slow_header_flood_from_one_address_is_cut_at_accept() {
    let cfg = config(
        "workers = 1\nworker_connections = 20\nlimit_conn = { zone = \"addr\", max = 5 }",
        ADDR_ZONE,
        "",
        "",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let mut flood = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(addr).unwrap();
        // Half a head: the request never completes.
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ")
            .unwrap();
        flood.push(s);
    }
    eventually("35 connections of the flood refused at accept", || {
        conn_total(admin, "addr", "rejected") >= 35
    });
    assert_eq!(conn_total(admin, "addr", "rejected"), 35);
    assert_eq!(
        metric(admin, "edgecache_limit_conn_active{zone=\"addr\"}"),
        5
    );
    // Another address is served while the flood holds its 5.
    let mut legit = connect_from("127.0.0.2", addr);
    legit
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let got = read_all(&mut legit);
    assert!(
        got.starts_with(b"HTTP/1.1 200 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    let status = get_text(admin, "/status");
    assert_eq!(json_number(&status, "refused"), Some(0), "{status}");
    drop(flood);
}

/// An HTTP/2 connection counts once, for all its streams; another connection of the
/// same address over the limit gets 429 on its streams.
#[test]
fn an_http2_connection_counts_once() {
    let cfg = config(
        "workers = 1",
        ADDR_ZONE,
        "",
        "limit_conn = { zone = \"addr\", max = 1 }",
    )
    .replace("addr = \"{listen}\"", "addr = \"{listen}\"\nhttp2 = true");
    let (_p, addr, admin) = edgecache(&cfg);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let open = || async {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (client, conn) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(async move {
                let _ = conn.await;
            });
            client
        };
        let get = |client: h2::client::SendRequest<bytes::Bytes>| async move {
            let req = http::Request::get("http://t/two").body(()).unwrap();
            let mut client = client.ready().await.unwrap();
            let (resp, _) = client.send_request(req, true).unwrap();
            resp.await.unwrap().status().as_u16()
        };
        let first = open().await;
        // Ten streams at once on the first connection: one count.
        let all: Vec<u16> = futures_join((0..10).map(|_| tokio::spawn(get(first.clone())))).await;
        assert_eq!(all, [200; 10]);
        let second = open().await;
        assert_eq!(get(second.clone()).await, 429);
        assert_eq!(get(first.clone()).await, 200);
    });
    assert_eq!(
        metric(admin, "edgecache_limit_conn_active{zone=\"addr\"}"),
        1
    );
    assert_eq!(conn_total(admin, "addr", "passed"), 1);
}

/// Joins spawned tasks in order.
async fn futures_join<T: 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// A reload that keeps a zone's name, key, rate and size keeps its state; one that
/// changes its rate starts it afresh.
#[test]
fn a_reload_keeps_an_unchanged_zone() {
    let cfg = |rate: &str, body: &str| {
        config(
            "workers = 1",
            &PERIP.replace("1r/m", rate),
            "limit_req = [{ zone = \"perip\", burst = 2, nodelay = true }]",
            "",
        )
        .replace("body = \"ok\"", &format!("body = \"{body}\""))
    };
    let (p, addr, admin) = edgecache(&cfg("1r/m", "one"));
    assert_eq!(statuses(addr, "/", 4), [200, 200, 200, 429]);
    reload(&p, addr, admin, &cfg("1r/m", "two"));
    let mut c = edge_testkit::Client::connect(addr);
    assert_eq!(c.get("/", &[]).status, 429, "the reload reset the zone");
    // Counters go on too.
    assert_eq!(req_total(admin, "perip", "rejected"), 2);
    reload(&p, addr, admin, &cfg("2r/m", "three"));
    let r = edge_testkit::get(addr, "/", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"three"[..]));
    assert_eq!(req_total(admin, "perip", "rejected"), 0);
}

#[test]
fn config_errors_name_the_line_and_key() {
    let base = "[[listen]]\naddr = \"127.0.0.1:1\"\n";
    let zone =
        "[[limit_req_zone]]\nname = \"perip\"\nkey = \"$binary_remote_addr\"\nrate = \"10r/s\"\n";
    let loc = |extra: &str| {
        format!("[[location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\n{extra}\n")
    };
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{base}{zone}{}", loc("limit_req = [{ zone = \"nope\" }]")),
            ":10: location.limit_req.zone: no [[limit_req_zone]] named \"nope\"",
        ),
        (
            format!("{base}{}", loc("limit_conn = { zone = \"nope\", max = 1 }")),
            ":6: location.limit_conn.zone: no [[limit_conn_zone]] named \"nope\"",
        ),
        (
            format!("{base}{}", zone.replace("10r/s", "0r/s")),
            ":6: limit_req_zone.rate: invalid rate \"0r/s\": at least 1 request",
        ),
        (
            format!("{base}{}", zone.replace("10r/s", "10")),
            ":6: limit_req_zone.rate: invalid rate \"10\": expected requests per second or minute",
        ),
        (
            format!("{base}{}", zone.replace("10r/s", "ten r/s")),
            ":6: limit_req_zone.rate: invalid rate \"ten r/s\"",
        ),
        (
            format!("{base}{zone}size = \"12q\"\n"),
            ":7: limit_req_zone.size: invalid size \"12q\"",
        ),
        (
            format!("{base}{zone}size = \"1k\"\n"),
            ":7: limit_req_zone.size: must be between 32k and 64g",
        ),
        (
            format!("{base}{zone}{zone}"),
            ":8: limit_req_zone.name: zone \"perip\" is defined twice",
        ),
        (
            format!(
                "{base}{zone}[[limit_conn_zone]]\nname = \"perip\"\nkey = \"$binary_remote_addr\"\n"
            ),
            ":8: limit_conn_zone.name: zone \"perip\" is defined twice",
        ),
        (
            format!("{base}{}", zone.replace("$binary_remote_addr", "$binary_remote_adr")),
            ":5: limit_req_zone.key: unknown variable \"$binary_remote_adr\"",
        ),
        (
            format!(
                "{base}{zone}{}",
                loc("limit_req = [{ zone = \"perip\", status = 200 }]")
            ),
            ":10: location.limit_req.status: status 200 is not between 400 and 599",
        ),
        (
            format!(
                "{base}{zone}{}",
                loc("limit_req = [{ zone = \"perip\", nodelay = true, delay = 2 }]")
            ),
            ":10: location.limit_req.delay: set nodelay or delay, not both",
        ),
        (
            format!(
                "{base}{zone}{}",
                loc("limit_req = [{ zone = \"perip\", hold = \"2m\" }]")
            ),
            ":10: location.limit_req.hold: at most 60s",
        ),
        (
            format!(
                "limit_req = [{{ zone = \"perip\" }}, {{ zone = \"perip\" }}]\n{base}{zone}{}",
                loc("")
            ),
            ":1: limit_req.zone: zone \"perip\" is listed twice",
        ),
        (
            format!(
                "{base}[[limit_conn_zone]]\nname = \"a\"\nkey = \"$remote_addr\"\n{}",
                loc("limit_conn = { zone = \"a\", max = 0 }")
            ),
            ":9: location.limit_conn.max: must be between 1 and 1000000",
        ),
        (
            format!(
                "{base}{zone}[[server]]\nnames = [\"a\"]\nlimit_req = [{{ zone = \"perip\", burst = 1, dryrun = true }}]\n"
            ),
            ":9: server.limit_req.dryrun: unknown key; unknown field `dryrun`",
        ),
    ];
    for (text, want) in cases {
        let (code, stderr, path) = check_config(&text);
        assert_eq!(code, Some(2), "{text}\n{stderr}");
        assert!(
            stderr.contains(&format!("{path}{want}")),
            "want {want:?} in:\n{stderr}\nfor:\n{text}"
        );
    }
    // And a good one.
    let good = format!(
        "limit_req = [{{ zone = \"perip\", burst = 20, nodelay = true }}]\n{base}{zone}[[limit_conn_zone]]\nname = \"addr\"\nkey = \"$binary_remote_addr\"\nsize = \"16m\"\n{}",
        loc("limit_conn = [{ zone = \"addr\", max = 20 }]\nlimit_req = [{ zone = \"perip\", delay = 5, burst = 10, status = 503, dry_run = true }]")
    );
    let (code, stderr, _) = check_config(&good);
    assert_eq!(code, Some(0), "{stderr}");
}
