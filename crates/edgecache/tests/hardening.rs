//! Hardening against what a disk does to a cache: corrupted files (a flipped header
//! byte, a truncated body, a file replaced under the server, a flipped body byte with
//! `cache_verify`) and a full filesystem. Each corruption must be detected, the object
//! dropped and fetched again, and never served wrong; a full disk must keep every client
//! answered from the origin, log once per interval, and recover when space returns.
//! Real edgecache and edgeorigin processes on 127.0.0.1; the full-disk test mounts a
//! small tmpfs, so it needs root and `mount` (CI runs as root): where it cannot mount
//! one it fails, unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`, which lets it pass without
//! running and prints that it did not run.

mod common;

use common::{
    cached_config, edgecache, get_text, json_number, object_files, origin, origin_requests,
};
use edge_testkit::{get, Proc, Response};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Node {
    _origin: Proc,
    origin: SocketAddr,
    cache: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    cache_dir: PathBuf,
    config: String,
    _dir: Option<tempfile::TempDir>,
}

impl Node {
    /// edgecache with one cached location in front of edgeorigin, its cache in
    /// `cache_dir` (a fresh temp dir when None).
    fn start(cache_extra: &str, cache_dir: Option<&Path>) -> Node {
        let (o, oaddr) = origin();
        let (dir, cache_dir) = match cache_dir {
            Some(d) => (None, d.to_path_buf()),
            None => {
                let d = tempfile::tempdir().unwrap();
                let c = d.path().join("cache");
                (Some(d), c)
            }
        };
        let config = cached_config(
            oaddr,
            &cache_dir,
            cache_extra,
            "cache_valid = { \"200\" = \"10m\" }",
            common::LOCAL,
        );
        let (p, addr, admin) = edgecache(&config);
        let n = Node {
            _origin: o,
            origin: oaddr,
            cache: p,
            addr,
            admin,
            cache_dir,
            config,
            _dir: dir,
        };
        n.wait_loaded();
        n
    }

    fn wait_loaded(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !get_text(self.admin, "/status").contains("\"done\": true") {
            assert!(Instant::now() < deadline, "the loader never finished");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM and the same config (same cache directory) again.
    fn restart(&mut self) {
        self.cache.signal("TERM");
        assert_eq!(self.cache.wait_exit(Duration::from_secs(10)), Some(0));
        let (p, addr, admin) = edgecache(&self.config);
        self.cache = p;
        self.addr = addr;
        self.admin = admin;
        self.wait_loaded();
    }

    fn get(&self, path: &str) -> Response {
        get(self.addr, path, &[])
    }

    fn origin_count(&self) -> u64 {
        origin_requests(self.origin)
    }

    /// The cache's `corrupt` counter in /status.
    fn corrupt(&self) -> u64 {
        let st = get_text(self.admin, "/status");
        let caches = &st[st.find("\"caches\"").expect("caches in /status")..];
        json_number(caches, "corrupt").expect("corrupt in /status")
    }

    /// The only object file in the cache (panics if there is not exactly one).
    fn only_file(&self) -> PathBuf {
        let f = object_files(&self.cache_dir);
        assert_eq!(f.len(), 1, "{f:?}");
        PathBuf::from(&f[0].0)
    }
}

/// The body's xxh3 matches the origin's `X-Checksum`: the right bytes.
fn assert_right(r: &Response, what: &str) {
    assert_eq!(r.status, 200, "{what}");
    let want = r.header("x-checksum").expect("X-Checksum");
    assert_eq!(
        format!("{:016x}", twox_hash::XxHash3_64::oneshot(&r.body)),
        want,
        "{what}: wrong bytes served"
    );
}

fn flip_byte(path: &Path, at: u64) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x5a]).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_flipped_header_byte_is_detected_at_restart_and_the_object_fetched_again() {
    let mut n = Node::start("", None);
    assert_right(&n.get("/obj/10k/1"), "miss");
    assert_right(&n.get("/obj/10k/1"), "hit");
    let file = n.only_file();
    // A byte of the stored metadata (the key, past the 64-byte prefix).
    n.cache.signal("TERM");
    assert_eq!(n.cache.wait_exit(Duration::from_secs(10)), Some(0));
    flip_byte(&file, 80);
    let (p, addr, admin) = edgecache(&n.config);
    (n.cache, n.addr, n.admin) = (p, addr, admin);
    n.wait_loaded();
    let before = n.origin_count();
    let r = n.get("/obj/10k/1");
    assert_eq!(
        r.header("x-cache-status"),
        Some("MISS"),
        "dropped by the loader"
    );
    assert_right(&r, "after the flip");
    assert_eq!(n.origin_count(), before + 1);
    assert_right(&n.get("/obj/10k/1"), "stored again");
}

#[test]
fn a_body_truncated_under_the_server_is_never_served_whole() {
    let n = Node::start("", None);
    let path = "/obj/200k/2";
    assert_right(&n.get(path), "miss");
    assert_right(&n.get(path), "hit"); // its descriptor is in the open-file cache now
    let file = n.only_file();
    common::truncate_half(&file);
    // The next response is cut (the client sees a short body), never a whole wrong one.
    let (status, body, complete, sum) = common::get_closing(n.addr, path);
    assert_eq!(status, 200);
    if complete {
        assert_eq!(
            format!("{:016x}", twox_hash::XxHash3_64::oneshot(&body)),
            sum.unwrap(),
            "a whole body must be the right one"
        );
    }
    // The object was dropped: fetched again, whole and right.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body, complete, sum) = common::get_closing(n.addr, path);
        if complete && status == 200 {
            assert_eq!(
                format!("{:016x}", twox_hash::XxHash3_64::oneshot(&body)),
                sum.unwrap()
            );
            break;
        }
        assert!(Instant::now() < deadline, "never served whole again");
    }
    assert_eq!(n.corrupt(), 1, "dropped and counted");
}

