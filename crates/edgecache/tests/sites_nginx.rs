//! Differential test of sites against nginx: the same servers and locations written as
//! an `nginx.conf` and as edgecache TOML (both generated from one description below),
//! then a deterministic mix of (Host, URI) requests sent to both; every answer must have
//! the same status, the same `Location`, and for a 200 the same body. Every location
//! answers with `return 200 "loc=NAME uri=$uri args=$args cap=$1 ..."`, a redirect, or a
//! proxy to an echo upstream (which answers with the target it received), so a body
//! names the server and location that took the request and what the variables held.
//!
//! Covered: exact names, `*.lead` (longest wins), `trail.*`, `.dot` names, regex names
//! with numbered and named captures (config order), a `default_server` that is not the
//! first; `=`, prefix, `^~`, `~` and `~*` locations with captures and named captures;
//! rewrites with `last`, `break` (into a proxy), `redirect`, `permanent`, no flag (the
//! location's `return` answers, or a new search), an absolute replacement, args set,
//! kept and dropped (`?`), a chain of exactly 10 URI changes and one of 11 (500), a
//! loop (500); `return` with variables in bodies and in `Location`.
//!
//! Kept out (documented in docs/sites.md "Deliberate differences"): URIs nginx
//! normalizes (`%XX`, `//`, `/./`, `/../`), invalid hosts (nginx: 400), `break`
//! followed by `return` in one location (nginx skips the `return`), and error-page
//! bodies (only the status of a 404/500 is compared).
//!
//! nginx must be installed (`apt-get install nginx`; `.ci/run` does): without it the
//! test fails, unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`.

mod common;

use edge_testkit::{fallback, free_addr, Proc};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy)]
enum Kind {
    Exact,
    Prefix,
    /// `^~`
    Stop,
    Regex,
    IRegex,
}

