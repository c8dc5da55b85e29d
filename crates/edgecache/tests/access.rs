//! Access lists and geo variables against the real binary. Clients come from different
//! loopback addresses (their sockets are bound to 127.0.0.2, 127.0.0.3... before they
//! connect: Linux routes all of 127/8 to `lo`), or from 127.0.0.1 naming another
//! address in `X-Forwarded-For` to a `real_ip` that trusts it. Checked: `allow`/`deny`
//! (allow first), `access_rules` in order, an empty list lifting the rules, top-level
//! rules inherited, 403 with the connection kept, the `/metrics` counter; `[[geo]]`
//! values from `ranges` and from a file next to the config (re-read on SIGHUP, a bad
//! file on reload keeping the running table), a geo variable as a `deny` rule and in a
//! cache key; and the `-t` errors.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One parsed response.
#[derive(Debug)]
struct Resp {
    status: u16,
    /// The head, field names as sent.
    head: String,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Responses with Content-Length bodies, back to back.
fn parse_responses(mut bytes: &[u8]) -> Vec<Resp> {
    let mut out = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let body_at = end + 4;
        let body = String::from_utf8_lossy(&bytes[body_at..body_at + len]).into_owned();
        bytes = &bytes[body_at + len..];
        out.push(Resp { status, head, body });
    }
    out
}

/// Connects to `addr` from a socket bound to `src` (port chosen by the kernel).
fn connect_from(src: IpAddr, addr: SocketAddr) -> std::net::TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(src, 0).into())
        .unwrap_or_else(|e| panic!("bind {src}: {e}"));
    s.connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr} from {src}: {e}"));
    let s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// GET requests for `paths` (each with `headers`) on one connection from `src`, the
/// last with `Connection: close`; every response, in order.
fn get_all(src: &str, addr: SocketAddr, paths: &[&str], headers: &[&str]) -> Vec<Resp> {
    let mut c = connect_from(src.parse().unwrap(), addr);
    let mut raw = String::new();
    for (i, p) in paths.iter().enumerate() {
        raw.push_str(&format!("GET {p} HTTP/1.1\r\nHost: t\r\n"));
        for h in headers {
            raw.push_str(h);
            raw.push_str("\r\n");
        }
        if i + 1 == paths.len() {
            raw.push_str("Connection: close\r\n");
        }
        raw.push_str("\r\n");
    }
    c.write_all(raw.as_bytes()).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let r = parse_responses(&got);
    assert_eq!(r.len(), paths.len(), "{:?}", String::from_utf8_lossy(&got));
    r
}

/// One GET from `src`.
fn get_from(src: &str, addr: SocketAddr, path: &str, headers: &[&str]) -> Resp {
    get_all(src, addr, &[path], headers).pop().unwrap()
}

fn denied(admin: SocketAddr) -> u64 {
    metric_in(
        &get_text(admin, "/metrics"),
        "edgecache_access_denied_total",
    )
    .expect("edgecache_access_denied_total in /metrics")
}

const HEAD: &str = "workers = 1\nworker_cpu_affinity = \"off\"\n";
const ADMIN: &str = "[admin]\nlisten = \"{admin}\"\n";