#[test]
fn a_file_replaced_under_the_server_never_answers_for_another_key() {
    let mut n = Node::start("", None);
    assert_right(&n.get("/obj/10k/3"), "a");
    let a_file = n.only_file();
    assert_right(&n.get("/obj/10k/4"), "b");
    let b_file = object_files(&n.cache_dir)
        .into_iter()
        .map(|(p, _)| PathBuf::from(p))
        .find(|p| *p != a_file)
        .unwrap();
    // b's file renamed over a's path: a new inode with another object's header.
    let tmp = a_file.with_extension("swap");
    std::fs::copy(&b_file, &tmp).unwrap();
    std::fs::rename(&tmp, &a_file).unwrap();
    for _ in 0..3 {
        let r = n.get("/obj/10k/3");
        assert_right(&r, "a after the swap");
        let direct = get(n.origin, "/obj/10k/3", &[]);
        assert_eq!(r.body, direct.body, "a's bytes, not b's");
    }
    // After a restart the loader sees a header that does not match the file's name.
    n.restart();
    let r = n.get("/obj/10k/3");
    assert_right(&r, "a after the restart");
    assert_eq!(r.body, get(n.origin, "/obj/10k/3", &[]).body);
}

#[test]
fn cache_verify_always_catches_a_flipped_body_byte_on_a_hit() {
    let n = Node::start("cache_verify = \"always\"", None);
    for path in ["/obj/10k/5", "/obj/3m/6"] {
        assert_right(&n.get(path), "miss");
        assert_right(&n.get(path), "hit, verified");
    }
    let mut flipped = 0;
    for (f, size) in object_files(&n.cache_dir) {
        flip_byte(Path::new(&f), size - 7); // inside the body
        flipped += 1;
    }
    assert_eq!(flipped, 2);
    for path in ["/obj/10k/5", "/obj/3m/6"] {
        let before = n.origin_count();
        let r = n.get(path);
        assert_right(&r, &format!("{path} after the flip"));
        assert_eq!(
            r.header("x-cache-status"),
            Some("MISS"),
            "{path}: dropped, fetched again"
        );
        assert_eq!(n.origin_count(), before + 1);
        assert_eq!(n.get(path).header("x-cache-status"), Some("HIT"));
    }
    assert_eq!(n.corrupt(), 2);
}

#[test]
fn cache_verify_load_drops_a_flipped_body_at_restart() {
    let mut n = Node::start("cache_verify = \"load\"", None);
    assert_right(&n.get("/obj/50k/7"), "miss");
    let file = n.only_file();
    n.cache.signal("TERM");
    assert_eq!(n.cache.wait_exit(Duration::from_secs(10)), Some(0));
    let size = std::fs::metadata(&file).unwrap().len();
    flip_byte(&file, size - 100);
    let (p, addr, admin) = edgecache(&n.config);
    (n.cache, n.addr, n.admin) = (p, addr, admin);
    n.wait_loaded();
    assert_eq!(n.corrupt(), 1, "the loader found it");
    let r = n.get("/obj/50k/7");
    assert_eq!(r.header("x-cache-status"), Some("MISS"));
    assert_right(&r, "fetched again");
}

/// A tmpfs of `size` mounted at `dir` for the test's life (unmounted on drop, panics
/// included).
struct Mount(PathBuf);

impl Mount {
    /// The mount, or why there is none (mount's own message).
    fn tmpfs(dir: &Path, size: &str) -> Result<Mount, String> {
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_keeps_every_client_answered_and_recovers() {
    const WHAT: &str = "the full-disk test (a 2 MiB tmpfs) did not run";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        edge_testkit::fallback(WHAT, "mounting a tmpfs needs root (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let _mount = match Mount::tmpfs(&mnt, "2m") {
        Ok(m) => m,
        Err(why) => {
            edge_testkit::fallback(WHAT, &why);
            return;
        }
    };
    // Ballast: leaves room for one or two 256 KiB objects, no more.
    let ballast = mnt.join("ballast");
    std::fs::write(&ballast, vec![0u8; 1400 << 10]).unwrap();
    let n = Node::start("", Some(&mnt.join("cache")));
    let mut uncached = 0;
    for i in 0..12 {
        let path = format!("/obj/256k/{i}");
        let r = n.get(&path);
        assert_right(&r, &format!("{path} on a full disk"));
        if n.get(&path).header("x-cache-status") != Some("HIT") {
            uncached += 1;
        }
    }
    assert!(
        uncached >= 8,
        "most objects could not be stored ({uncached} of 12)"
    );
    let st = get_text(n.admin, "/status");
    let caches = &st[st.find("\"caches\"").unwrap()..];
    assert!(json_number(caches, "write_errors").unwrap() >= 8, "{st}");
    // One log line per interval, not one per failed write.
    let log = n.cache.stderr();
    let lines = log
        .lines()
        .filter(|l| l.contains("serving uncached"))
        .count();
    assert!((1..=2).contains(&lines), "{lines} log lines:\n{log}");
    // Space returns: new objects are stored again.
    std::fs::remove_file(&ballast).unwrap();
    let path = "/obj/256k/100";
    assert_right(&n.get(path), "after space returned");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = n.get(path);
        assert_right(&r, "again");
        if r.header("x-cache-status") == Some("HIT") {
            break;
        }
        assert!(Instant::now() < deadline, "never stored again");
        std::thread::sleep(Duration::from_millis(100));
    }
}