enum Act {
    /// `return 200 "<body>"`.
    Body(String),
    /// `return <status> "<location>"`.
    Redirect(u16, &'static str),
    /// Proxied to the echo upstream.
    Proxy,
}

struct Loc {
    kind: Kind,
    pat: &'static str,
    /// (regex, replacement, flag)
    rewrites: Vec<(&'static str, &'static str, Option<&'static str>)>,
    act: Act,
}

struct Srv {
    names: Vec<&'static str>,
    default: bool,
    locs: Vec<Loc>,
}

fn loc(kind: Kind, pat: &'static str, act: Act) -> Loc {
    Loc {
        kind,
        pat,
        rewrites: Vec::new(),
        act,
    }
}

fn rw(
    kind: Kind,
    pat: &'static str,
    rewrites: Vec<(&'static str, &'static str, Option<&'static str>)>,
    act: Act,
) -> Loc {
    Loc {
        kind,
        pat,
        rewrites,
        act,
    }
}

/// The body every plain location answers with.
fn body(tag: &str, name: &str, extra: &str) -> Act {
    Act::Body(format!(
        "loc={tag}-{name} uri=$uri args=$args cap=$1{extra}"
    ))
}

/// Every kind of location and rewrite, for the servers that are tested in depth.
fn full(tag: &str) -> Vec<Loc> {
    use Kind::*;
    vec![
        loc(Exact, "/", body(tag, "root-exact", "")),
        loc(Prefix, "/", body(tag, "root", "")),
        loc(Exact, "/exact", body(tag, "exact", "")),
        loc(Prefix, "/exact", body(tag, "exact-prefix", "")),
        loc(Stop, "/static/", body(tag, "static-stop", "")),
        loc(Prefix, "/static/deep/", body(tag, "static-deep", "")),
        loc(Regex, r"\.(png|jpg)$", body(tag, "img", " 2=$2")),
        loc(IRegex, r"^/case/(\w+)", body(tag, "case", "")),
        loc(
            Regex,
            r"^/user/(?<id>[0-9]+)(/(?<tab>[a-z]+))?$",
            body(tag, "user", " id=$id tab=$tab 2=$2 3=$3"),
        ),
        rw(
            Prefix,
            "/old/",
            vec![
                (r"^/old/last/(.*)$", "/new/$1", Some("last")),
                (r"^/old/perm/(.*)$", "/new/$1", Some("permanent")),
                (r"^/old/temp/(.*)$", "/new/$1?from=temp", Some("redirect")),
                (r"^/old/drop/(.*)$", "/new/$1?", Some("last")),
                (r"^/old/setargs/(.*)$", "/new/$1?set=1", Some("last")),
                (r"^/old/abs/(.*)$", "https://$host/abs/$1", None),
                (r"^/old/noflag/(.*)$", "/new/nf-$1", None),
                (r"^/old/two/(.*)$", "/old/noflag/$1", None),
            ],
            body(tag, "old", " rq=$request_uri"),
        ),
        loc(Prefix, "/new/", body(tag, "new", " rq=$request_uri")),
        rw(
            Prefix,
            "/chain/",
            vec![(r"^/chain/(a*)b(.*)$", "/chain/$1a$2", Some("last"))],
            body(tag, "chain", ""),
        ),
        rw(
            Prefix,
            "/loop",
            vec![(r"^/loop(.*)$", "/loop$1", Some("last"))],
            body(tag, "loop", ""),
        ),
        rw(
            Prefix,
            "/brk",
            vec![(r"^/brk/(.*)$", "/backend/$1?b=1", Some("break"))],
            Act::Proxy,
        ),
        rw(
            Prefix,
            "/nf",
            vec![(r"^/nf/(.*)$", "/new/$1", None)],
            Act::Proxy,
        ),
        loc(Prefix, "/proxy", Act::Proxy),
        loc(
            Prefix,
            "/ret/",
            Act::Redirect(301, "https://$host$request_uri"),
        ),
        loc(Exact, "/r302", Act::Redirect(302, "/target?x=$arg_x")),
        loc(
            Prefix,
            "/vars",
            Act::Body(format!(
                "loc={tag}-vars host=$host is_args=$is_args args=$args arg_a=$arg_a rq=$request_uri m=$request_method sn=$server_name"
            )),
        ),
    ]
}

fn sites() -> Vec<Srv> {
    use Kind::*;
    vec![
        Srv {
            names: vec!["example.com", "www.example.com"],
            default: false,
            locs: full("a"),
        },
        Srv {
            names: vec!["*.example.com", "*.wild.example.net"],
            default: false,
            locs: vec![
                loc(
                    Prefix,
                    "/",
                    body("b", "root", " host=$host sn=$server_name"),
                ),
                loc(
                    Regex,
                    r"^/(?<seg>[a-z]+)/",
                    body("b", "seg", " seg=$seg host=$host"),
                ),
            ],
        },
        Srv {
            names: vec!["*.a.example.com"],
            default: false,
            locs: vec![loc(Prefix, "/", body("c", "root", " host=$host"))],
        },
        Srv {
            names: vec!["example.*"],
            default: false,
            // No "/" location: a path outside these is a 404.
            locs: vec![
                loc(Prefix, "/d/", body("d", "d", " host=$host")),
                loc(Regex, r"^/user/", body("d", "user", "")),
            ],
        },
        Srv {
            names: vec![".dot.example", "www.example.*"],
            default: false,
            locs: vec![loc(
                Prefix,
                "/",
                body("e", "root", " host=$host sn=$server_name"),
            )],
        },
        Srv {
            names: vec![r"~^(?<sub>[a-z0-9]+)\.example\.net$"],
            default: false,
            locs: {
                let mut l = full("f");
                l.push(loc(
                    Prefix,
                    "/sub",
                    body("f", "sub", " sub=$sub host=$host"),
                ));
                l
            },
        },
        Srv {
            names: vec![r"~^api-(\d+)\.example\.(org|io)$"],
            default: false,
            locs: vec![
                loc(Prefix, "/", body("g", "root", " 2=$2 host=$host")),
                loc(Regex, r"^/v(\d)/", body("g", "ver", " 2=$2")),
            ],
        },
        Srv {
            names: vec!["~^api-(?<rest>.+)$"],
            default: false,
            locs: vec![loc(
                Prefix,
                "/",
                body("g2", "root", " rest=$rest sn=$server_name"),
            )],
        },
        Srv {
            names: vec!["default.test"],
            default: true,
            locs: full("h"),
        },
        Srv {
            names: vec!["last.test"],
            default: false,
            locs: vec![loc(Prefix, "/", body("i", "root", ""))],
        },
    ]
}

fn kind_nginx(k: Kind) -> &'static str {
    match k {
        Kind::Exact => "= ",
        Kind::Prefix => "",
        Kind::Stop => "^~ ",
        Kind::Regex => "~ ",
        Kind::IRegex => "~* ",
    }
}

/// nginx config text: one server block per site.
fn nginx_conf(dir: &std::path::Path, port: u16, echo: SocketAddr, sites: &[Srv]) -> String {
    let d = dir.display();
    let mut s = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n\
         access_log off;\ndefault_type text/plain;\nabsolute_redirect off;\n\
         server_names_hash_bucket_size 128;\n\
         client_body_temp_path {d}/cbt; proxy_temp_path {d}/pt; fastcgi_temp_path {d}/ft;\n\
         uwsgi_temp_path {d}/ut; scgi_temp_path {d}/st;\n\
         upstream echo {{ server {echo}; }}\n"
    );
    for srv in sites {
        let q = |x: &str| {
            assert!(!x.contains('"') && !x.contains("\\\\"), "{x}");
            format!("\"{x}\"")
        };
        let _ = writeln!(
            s,
            "server {{\n listen 127.0.0.1:{port}{};\n server_name {};",
            if srv.default { " default_server" } else { "" },
            srv.names.iter().map(|n| q(n)).collect::<Vec<_>>().join(" ")
        );
        for l in &srv.locs {
            let _ = writeln!(s, " location {}{} {{", kind_nginx(l.kind), q(l.pat));
            for (re, repl, flag) in &l.rewrites {
                let _ = writeln!(s, "  rewrite {} {} {};", q(re), q(repl), flag.unwrap_or(""));
            }
            match &l.act {
                Act::Body(b) => {
                    let _ = writeln!(s, "  return 200 {};", q(b));
                }
                Act::Redirect(st, to) => {
                    let _ = writeln!(s, "  return {st} {};", q(to));
                }
                Act::Proxy => s.push_str("  proxy_pass http://echo;\n"),
            }
            s.push_str(" }\n");
        }
        s.push_str("}\n");
    }
    s.push_str("}\n");
    s
}

/// The same sites as edgecache TOML.
fn edgecache_toml(echo: SocketAddr, sites: &[Srv]) -> String {
    let lit = |x: &str| {
        assert!(!x.contains('\''), "{x}");
        format!("'{x}'")
    };
    let mut s = format!(
        "workers = 1\nworker_cpu_affinity = \"off\"\naccess_log = \"off\"\n\
         [[listen]]\naddr = \"{{listen}}\"\n\
         [[upstream]]\nname = \"echo\"\nservers = [\"{echo}\"]\n"
    );
    for srv in sites {
        let _ = writeln!(
            s,
            "\n[[server]]\nnames = [{}]\ndefault = {}",
            srv.names
                .iter()
                .map(|n| lit(n))
                .collect::<Vec<_>>()
                .join(", "),
            srv.default
        );
        for l in &srv.locs {
            s.push_str("[[server.location]]\n");
            let _ = match l.kind {
                Kind::Exact => writeln!(s, "exact = {}", lit(l.pat)),
                Kind::Prefix => writeln!(s, "prefix = {}", lit(l.pat)),
                Kind::Stop => writeln!(s, "prefix = {}\nstop_regex = true", lit(l.pat)),
                Kind::Regex => writeln!(s, "regex = {}", lit(l.pat)),
                Kind::IRegex => writeln!(s, "iregex = {}", lit(l.pat)),
            };
            if !l.rewrites.is_empty() {
                let list: Vec<String> = l
                    .rewrites
                    .iter()
                    .map(|(re, repl, flag)| {
                        let flag = flag
                            .map(|f| format!(", flag = \"{f}\""))
                            .unwrap_or_default();
                        format!(
                            "{{ regex = {}, replacement = {}{flag} }}",
                            lit(re),
                            lit(repl)
                        )
                    })
                    .collect();
                let _ = writeln!(s, "rewrite = [{}]", list.join(", "));
            }
            let _ = match &l.act {
                Act::Body(b) => writeln!(s, "return = {{ status = 200, body = {} }}", lit(b)),
                Act::Redirect(st, to) => {
                    writeln!(s, "return = {{ status = {st}, location = {} }}", lit(to))
                }
                Act::Proxy => writeln!(s, "proxy = \"echo\""),
            };
        }
    }
    s
}

/// An upstream that answers every request with `echo <request target>`.
fn echo_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&buf);
                let target = text.split(' ').nth(1).unwrap_or("").to_string();
                let body = format!("echo {target}");
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    addr
}