#[test]
fn allow_and_deny_by_peer_address() {
    let cfg = format!(
        r#"{HEAD}
[[listen]]
addr = "{{listen}}"

[[location]]
prefix = "/"
return = {{ status = 200, body = "hello $remote_addr" }}
deny = ["127.0.0.0/8"]
allow = ["127.0.0.2"]

[[location]]
prefix = "/ordered"
return = {{ status = 200, body = "ordered" }}
access_rules = [{{ deny = "127.0.0.2" }}, {{ allow = "127.0.0.0/29" }}, {{ deny = "all" }}]

[[location]]
exact = "/open"
return = {{ status = 200, body = "open" }}
access_rules = []

{ADMIN}"#
    );
    let (_p, addr, admin) = edgecache(&cfg);
    assert_eq!(denied(admin), 0);

    // allow comes before deny, whatever their order in the file.
    let r = get_from("127.0.0.2", addr, "/", &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "hello 127.0.0.2"));
    for src in ["127.0.0.1", "127.0.0.3", "127.0.0.200"] {
        let r = get_from(src, addr, "/", &[]);
        assert_eq!(r.status, 403, "{src}");
        assert_eq!(r.header("content-type"), Some("text/html"));
        assert!(r.body.contains("403 Forbidden"), "{}", r.body);
    }
    assert_eq!(denied(admin), 3);

    // A 403 keeps the connection: the next request on it is answered.
    let rs = get_all("127.0.0.3", addr, &["/", "/x", "/open"], &[]);
    let statuses: Vec<u16> = rs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [403, 403, 200]);
    assert!(rs[0].header("connection").is_none_or(|c| c != "close"));
    assert_eq!(rs[2].body, "open");
    assert_eq!(denied(admin), 5);

    // The ordered form: the first match wins.
    for (src, want) in [
        ("127.0.0.2", 403),
        ("127.0.0.3", 200),
        ("127.0.0.7", 200),
        ("127.0.0.8", 403),
        ("127.0.0.1", 200),
    ] {
        assert_eq!(get_from(src, addr, "/ordered/a", &[]).status, want, "{src}");
    }
    // An empty list lifts the rules.
    assert_eq!(get_from("127.0.0.9", addr, "/open", &[]).status, 200);
    assert_eq!(denied(admin), 7);
}

