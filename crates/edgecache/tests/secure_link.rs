//! Signed URLs (`secure_link`, issue 27): links made by the real `edgecache sign` are
//! served, tampered ones get 403 and expired ones 410; every signature of one object is
//! one cache object; two secrets verify at once (rotation), and a reload re-reads the
//! secret files or, when one is missing, is refused and the running config kept. The
//! real `edgecache` in front of the real `edgeorigin` (or a recording upstream), on
//! 127.0.0.1.

mod common;

use common::{check_config, config_generation, edgecache, origin};
use edge_testkit::{bin, get, Proc, Response};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn cache_status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

/// `edgecache sign --secret-file key ARGS... url`: the URL it prints (it must succeed).
fn sign(key: &Path, args: &[&str], url: &str) -> String {
    let out = std::process::Command::new(bin("edgecache"))
        .arg("sign")
        .arg("--secret-file")
        .arg(key)
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "edgecache sign: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8(out.stdout).unwrap();
    assert!(url.ends_with('\n'), "one line: {url:?}");
    url.trim_end().to_string()
}

/// A secret file `name` holding `secret` and a newline, in `dir`.
fn key(dir: &Path, name: &str, secret: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{secret}\n")).unwrap();
    p
}

/// A cached location under `secure_link` (`link_extra` inside its braces), in front of
/// `upstream`, with a public location `/open/` beside it.
fn config(upstream: SocketAddr, cache_dir: &Path, secret_file: &str, link_extra: &str) -> String {
    format!(
        r#"workers = 2
worker_cpu_affinity = "off"

[[listen]]
addr = "{{listen}}"

[[cache]]
name = "c1"
path = "{dir}"

[[upstream]]
name = "origin"
servers = ["{upstream}"]

[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]
cache_valid = {{ "200" = "10m" }}
secure_link = {{ secret_file = {secret_file}{link_extra} }}

[[location]]
prefix = "/open/"
return = {{ status = 200, body = "open" }}

[admin]
listen = "{{admin}}"
"#,
        dir = cache_dir.display()
    )
}