#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    location: String,
    body: String,
}

fn get(addr: SocketAddr, host: &str, target: &str) -> Answer {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Answer {
            status: 0,
            location: String::new(),
            body: text.into_owned(),
        };
    };
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let location = common::head_field(head, "location").unwrap_or_default();
    Answer {
        status,
        location,
        // Only a 200's body is compared (error pages differ by design).
        body: if status == 200 {
            body.to_string()
        } else {
            String::new()
        },
    }
}

fn nginx_binary() -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"])
        .map(|d| PathBuf::from(d).join("nginx"))
        .find(|p| p.is_file());
    found
}

const HOSTS: &[&str] = &[
    "example.com",
    "EXAMPLE.COM",
    "example.com:8080",
    "example.com.",
    "Example.Com.:80",
    "www.example.com",
    "x.example.com",
    "X.Example.Com.:1234",
    "a.example.com",
    "y.a.example.com",
    "z.y.a.example.com",
    "p.wild.example.net",
    "example.org",
    "Example.Co.UK",
    "www.example.org",
    "dot.example",
    "deep.dot.example:99",
    "shop.example.net",
    "Shop.Example.Net:443",
    "a.b.example.net",
    "api-42.example.org",
    "API-7.example.io.",
    "api-x.example.org",
    "default.test",
    "last.test",
    "unknown.test",
    "127.0.0.1",
    "[::1]:8080",
];