#[test]
fn real_ip_addresses_meet_top_level_rules() {
    let cfg = format!(
        r#"{HEAD}
real_ip = {{ from = ["127.0.0.1"], header = "X-Forwarded-For" }}
deny = ["198.51.100.0/24", "2001:db8:bad::/48", "127.0.0.2"]

[[listen]]
addr = "{{listen}}"

[[location]]
prefix = "/"
return = {{ status = 200, body = "$remote_addr" }}

{ADMIN}"#
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let xff = |v: &str| format!("X-Forwarded-For: {v}");
    for (src, forwarded, want, body) in [
        // From the trusted proxy: its client's address decides.
        ("127.0.0.1", "198.51.100.7", 403, ""),
        ("127.0.0.1", "203.0.113.9", 200, "203.0.113.9"),
        ("127.0.0.1", "2001:db8:bad::1", 403, ""),
        ("127.0.0.1", "2001:db8:bad:ffff::1", 403, ""),
        ("127.0.0.1", "2001:db8:900d::1", 200, "2001:db8:900d::1"),
        // A mapped address is its IPv4 address.
        ("127.0.0.1", "::ffff:198.51.100.7", 403, ""),
        ("127.0.0.1", "10.0.0.1, 198.51.100.8", 403, ""),
        // An untrusted peer's field is ignored: its own address decides.
        ("127.0.0.2", "203.0.113.9", 403, ""),
        ("127.0.0.3", "198.51.100.7", 200, "127.0.0.3"),
    ] {
        let r = get_from(src, addr, "/", &[&xff(forwarded)]);
        assert_eq!(r.status, want, "{src} forwarding {forwarded}");
        if want == 200 {
            assert_eq!(r.body, body);
        }
    }
    assert_eq!(denied(admin), 6);
}

/// Writes the config of `p` and reloads; returns when the new generation serves.
fn reload_to(p: &edge_testkit::Proc, addr: SocketAddr, admin: SocketAddr, text: &str) {
    common::reload(p, addr, admin, text);
}

#[test]
fn geo_values_from_ranges_and_from_a_file_reread_on_reload() {
    let top = format!(
        r#"{HEAD}
[[listen]]
addr = "{{listen}}"

[[location]]
prefix = "/"
return = {{ status = 200, body = "$country $from_header" }}

[[geo]]
variable = "$from_header"
source = "$http_x_ip"
default = "none"
ranges = {{ "2001:db8::/32" = "doc6", "2001:db8:1::/48" = "doc6-1", "10.0.0.0/8" = "ten", "10.1.0.0/16" = "ten-one" }}

{ADMIN}"#
    );
    let inline = format!(
        "{top}\n[[geo]]\nvariable = \"$country\"\ndefault = \"ZZ\"\n\
         ranges = {{ \"127.0.0.0/8\" = \"LO\", \"127.0.0.2/31\" = \"TWO\", \"127.0.0.4\" = \"FOUR\" }}\n"
    );
    let (p, addr, admin) = edgecache(&inline);
    let body = |src: &str, headers: &[&str]| {
        let r = get_from(src, addr, "/", headers);
        assert_eq!(r.status, 200);
        r.body
    };
    // The client address, longest prefix first.
    assert_eq!(body("127.0.0.2", &[]), "TWO none");
    assert_eq!(body("127.0.0.3", &[]), "TWO none");
    assert_eq!(body("127.0.0.4", &[]), "FOUR none");
    assert_eq!(body("127.0.0.5", &[]), "LO none");
    // A source template: a request field.
    for (ip, want) in [
        ("2001:db8:1::5", "doc6-1"),
        ("2001:db8:2::5", "doc6"),
        ("2001:db9::1", "none"),
        ("10.1.1.1", "ten-one"),
        ("10.2.1.1", "ten"),
        ("::ffff:10.2.1.1", "ten"),
        (" 10.2.1.1 ", "ten"),
        ("garbage", "none"),
        ("10.2.1.1, 10.1.1.1", "none"),
        ("", "none"),
    ] {
        let h = format!("X-IP: {ip}");
        assert_eq!(body("127.0.0.5", &[&h]), format!("LO {want}"), "{ip:?}");
    }

    // A file next to the config (a relative path), read at reload.
    let dir = p.dir().join("geo");
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("countries.csv");
    std::fs::write(
        &csv,
        "# network,country\n127.0.0.0/8,FILE\n\n127.0.0.3,THREE\n",
    )
    .unwrap();
    let from_file = format!(
        "{top}\n[[geo]]\nvariable = \"$country\"\ndefault = \"ZZ\"\nfile = \"geo/countries.csv\"\n"
    );
    reload_to(&p, addr, admin, &from_file);
    assert_eq!(body("127.0.0.2", &[]), "FILE none");
    assert_eq!(body("127.0.0.3", &[]), "THREE none");
    // The same config, a new file: SIGHUP reads it again.
    std::fs::write(&csv, "127.0.0.2,NEW\r\n").unwrap();
    reload_to(&p, addr, admin, &from_file);
    assert_eq!(body("127.0.0.2", &[]), "NEW none");
    assert_eq!(body("127.0.0.3", &[]), "ZZ none");

    // A bad line: the reload fails, naming it, and the running table stays.
    let generation = config_generation(admin);
    std::fs::write(&csv, "127.0.0.2,BAD\n127.0.0.300,X\n").unwrap();
    p.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !p
        .stderr()
        .contains("countries.csv:2: bad network \"127.0.0.300\"")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload error in:\n{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(config_generation(admin), generation);
    assert_eq!(body("127.0.0.2", &[]), "NEW none");
}

#[test]
fn geo_variables_drive_deny_rules_and_cache_keys() {
    let s = setup(
        "",
        r#"cache_key = "$country$uri"
deny = ["$blocked"]
add_header = { "X-Country" = "$country" }

[[geo]]
variable = "$blocked"
default = "0"
ranges = { "127.0.0.3" = "yes", "127.0.0.6" = "0", "127.0.0.7" = "" }

[[geo]]
variable = "$country"
default = "ZZ"
ranges = { "127.0.0.2" = "AA", "127.0.0.5" = "AA", "127.0.0.4" = "BB" }
"#,
    );
    let cache = |r: &Resp| r.header("x-cache-status").unwrap_or("-").to_string();
    // "$blocked" matches when its value is neither empty nor "0".
    assert_eq!(get_from("127.0.0.3", s.addr, "/obj/1k/1", &[]).status, 403);
    for src in ["127.0.0.6", "127.0.0.7"] {
        let r = get_from(src, s.addr, "/obj/1k/2", &[]);
        assert_eq!(
            (r.status, r.header("x-country")),
            (200, Some("ZZ")),
            "{src}"
        );
    }
    // The key holds the country: one copy per country, shared by its clients.
    let before = s.origin_count();
    let r = get_from("127.0.0.2", s.addr, "/obj/1k/1", &[]);
    assert_eq!((r.status, cache(&r).as_str()), (200, "MISS"));
    assert_eq!(r.header("x-country"), Some("AA"));
    assert_eq!(
        cache(&get_from("127.0.0.2", s.addr, "/obj/1k/1", &[])),
        "HIT"
    );
    assert_eq!(
        cache(&get_from("127.0.0.4", s.addr, "/obj/1k/1", &[])),
        "MISS"
    );
    assert_eq!(
        cache(&get_from("127.0.0.5", s.addr, "/obj/1k/1", &[])),
        "HIT"
    );
    assert_eq!(
        cache(&get_from("127.0.0.4", s.addr, "/obj/1k/1", &[])),
        "HIT"
    );
    assert_eq!(s.origin_count() - before, 2, "one fill per country");
    assert_eq!(denied(s.admin), 1);
}

#[test]
fn config_test_names_bad_rules_and_geo_files() {
    let base = "[[listen]]\naddr = \"127.0.0.1:1\"\n[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n";
    // A bad prefix in allow: its line.
    let (code, err, dir) = check_config_in_dir(
        &format!("{base}allow = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n"),
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{dir}/edgecache.toml:6: location.allow: invalid prefix length in \"10.0.0.0/40\""
        )),
        "{err}"
    );
    // access_rules with allow in one block.
    let (code, err, dir) = check_config_in_dir(
        &format!("{base}allow = [\"10.0.0.0/8\"]\naccess_rules = [{{ deny = \"all\" }}]\n"),
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{dir}/edgecache.toml:7: location.access_rules: set access_rules, or allow and deny, not both")),
        "{err}"
    );
    // A bad network in the geo file: the config's line, then the file's.
    let geo = "[[geo]]\nvariable = \"$country\"\nfile = \"geo.csv\"\n";
    let (code, err, dir) = check_config_in_dir(
        &format!("{base}{geo}"),
        &[("geo.csv", "# net,country\n10.0.0.0/8,A\n10.0.0.300/8,B\n")],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{dir}/edgecache.toml:8: geo.file: {dir}/geo.csv:3: bad network \"10.0.0.300/8\""
        )),
        "{err}"
    );
    // A missing geo file.
    let (code, err, dir) = check_config_in_dir(&format!("{base}{geo}"), &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{dir}/edgecache.toml:8: geo.file: {dir}/geo.csv: cannot read:"
        )),
        "{err}"
    );
    // An unknown variable in a rule.
    let (code, err, _) = check_config_in_dir(&format!("{base}deny = [\"$country\"]\n"), &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("location.deny: \"$country\": unknown variable"),
        "{err}"
    );
    // And a good one passes, the file found beside the config.
    let (code, err, _) = check_config_in_dir(
        &format!("{base}deny = [\"$country\"]\n{geo}"),
        &[("geo.csv", "10.0.0.0/8,A\n")],
    );
    assert_eq!(code, Some(0), "{err}");
}

