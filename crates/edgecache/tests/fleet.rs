//! Operating a fleet: signals through the pid file (`edgecache -s`), a binary upgrade
//! under load that fails no request, a bad upgrade that leaves the old binary serving,
//! a tier of parent caches by consistent hashing with active health checks (a dead
//! parent's keys move, and return when it recovers), `Cache-Status` naming the tiers, and
//! routing-loop refusal through `Via`. Real processes on 127.0.0.1.

mod common;

use common::{edgecache, get_text, json_number, origin, origin_requests};
use edge_testkit::{bin, free_addr, get, Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn pid_of(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn s(config: &Path, signal: &str) -> (Option<i32>, String) {
    let out = Command::new(bin("edgecache"))
        .args(["-s", signal, "-c"])
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `return` server with a pid file, started from a config file in a temp dir (kept
/// so that `-s` and upgrades can read it).
struct Node {
    proc: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    cfg: PathBuf,
    pid_file: PathBuf,
    _dir: tempfile::TempDir,
}

fn return_config(addr: SocketAddr, admin: SocketAddr, pid: &Path, body: &str) -> String {
    format!(
        "workers = 2\nworker_cpu_affinity = \"off\"\npid = \"{}\"\nshutdown_timeout = \"10s\"\n[[listen]]\naddr = \"{addr}\"\n[[location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"{body}\" }}\n[admin]\nlisten = \"{admin}\"\n",
        pid.display()
    )
}

fn start_return(body: &str) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let (addr, admin) = (free_addr(), free_addr());
    let pid_file = dir.path().join("run").join("edgecache.pid");
    let cfg = dir.path().join("edgecache.toml");
    std::fs::write(&cfg, return_config(addr, admin, &pid_file, body)).unwrap();
    let mut proc = Proc::spawn(&bin("edgecache"), &["-c", cfg.to_str().unwrap()]);
    proc.wait_port(addr, Duration::from_secs(15));
    wait_until("the pid file", 10, || pid_of(&pid_file).is_some());
    Node {
        proc,
        addr,
        admin,
        cfg,
        pid_file,
        _dir: dir,
    }
}

#[test]
fn signals_reach_the_running_instance_through_its_pid_file() {
    let mut n = start_return("one");
    let pid = pid_of(&n.pid_file).unwrap();
    assert_eq!(pid as u32, n.proc.child.id());
    assert_eq!(get(n.addr, "/", &[]).body, b"one");
    // reload: a new body.
    let text = std::fs::read_to_string(&n.cfg)
        .unwrap()
        .replace("\"one\"", "\"two\"");
    std::fs::write(&n.cfg, text).unwrap();
    let (code, err) = s(&n.cfg, "reload");
    assert_eq!(code, Some(0), "{err}");
    wait_until("the reload", 10, || get(n.addr, "/", &[]).body == b"two");
    assert_eq!(s(&n.cfg, "reopen").0, Some(0));
    // stop: drains and exits 0, and the pid file goes with it.
    let (code, err) = s(&n.cfg, "stop");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(n.proc.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!n.pid_file.exists(), "pid file removed at exit");
    // Nothing running: exit 1 with the reason.
    let (code, err) = s(&n.cfg, "stop");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("pid file"), "{err}");
    // A config without `pid`: exit 2.
    let bare = n.cfg.with_file_name("bare.toml");
    std::fs::write(&bare, "[[listen]]\naddr = \"127.0.0.1:1\"\n").unwrap();
    let (code, err) = s(&bare, "reload");
    assert_eq!(code, Some(2), "{err}");
}

/// A closed-loop load on keep-alive connections (and one on new connections) while the
/// binary is upgraded: every request is answered, by the old process or the new one.
#[test]
fn a_binary_upgrade_under_load_fails_no_request() {
    let mut n = start_return("same");
    let old = pid_of(&n.pid_file).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut loads = Vec::new();
    for (name, extra) in [("keepalive", None), ("close", Some("--no-keepalive"))] {
        let json = dir.path().join(format!("{name}.json"));
        let mut cmd = Command::new(bin("edgeload"));
        cmd.args(["-t", "1", "-c", "8", "-d", "5s", "-R", "1500", "--json"])
            .arg(&json);
        if let Some(x) = extra {
            cmd.arg(x);
        }
        cmd.arg(format!("http://{}/", n.addr));
        loads.push((name, json, cmd.spawn().unwrap()));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let (code, err) = s(&n.cfg, "upgrade");
    assert_eq!(code, Some(0), "{err}");
    wait_until("the new process to own the pid file", 20, || {
        pid_of(&n.pid_file).is_some_and(|p| p != old)
    });
    let new = pid_of(&n.pid_file).unwrap();
    assert_eq!(
        n.proc.wait_exit(Duration::from_secs(15)),
        Some(0),
        "the old one drained and exited"
    );
    assert!(alive(new));
    for (name, json, mut p) in loads {
        assert!(p.wait().unwrap().success(), "{name}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let errors: u64 = v["errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|e| e.as_u64().unwrap_or(0))
            .sum();
        assert_eq!(errors, 0, "{name}: {}", v["errors"]);
        assert!(
            v["requests"].as_u64().unwrap() > 2000,
            "{name}: {}",
            v["requests"]
        );
    }
    // The new process serves, on the same sockets and admin listener.
    assert_eq!(get(n.addr, "/", &[]).body, b"same");
    assert!(get_text(n.admin, "/status").contains("\"workers\""));
    // SAFETY: stopping the process this test started (through the upgrade).
    unsafe { libc::kill(new, libc::SIGTERM) };
    wait_until("the new process to exit", 15, || !alive(new));
}

#[test]
fn a_bad_new_binary_leaves_the_old_one_serving() {
    let mut n = start_return("kept");
    let old = pid_of(&n.pid_file).unwrap();
    // The new process will read a config that does not parse: it exits 2 at once.
    let good = std::fs::read_to_string(&n.cfg).unwrap();
    std::fs::write(&n.cfg, format!("bogus_key = 1\n{good}")).unwrap();
    // (`-s` would read the bad config too: the signal itself.)
    n.proc.signal("USR2");
    wait_until("the failed upgrade to be logged", 20, || {
        n.proc.stderr().contains("upgrade failed")
    });
    assert_eq!(
        pid_of(&n.pid_file),
        Some(old),
        "the pid file is the old one's"
    );
    assert!(alive(old));
    assert_eq!(get(n.addr, "/", &[]).body, b"kept");
    std::fs::write(&n.cfg, good).unwrap();
    n.proc.signal("TERM");
    assert_eq!(n.proc.wait_exit(Duration::from_secs(10)), Some(0));
}

// ---- A tier of parents ----

struct Parent {
    proc: Option<Proc>,
    addr: SocketAddr,
    admin: SocketAddr,
    config: String,
    _dir: tempfile::TempDir,
}

fn parent_config(name: &str, origin: SocketAddr, cache: &Path) -> String {
    format!(
        r#"workers = 1
worker_cpu_affinity = "off"
node_name = "{name}"
[[listen]]
addr = "{{listen}}"
[[cache]]
name = "c"
path = "{}"
[[upstream]]
name = "origin"
servers = ["{origin}"]
[[location]]
exact = "/health"
return = {{ status = 200, body = "ok" }}
[[location]]
prefix = "/"
proxy = "origin"
cache = ["c"]
cache_valid = {{ "200" = "10m" }}
[admin]
listen = "{{admin}}"
"#,
        cache.display()
    )
}

fn start_parent(name: &str, origin: SocketAddr) -> Parent {
    let dir = tempfile::tempdir().unwrap();
    let config = parent_config(name, origin, &dir.path().join("cache"));
    let (p, addr, admin) = edgecache(&config);
    Parent {
        proc: Some(p),
        addr,
        admin,
        config,
        _dir: dir,
    }
}

impl Parent {
    fn requests(&self) -> u64 {
        let st = get_text(self.admin, "/status");
        let totals = &st[st.find("\"totals\"").unwrap()..];
        json_number(totals, "requests").unwrap()
    }

    /// Restarts on the same address and cache directory.
    fn restart(&mut self) {
        let text = self
            .config
            .replace("{listen}", &self.addr.to_string())
            .replace("{admin}", &self.admin.to_string());
        let path = self._dir.path().join("again.toml");
        std::fs::write(&path, text).unwrap();
        let mut p = Proc::spawn(&bin("edgecache"), &["-c", path.to_str().unwrap()]);
        p.wait_port(self.addr, Duration::from_secs(15));
        self.proc = Some(p);
    }
}

fn edge_config(parents: &[SocketAddr]) -> String {
    let list: Vec<String> = parents.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        r#"workers = 1
worker_cpu_affinity = "off"
node_name = "edge"
[[listen]]
addr = "{{listen}}"
[[upstream]]
name = "parents"
servers = [{}]
balance = "consistent_hash"
max_fails = 1
fail_timeout = "1s"
connect_timeout = "500ms"
health_check = {{ path = "/health", interval = "200ms", timeout = "200ms", fails = 2, passes = 2 }}
[[location]]
prefix = "/"
proxy = "parents"
[admin]
listen = "{{admin}}"
"#,
        list.join(", ")
    )
}

fn served_by(r: &edge_testkit::Response) -> String {
    r.header("cache-status")
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
        .to_string()
}

#[test]
fn a_consistent_hash_tier_fetches_each_object_once_and_survives_a_dead_parent() {
    let (_o, oaddr) = origin();
    let mut parents: Vec<Parent> = (0..3)
        .map(|i| start_parent(&format!("p{i}"), oaddr))
        .collect();
    let addrs: Vec<SocketAddr> = parents.iter().map(|p| p.addr).collect();
    let (_edge, eaddr, eadmin) = edgecache(&edge_config(&addrs));
    // 300 keys: each parent's share of a balanced table is 100 ± 8 (one standard
    // deviation), so the bounds below fail by chance about once in a million runs (60
    // keys gave 20 ± 3.7, and a share of 6 was seen once).
    let paths: Vec<String> = (0..300).map(|i| format!("/obj/4k/{i}")).collect();
    let mut owner = Vec::new();
    for p in &paths {
        let r = get(eaddr, p, &[]);
        assert_eq!(r.status, 200, "{p}");
        owner.push(served_by(&r));
        assert!(r.header("cache-status").unwrap().contains("fwd=uri-miss"));
    }
    // Twice more: every object is a hit on the same parent; the origin saw each once.
    for _ in 0..2 {
        for (p, o) in paths.iter().zip(&owner) {
            let r = get(eaddr, p, &[]);
            assert_eq!(served_by(&r), *o, "{p} stays on its parent");
            assert!(
                r.header("cache-status")
                    .unwrap()
                    .contains(&format!("{o}; hit")),
                "{:?}",
                r.header("cache-status")
            );
        }
    }
    assert_eq!(
        origin_requests(oaddr),
        300,
        "one origin fetch per object for the whole tier"
    );
    for i in 0..3 {
        let share = owner.iter().filter(|o| **o == format!("p{i}")).count();
        assert!((60..=150).contains(&share), "p{i} owns {share} of 300 keys");
    }
    // p1 dies: the edge's checks take it out, and its keys go to the others.
    drop(parents[1].proc.take());
    wait_until("the edge to see p1 down", 10, || {
        get_text(eadmin, "/status").contains("\"healthy\": false")
    });
    for (p, o) in paths.iter().zip(&owner) {
        let r = get(eaddr, p, &[]);
        assert_eq!(r.status, 200, "{p} while p1 is down");
        let now = served_by(&r);
        assert_ne!(now, "p1");
        if o != "p1" {
            assert_eq!(now, *o, "{p}: only p1's keys move");
        }
    }
    // p1 comes back: its keys return to it.
    parents[1].restart();
    wait_until("the edge to see p1 up", 10, || {
        !get_text(eadmin, "/status").contains("\"healthy\": false")
    });
    let before = parents[1].requests();
    for (p, o) in paths.iter().zip(&owner) {
        let r = get(eaddr, p, &[]);
        assert_eq!(served_by(&r), *o, "{p} is back on its parent");
    }
    assert!(parents[1].requests() > before);
}

#[test]
fn a_request_that_already_passed_through_this_node_is_refused() {
    // An edge whose upstream is itself: the second hop sees its own Via and answers 508.
    let (addr, admin) = (free_addr(), free_addr());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("loop.toml");
    std::fs::write(
        &cfg,
        format!(
            "workers = 1\nnode_name = \"looper\"\n[[listen]]\naddr = \"{addr}\"\n[[upstream]]\nname = \"self\"\nservers = [\"{addr}\"]\n[[location]]\nprefix = \"/\"\nproxy = \"self\"\n[admin]\nlisten = \"{admin}\"\n"
        ),
    )
    .unwrap();
    let mut p = Proc::spawn(&bin("edgecache"), &["-c", cfg.to_str().unwrap()]);
    p.wait_port(addr, Duration::from_secs(15));
    let r = get(addr, "/x", &[]);
    assert_eq!(r.status, 508, "{}", String::from_utf8_lossy(&r.head_bytes));
    let m = get_text(admin, "/metrics");
    assert_eq!(
        common::metric_in(&m, "edgecache_loops_total"),
        Some(1),
        "{m}"
    );
    // A Via from another node is not a loop.
    let (up, seen) = common::recording_upstream();
    let (_q, qaddr, _) = edgecache(&common::proxy_config(up, "node_name = \"q\"", ""));
    let r = get(
        qaddr,
        "/y",
        &["Via: 1.1 other (edgecache node=0123456789abcdef)"],
    );
    assert_eq!(r.status, 200);
    let head = seen
        .lock()
        .unwrap()
        .heads
        .last()
        .cloned()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        head.contains("via: 1.1 other (edgecache node=0123456789abcdef), 1.1 q (edgecache node="),
        "{head}"
    );
}