const URIS: &[&str] = &[
    "/",
    "/?q=1",
    "/index.html",
    "/exact",
    "/exact?x=1",
    "/exact/",
    "/exactly",
    "/exac",
    "/static/",
    "/static/a.png",
    "/static/deep/x.png",
    "/static/deep/x.txt",
    "/static",
    "/x.png",
    "/x.PNG",
    "/dir/y.jpg?v=2",
    "/case/Foo",
    "/CaSe/bar",
    "/CASE/",
    "/user/12",
    "/user/12/posts",
    "/user/12/Posts",
    "/user/abc",
    "/user/",
    "/old/last/foo?k=v",
    "/old/last/x.png",
    "/old/perm/a?k=v",
    "/old/perm/a",
    "/old/temp/b?k=v",
    "/old/temp/b",
    "/old/drop/c?k=v",
    "/old/setargs/s?k=v",
    "/old/setargs/s",
    "/old/abs/d?q=1",
    "/old/noflag/e?z=9",
    "/old/two/t",
    "/old/other",
    "/new/zz?y=2",
    "/chain/bbbbbbbbb",
    "/chain/bbbbbbbbbb?n=10",
    "/chain/bbbbbbbbbbb",
    "/chain/aab",
    "/loop/x",
    "/loop",
    "/brk/p?o=1",
    "/brk",
    "/nf/q?o=2",
    "/proxy/a?b=c",
    "/ret/z?k=1",
    "/r302?x=5",
    "/r302",
    "/r302/",
    "/vars?a=1&A=2&b",
    "/vars?",
    "/vars",
    "/d/x",
    "/d",
    "/sub/1",
    "/v2/x",
    "/seg/x",
];

#[test]
fn sites_answer_as_nginx_does() {
    let Some(nginx) = nginx_binary() else {
        fallback(
            "sites differential test against nginx",
            "nginx is not installed (apt-get install nginx)",
        );
        return;
    };
    let echo = echo_upstream();
    let sites = sites();
    let (_ec, ec_addr, _) = common::edgecache(&edgecache_toml(echo, &sites));
    let (_ng, ng_addr) = edge_testkit::start_listening(|| {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, nginx_conf(dir.path(), addr.port(), echo, &sites)).unwrap();
        let prefix = format!("{}/", dir.path().display());
        let err = format!("{}/error.log", dir.path().display());
        let conf = conf.display().to_string();
        let mut p = Proc::spawn_in(&nginx, &["-p", &prefix, "-e", &err, "-c", &conf], dir);
        p.try_wait_port(addr, common::START).map_err(|mut e| {
            let log = std::fs::read_to_string(&err).unwrap_or_default();
            e.port_taken |= log.contains("Address already in use");
            e.message.push_str(&format!("\nerror.log:\n{log}"));
            e
        })?;
        Ok((p, addr))
    });

    let mut differ = Vec::new();
    let mut n = 0;
    let mut statuses = std::collections::BTreeMap::new();
    for host in HOSTS {
        for uri in URIS {
            let want = get(ng_addr, host, uri);
            let got = get(ec_addr, host, uri);
            n += 1;
            *statuses.entry(want.status).or_insert(0) += 1;
            if want != got {
                differ.push(format!(
                    "Host: {host} GET {uri}\n  nginx:     {want:?}\n  edgecache: {got:?}"
                ));
            }
        }
    }
    assert!(n >= 200, "{n} requests");
    // The mix must reach every kind of answer, or it compares less than it claims.
    for st in [200, 301, 302, 404, 500] {
        assert!(statuses.contains_key(&st), "no {st} in {statuses:?}");
    }
    assert!(
        differ.is_empty(),
        "{} of {n} requests answered differently:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