/// nginx, where the sites differential test finds it.
fn nginx_binary() -> Option<std::path::PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"])
        .map(|d| std::path::PathBuf::from(d).join("nginx"))
        .find(|p| p.is_file());
    found
}

/// Rules in nginx's text order: (allow?, network or `all`).
type Rules = Vec<(bool, String)>;

/// Random rules over 127.0.0.0/22 (where the clients are); host bits are left set as
/// drawn, as an operator may write them.
fn random_rules(rng: &mut edge_rand::SplitMix64, n: usize) -> Rules {
    let mut rules: Rules = (0..n)
        .map(|_| {
            let a = 0x7f00_0000u32 | (rng.next_u64() as u32 & 0x3ff);
            // Mostly wide networks, so that a client meets several rules of a list.
            let len = if rng.below(4) == 0 {
                29 + rng.below(4)
            } else {
                22 + rng.below(7)
            };
            let net = if len == 32 && rng.below(2) == 0 {
                std::net::Ipv4Addr::from(a).to_string()
            } else {
                format!("{}/{len}", std::net::Ipv4Addr::from(a))
            };
            (rng.below(2) == 0, net)
        })
        .collect();
    if rng.below(2) == 0 {
        rules.push((rng.below(3) == 0, "all".into()));
    }
    rules
}