fn quoted(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// The signature of a signed URL (its last argument: 64 hex digits).
fn sig_of(url: &str) -> &str {
    &url[url.len() - 64..]
}

#[test]
fn a_signed_link_is_served_a_tampered_one_is_403_an_expired_one_410() {
    let (_o, origin_addr) = origin();
    let d = tempfile::tempdir().unwrap();
    let k = key(d.path(), "link.key", "a very secret key");
    let (_p, addr, _admin) = edgecache(&config(
        origin_addr,
        &d.path().join("cache"),
        &quoted(&k),
        "",
    ));

    let url = sign(&k, &[], "/obj/1k/1");
    assert!(url.starts_with("/obj/1k/1?expires="), "{url}");
    let r = get(addr, &url, &[]);
    assert_eq!(r.status, 200, "{url}");
    assert_eq!(r.body.len(), 1024);

    // A URL with a query keeps it; a percent-encoded path is signed as the server
    // routes it ($uri: decoded and normalized).
    let url = sign(
        &k,
        &["--expires", "10m"],
        "http://cdn.test/obj/1k/%32?tag=x",
    );
    let path = url.strip_prefix("http://cdn.test").unwrap();
    assert!(path.starts_with("/obj/1k/%32?tag=x&expires="), "{url}");
    assert_eq!(get(addr, path, &[]).status, 200, "{path}");
    let plain = path.replacen("%32", "2", 1);
    assert_eq!(get(addr, &plain, &[]).status, 200, "{plain}: the same $uri");

    // Tampered: another object, another expiry, another signature, none at all.
    let good = sign(&k, &[], "/obj/1k/3");
    let forbidden = [
        good.replacen("/obj/1k/3", "/obj/1k/4", 1),
        good.replacen("expires=1", "expires=2", 1),
        format!(
            "{}{}",
            &good[..good.len() - 1],
            if good.ends_with('0') { '1' } else { '0' }
        ),
        format!("{}&sig={}", good, sig_of(&good)),
        good.split_once('?').unwrap().0.to_string(),
        good.replacen("sig=", "sig=zz", 1),
        good.replacen("expires=", "expires=x", 1),
    ];
    for bad in &forbidden {
        let r = get(addr, bad, &[]);
        assert_eq!(r.status, 403, "{bad}");
    }
    assert_eq!(get(addr, &good, &[]).status, 200, "{good}");

    // Expired: a valid signature with an expiry in the past.
    let old = sign(&k, &["--expires", "@1000000000"], "/obj/1k/3");
    assert!(old.contains("expires=1000000000&sig="), "{old}");
    let r = get(addr, &old, &[]);
    assert_eq!(r.status, 410, "{old}");
    // Made with another secret: 403, expired or not.
    let d2 = tempfile::tempdir().unwrap();
    let other = key(d2.path(), "other.key", "another key");
    assert_eq!(get(addr, &sign(&other, &[], "/obj/1k/3"), &[]).status, 403);
    assert_eq!(
        get(
            addr,
            &sign(&other, &["--expires", "@1000000000"], "/obj/1k/3"),
            &[]
        )
        .status,
        403
    );

    // A location without secure_link needs no signature.
    assert_eq!(get(addr, "/open/x", &[]).status, 200);
}

#[test]
fn every_signature_of_one_object_is_one_cache_object_and_reaches_the_origin_as_sent() {
    let (upstream, seen) = common::recording_upstream();
    let d = tempfile::tempdir().unwrap();
    let k = key(d.path(), "link.key", "k1");
    let (_p, addr, _admin) = edgecache(&config(
        upstream,
        &d.path().join("cache"),
        &quoted(&k),
        ", expires_arg = \"e\", signature_arg = \"s\"",
    ));
    let flags = ["--expires-arg", "e", "--signature-arg", "s"];
    let first = sign(
        &k,
        &[&flags[..], &["--expires", "1h"]].concat(),
        "/v/a?q=hd",
    );
    let second = sign(
        &k,
        &[&flags[..], &["--expires", "2h"]].concat(),
        "/v/a?q=hd",
    );
    assert_ne!(sig_of(&first), sig_of(&second));
    let r = get(addr, &first, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"), "{first}");
    let r = get(addr, &second, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"), "{second}");
    // Another query is another object.
    let third = sign(&k, &flags, "/v/a?q=sd");
    let r = get(addr, &third, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"), "{third}");
    // A hit needs a valid signature too: the check comes before the cache.
    let r = get(addr, "/v/a?q=hd", &[]);
    assert_eq!(r.status, 403);
    // PURGE (from an `admin.allow` address) names the object without a signature.
    let mut c = edge_testkit::Client::connect(addr);
    let r = c.request("PURGE", "/v/a?q=hd", &[]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = get(addr, &second, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"), "{second}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.heads.len(), 3, "{:?}", seen.heads);
    // The arguments are forwarded, as nginx does.
    let line = seen.heads[0].lines().next().unwrap();
    assert_eq!(line, format!("GET {first} HTTP/1.1"));
}

#[test]
fn include_remote_addr_binds_a_link_to_one_client() {
    let (_o, origin_addr) = origin();
    let d = tempfile::tempdir().unwrap();
    let k = key(d.path(), "link.key", "k");
    let (_p, addr, _admin) = edgecache(&config(
        origin_addr,
        &d.path().join("cache"),
        &quoted(&k),
        ", include = [\"$uri\", \"$remote_addr\"]",
    ));
    let bound = |ip: &str| {
        sign(
            &k,
            &[
                "--include",
                "$uri",
                "--include",
                "$remote_addr",
                "--remote-addr",
                ip,
            ],
            "/obj/1k/7",
        )
    };
    assert_eq!(get(addr, &bound("127.0.0.1"), &[]).status, 200);
    assert_eq!(get(addr, &bound("127.0.0.2"), &[]).status, 403);
    // Signed without the address: not what this location signs.
    assert_eq!(get(addr, &sign(&k, &[], "/obj/1k/7"), &[]).status, 403);
}

/// SIGHUP, then waits (up to 10 s) until stderr holds `want` `n` times.
fn hup_and_wait_log(p: &Proc, want: &str, n: usize) {
    p.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.stderr().matches(want).count() < n {
        assert!(
            Instant::now() < deadline,
            "no {want:?} in stderr:\n{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_secrets_verify_during_a_rotation_and_a_reload_rereads_them() {
    let (_o, origin_addr) = origin();
    let d = tempfile::tempdir().unwrap();
    let new = key(d.path(), "new.key", "new secret");
    let old = key(d.path(), "old.key", "old secret");
    let third = key(d.path(), "third.key", "third secret");
    let both = format!("[{}, {}]", quoted(&new), quoted(&old));
    let cfg = config(origin_addr, &d.path().join("cache"), &both, "");
    let (p, addr, admin) = edgecache(&cfg);
    let by_new = sign(&new, &[], "/obj/1k/1");
    let by_old = sign(&old, &[], "/obj/1k/1");
    let by_third = sign(&third, &[], "/obj/1k/1");
    assert_eq!(get(addr, &by_new, &[]).status, 200);
    assert_eq!(get(addr, &by_old, &[]).status, 200);
    assert_eq!(get(addr, &by_third, &[]).status, 403);

    // The rotation ends: the old secret leaves the list.
    let only_new = config(origin_addr, &d.path().join("cache"), &quoted(&new), "");
    common::reload(&p, addr, admin, &only_new);
    assert_eq!(get(addr, &by_new, &[]).status, 200);
    assert_eq!(get(addr, &by_old, &[]).status, 403);

    // The same config, the file's content changed: a reload reads it again.
    std::fs::write(&new, "third secret\n").unwrap();
    common::reload(&p, addr, admin, &only_new);
    assert_eq!(get(addr, &by_new, &[]).status, 403);
    assert_eq!(get(addr, &by_third, &[]).status, 200);

    // A missing secret file: the reload is refused, logged with file, line and key,
    // and the running config (and its secret) stays.
    let generation = config_generation(admin);
    std::fs::remove_file(&new).unwrap();
    hup_and_wait_log(&p, "reload failed, keeping the running config", 1);
    let log = p.stderr();
    let line = log.lines().find(|l| l.contains("reload failed")).unwrap();
    let at = 1 + only_new
        .lines()
        .position(|l| l.starts_with("secure_link"))
        .unwrap();
    assert!(
        line.contains(&format!(
            "edgecache.toml:{at}: secure_link.secret_file: cannot read"
        )),
        "{line}"
    );
    assert_eq!(config_generation(admin), generation);
    assert_eq!(get(addr, &by_third, &[]).status, 200);
    assert_eq!(get(addr, &by_old, &[]).status, 403);
}

#[test]
fn a_missing_secret_file_fails_the_config_test_with_its_line() {
    let text = "[[listen]]\naddr = \"127.0.0.1:1\"\n\n[[location]]\nprefix = \"/\"\nempty_gif = true\nsecure_link = { secret_file = \"/nonexistent/link.key\" }\n";
    let (code, stderr, path) = check_config(text);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{path}:7: secure_link.secret_file: cannot read \"/nonexistent/link.key\""
        )),
        "{stderr}"
    );

    // A relative path is under the config file's directory, wherever edgecache runs.
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("site.toml");
    std::fs::write(&cfg, text.replace("/nonexistent/link.key", "keys/link.key")).unwrap();
    let check = || {
        std::process::Command::new(bin("edgecache"))
            .args(["-t", "-c"])
            .arg(&cfg)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap()
    };
    let out = check();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let keys = d.path().join("keys");
    assert!(
        stderr.contains(&format!(
            "{:?}",
            keys.join("link.key").display().to_string()
        )),
        "{stderr}"
    );
    std::fs::create_dir(&keys).unwrap();
    std::fs::write(keys.join("link.key"), "").unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secure_link.secret_file: ")
            && String::from_utf8_lossy(&out.stderr).contains("is empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(keys.join("link.key"), "k\n").unwrap();
    let out = check();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sign_refuses_bad_input_with_exit_code_2() {
    let d = tempfile::tempdir().unwrap();
    let k = key(d.path(), "link.key", "k");
    let run = |args: &[&str]| {
        std::process::Command::new(bin("edgecache"))
            .arg("sign")
            .args(args)
            .output()
            .unwrap()
    };
    let ks = k.display().to_string();
    for (args, says) in [
        (vec!["--secret-file", "/nonexistent", "/a"], "cannot read"),
        (vec!["--secret-file", &ks, "a/b"], "neither a path"),
        (
            vec!["--secret-file", &ks, "--expires", "soon", "/a"],
            "--expires",
        ),
        (
            vec!["--secret-file", &ks, "--include", "$remote_addr", "/a"],
            "--remote-addr",
        ),
        (vec!["--secret-file", &ks, "/a%00"], "400"),
        (vec!["/a"], "--secret-file"),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