/// Differential test: random access lists and a random geo table, written as an
/// `nginx.conf` and as TOML, and the same clients (bound to addresses across
/// 127.0.0.0/22) sent to both. Every status (empty_gif behind the rules: 200 or 403)
/// and every geo value must agree. Covers interleaved rules (`access_rules` against
/// nginx's text order), allow-then-deny lists written as `allow`/`deny`, host bits in
/// rules, `all`, server rules inherited by locations without rules, and longest-prefix
/// geo lookups. nginx must be installed (`.ci/run` does): without it the test fails,
/// unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`.
#[test]
fn access_and_geo_agree_with_nginx() {
    let Some(nginx) = nginx_binary() else {
        edge_testkit::fallback(
            "access differential test against nginx",
            "nginx is not installed (apt-get install nginx)",
        );
        return;
    };
    let mut rng = edge_rand::SplitMix64::new(0x27_acc);
    let q = |s: &str| format!("\"{s}\"");
    let server_rules = random_rules(&mut rng, 4);
    // (location, rules; None: inherits the server's; true: written as allow/deny)
    let mut locations: Vec<(String, Option<Rules>, bool)> = Vec::new();
    for i in 0..16 {
        let rules = match i % 4 {
            0 => None,
            1 => {
                // Allows, then denies: the order `allow`/`deny` keys stand for.
                let n = 1 + rng.below(6) as usize;
                let mut r = random_rules(&mut rng, n);
                r.sort_by_key(|(allow, _)| !*allow);
                Some(r)
            }
            _ => {
                let n = 1 + rng.below(8) as usize;
                Some(random_rules(&mut rng, n))
            }
        };
        locations.push((format!("/l{i}"), rules, i % 4 == 1));
    }
    let mut geo: Vec<(String, String)> = Vec::new();
    for i in 0..30 {
        let a = 0x7f00_0000u32 | (rng.next_u64() as u32 & 0x3ff);
        let len = 22 + rng.below(11);
        let net = format!(
            "{}/{len}",
            std::net::Ipv4Addr::from(a & (u32::MAX << (32 - len)))
        );
        if !geo.iter().any(|(n, _)| *n == net) {
            geo.push((net, format!("v{i}")));
        }
    }

    // edgecache: the server's rules at the top level (top-level locations inherit them).
    let toml_rules = |rules: &[(bool, String)], split: bool| -> String {
        if split {
            let list = |want: bool| {
                let v: Vec<String> = rules
                    .iter()
                    .filter(|(a, _)| *a == want)
                    .map(|(_, n)| q(n))
                    .collect();
                v.join(", ")
            };
            format!("allow = [{}]\ndeny = [{}]\n", list(true), list(false))
        } else {
            let items: Vec<String> = rules
                .iter()
                .map(|(a, n)| format!("{{ {} = {} }}", if *a { "allow" } else { "deny" }, q(n)))
                .collect();
            format!("access_rules = [{}]\n", items.join(", "))
        }
    };
    let mut toml = format!(
        "{HEAD}{}\n[[listen]]\naddr = \"{{listen}}\"\n",
        toml_rules(&server_rules, false)
    );
    for (path, rules, split) in &locations {
        toml.push_str(&format!(
            "[[location]]\nexact = \"{path}\"\nempty_gif = true\n"
        ));
        if let Some(r) = rules {
            toml.push_str(&toml_rules(r, *split));
        }
    }
    toml.push_str("[[location]]\nexact = \"/geo\"\nreturn = { status = 200, body = \"$g\" }\nallow = [\"all\"]\n");
    let ranges: Vec<String> = geo
        .iter()
        .map(|(n, v)| format!("{} = {}", q(n), q(v)))
        .collect();
    toml.push_str(&format!(
        "[[geo]]\nvariable = \"$g\"\ndefault = \"ZZ\"\nranges = {{ {} }}\n",
        ranges.join(", ")
    ));
    let (_ec, ec_addr, _) = edgecache(&toml);

    let nginx_rules = |rules: &[(bool, String)]| -> String {
        rules
            .iter()
            .map(|(a, n)| format!("{} {n}; ", if *a { "allow" } else { "deny" }))
            .collect()
    };
    let (_ng, ng_addr) = edge_testkit::start_listening(|| {
        let dir = tempfile::tempdir().unwrap();
        let addr = edge_testkit::free_addr();
        let d = dir.path().display();
        let mut conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n\
             access_log off;\ndefault_type text/plain;\n\
             client_body_temp_path {d}/cbt; proxy_temp_path {d}/pt; fastcgi_temp_path {d}/ft;\n\
             uwsgi_temp_path {d}/ut; scgi_temp_path {d}/st;\ngeo $g {{ default ZZ; "
        );
        for (n, v) in &geo {
            conf.push_str(&format!("{n} {v}; "));
        }
        conf.push_str(&format!(
            "}}\nserver {{\nlisten {addr};\n{}\n",
            nginx_rules(&server_rules)
        ));
        for (path, rules, _) in &locations {
            let r = rules.as_deref().map(nginx_rules).unwrap_or_default();
            conf.push_str(&format!("location = {path} {{ {r}empty_gif; }}\n"));
        }
        conf.push_str("location = /geo { allow all; return 200 \"$g\"; }\n}\n}\n");
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let prefix = format!("{d}/");
        let err = format!("{d}/error.log");
        let path = path.display().to_string();
        let mut p =
            edge_testkit::Proc::spawn_in(&nginx, &["-p", &prefix, "-e", &err, "-c", &path], dir);
        p.try_wait_port(addr, START).map_err(|mut e| {
            let log = std::fs::read_to_string(&err).unwrap_or_default();
            e.port_taken |= log.contains("Address already in use");
            e.message.push_str(&format!("\nerror.log:\n{log}"));
            e
        })?;
        Ok((p, addr))
    });

    let paths: Vec<&str> = locations
        .iter()
        .map(|(p, _, _)| p.as_str())
        .chain(["/geo"])
        .collect();
    // Clients: at the first and last address of every network of the rules and of the
    // geo table, just outside them, and at random across the /22.
    let mut sources: Vec<u32> = Vec::new();
    let all_rules = locations
        .iter()
        .filter_map(|(_, r, _)| r.as_ref())
        .flatten()
        .chain(&server_rules)
        .map(|(_, n)| n)
        .chain(geo.iter().map(|(n, _)| n));
    for net in all_rules {
        let Some((a, len)) = net.split_once('/') else {
            continue;
        };
        let (a, len): (std::net::Ipv4Addr, u32) = (a.parse().unwrap(), len.parse().unwrap());
        let first = u32::from(a) & (u32::MAX << (32 - len));
        let last = first | !(u32::MAX << (32 - len));
        sources.extend([first, last, first.wrapping_sub(1), last.wrapping_add(1)]);
    }
    sources.extend((0..40).map(|_| 0x7f00_0000u32 | (rng.next_u64() as u32 & 0x3ff)));
    // Loopback only (127/8; not 127.0.0.0 itself), each once.
    sources.retain(|a| a >> 24 == 127 && *a != 0x7f00_0000);
    sources.sort_unstable();
    sources.dedup();
    let mut differ = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for &a in &sources {
        let src = std::net::Ipv4Addr::from(a).to_string();
        let want = get_all(&src, ng_addr, &paths, &[]);
        let got = get_all(&src, ec_addr, &paths, &[]);
        for ((path, w), g) in paths.iter().zip(&want).zip(&got) {
            *seen.entry((path == &"/geo", w.status)).or_insert(0) += 1;
            let same = w.status == g.status && (*path != "/geo" || w.body == g.body);
            if !same {
                differ.push(format!(
                    "{src} {path}: nginx {} {:?}, edgecache {} {:?}",
                    w.status, w.body, g.status, g.body
                ));
            }
        }
    }
    // The mix must reach both answers, or it compares less than it claims.
    assert!(sources.len() >= 150, "{} clients", sources.len());
    assert!(
        seen.contains_key(&(false, 200)) && seen.contains_key(&(false, 403)),
        "{seen:?}"
    );
    assert!(
        differ.is_empty(),
        "{} answers differ:\n{}\nconfig:\n{toml}",
        differ.len(),
        differ.join("\n")
    );
}
