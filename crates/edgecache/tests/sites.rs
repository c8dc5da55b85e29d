//! Sites against the real binary: `[[server]]` chosen by Host (exact, wildcard, regex
//! with captures; case, port and trailing dot ignored), locations in nginx's order
//! (exact, `^~`, regex, longest prefix), rewrites (last, break, redirect, permanent, a
//! cycle answered 500), `return` rendering variables, `[[map]]`, `-t` refusing an
//! unknown variable with its line, and 421 on a TLS listener when the Host is one the
//! SNI-chosen certificate does not cover. Every answer is a `return` that echoes what
//! was matched, so the bytes tell which server and location took the request.

mod common;

use common::{check_config, edgecache};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

/// Sends `GET target` with `Host: host` (HTTP/1.1, close) and returns the status, the
/// `Location` header and the body.
fn get(addr: SocketAddr, target: &str, host: &str) -> (u16, String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        c,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: GoogleBot/2.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

fn parse(raw: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole head");
    let status = head[9..12].parse().unwrap();
    let location = common::head_field(head, "location").unwrap_or_default();
    (status, location, body.to_string())
}

const CONFIG: &str = r#"
[[listen]]
addr = "{listen}"

[[map]]
source = "$http_user_agent"
variable = "$is_bot"
default = "0"
entries = [{ match = "~*bot", value = "1:$host" }]

[[location]]
prefix = "/"
return = { status = 200, body = "implicit host=$host" }

[[server]]
names = ["example.com", "*.example.org"]
[[server.location]]
prefix = "/"
return = { status = 200, body = "example server=$server_name uri=$uri args=$args" }
[[server.location]]
exact = "/x.png"
return = { status = 200, body = "exact" }
[[server.location]]
prefix = "/static/"
stop_regex = true
return = { status = 200, body = "static" }
[[server.location]]
regex = '^/img/(?<name>[^/]+)\.(png|jpg)$'
return = { status = 200, body = "loc=regex1 name=$name ext=$2 bot=$is_bot" }
[[server.location]]
iregex = '\.PNG$'
return = { status = 200, body = "loc=regex2" }
[[server.location]]
prefix = "/old/"
rewrite = [
  { regex = '^/old/last/(.*)$', replacement = "/img/$1", flag = "last" },
  { regex = '^/old/break/(.*)$', replacement = "/b/$1?via=break", flag = "break" },
  { regex = '^/old/perm/(.*)$', replacement = "/new/$1", flag = "permanent" },
  { regex = '^/old/temp$', replacement = "https://$host/t", flag = "redirect" },
  { regex = '^/old/loop(.*)$', replacement = "/old/loop$1x", flag = "last" },
]
return = { status = 200, body = "old uri=$uri args=$args request_uri=$request_uri" }
[[server.location]]
prefix = "/go"
return = { status = 301, location = "https://$host$request_uri" }

[[server]]
names = ['~^(?<sub>[a-z]+)\.example\.net$']
[[server.location]]
prefix = "/"
return = { status = 200, body = "net sub=$sub 1=$1 uri=$uri" }
"#;

#[test]
fn servers_locations_rewrites_and_variables() {
    let (_p, addr, _) = edgecache(CONFIG);
    let body = |target: &str, host: &str| {
        let (st, _, b) = get(addr, target, host);
        assert_eq!(st, 200, "{target} {host}: {b}");
        b
    };
    // Servers by host.
    assert_eq!(body("/", "other.test"), "implicit host=other.test");
    assert_eq!(
        body("/a?q=1", "EXAMPLE.com.:8080"),
        "example server=example.com uri=/a args=q=1"
    );
    assert_eq!(
        body("/a", "www.example.org"),
        "example server=example.com uri=/a args="
    );
    assert_eq!(
        body("/p/q", "Shop.example.net"),
        "net sub=shop 1=shop uri=/p/q"
    );
    // Locations in nginx order.
    assert_eq!(body("/x.png", "example.com"), "exact");
    assert_eq!(body("/static/a.png", "example.com"), "static");
    assert_eq!(
        body("/img/cat.jpg", "example.com"),
        "loc=regex1 name=cat ext=jpg bot=1:example.com"
    );
    assert_eq!(body("/y/Z.PNG", "example.com"), "loc=regex2");
    // Rewrites. (A `.png` under /old/ would go to the iregex location: regexes win
    // over a prefix without `^~`, before its rewrites run.)
    assert_eq!(body("/old/last/dog.png", "example.com"), "loc=regex2");
    assert_eq!(
        body("/old/last/dog.jpg", "example.com"),
        "loc=regex1 name=dog ext=jpg bot=1:example.com"
    );
    assert_eq!(
        body("/old/break/z?k=v", "example.com"),
        "old uri=/b/z args=via=break&k=v request_uri=/old/break/z?k=v"
    );
    assert_eq!(
        get(addr, "/old/perm/a?k=v", "example.com"),
        (
            301,
            "/new/a?k=v".into(),
            get(addr, "/old/perm/a?k=v", "example.com").2
        )
    );
    let (st, loc, _) = get(addr, "/old/temp", "Example.com:81");
    assert_eq!((st, loc.as_str()), (302, "https://example.com/t"));
    let (st, _, _) = get(addr, "/old/loop", "example.com");
    assert_eq!(st, 500, "a rewrite cycle");
    // `return` with variables in `location`.
    let (st, loc, _) = get(addr, "/go/x?y=1", "example.com");
    assert_eq!((st, loc.as_str()), (301, "https://example.com/go/x?y=1"));
}

#[test]
fn unknown_variables_are_refused_by_dash_t() {
    let (code, stderr, path) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8080\"\n[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:9\"]\n\
         [[location]]\nprefix = \"/\"\nproxy = \"o\"\ncache_key = \"$scheme://$host$request_url\"\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{path}:9: location.cache_key: unknown variable \"$request_url\""
        )),
        "{stderr}"
    );
}

/// A CA and leaves signed by it, written to a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca, ca_key }
    }

    fn leaf(&self, tag: &str, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let c = self.dir.path().join(format!("{tag}.pem"));
        let k = self.dir.path().join(format!("{tag}.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.display().to_string(), k.display().to_string())
    }

    fn client(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(cfg)
    }
}

/// GET over TLS with SNI `sni` and `Host: host`: status and body.
fn tls_get(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    sni: &str,
    host: &str,
) -> (u16, String) {
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    write!(
        tls,
        "GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    // The server ends with close_notify; an abrupt end still leaves the bytes read.
    let _ = tls.read_to_end(&mut raw);
    let (st, _, body) = parse(&raw);
    (st, body)
}

#[test]
fn tls_host_outside_the_sni_certificate_is_misdirected() {
    let pki = Pki::new();
    let (ca, ka) = pki.leaf("a", &["a.example"]);
    let (cb, kb) = pki.leaf("b", &["b.example", "*.b.example"]);
    let config = format!(
        r#"
[[listen]]
addr = "{{listen}}"
tls = {{ certs = [{{ cert = "{ca}", key = "{ka}" }}, {{ cert = "{cb}", key = "{kb}" }}] }}

[[server]]
names = ["a.example"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "a $scheme $host" }}

[[server]]
names = ["b.example", "*.b.example"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "b $scheme $host" }}
"#
    );
    let (_p, addr, _) = edgecache(&config);
    let client = pki.client();
    assert_eq!(
        tls_get(addr, &client, "a.example", "a.example"),
        (200, "a https a.example".into())
    );
    assert_eq!(
        tls_get(addr, &client, "b.example", "x.b.example:443"),
        (200, "b https x.b.example".into())
    );
    // The connection's certificate (a.example) does not cover b.example.
    let (st, _) = tls_get(addr, &client, "a.example", "b.example");
    assert_eq!(st, 421);
    let (st, _) = tls_get(addr, &client, "x.b.example", "a.example");
    assert_eq!(st, 421);
}

/// Locations match nginx's `$uri` (decoded, dots resolved, slashes merged), `$uri`
/// echoes it, `$request_uri` keeps what the client sent, and a proxied request goes
/// upstream with the client's own target; `%00` and `..` above the root are 400.
#[test]
fn locations_match_the_normalized_uri_and_upstream_gets_the_original() {
    let (up, seen) = common::recording_upstream();
    let (_p, addr, _) = edgecache(&format!(
        r#"
[[listen]]
addr = "{{listen}}"

[[upstream]]
name = "o"
servers = ["{up}"]

[[location]]
prefix = "/"
return = {{ status = 200, body = "root uri=$uri" }}

[[location]]
exact = "/a/c-d"
return = {{ status = 200, body = "exact uri=$uri request_uri=$request_uri" }}

[[location]]
prefix = "/up/"
proxy = "o"
"#
    ));
    let (st, _, b) = get(addr, "/a//b/../c%2Dd", "h");
    assert_eq!(
        (st, b.as_str()),
        (200, "exact uri=/a/c-d request_uri=/a//b/../c%2Dd")
    );
    let (st, _, b) = get(addr, "/x/..%2Fa/./c-d?k=1", "h");
    assert_eq!(
        (st, b.as_str()),
        (200, "exact uri=/a/c-d request_uri=/x/..%2Fa/./c-d?k=1")
    );
    let (_, _, b) = get(addr, "/caf%C3%A9/%0d%0a", "h");
    assert_eq!(b, "root uri=/café/%0D%0A", "controls stay encoded");
    let (st, _, _) = get(addr, "//up//x/../y%2Fz?q=%2F", "h");
    assert_eq!(st, 200);
    let head = seen.lock().unwrap().heads.last().cloned().unwrap();
    assert!(
        head.starts_with("GET //up//x/../y%2Fz?q=%2F HTTP/1.1\r\n"),
        "the upstream gets the original target: {head}"
    );
    for bad in ["/a%00b", "/..", "/a/%2E%2E/../x", "/a%zz"] {
        let (st, _, _) = get(addr, bad, "h");
        assert_eq!(st, 400, "{bad}");
    }
}

#[test]
fn map_cycles_and_two_defaults_on_one_address_are_refused_by_dash_t() {
    let (code, stderr, path) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8080\"\n\
         [[map]]\nsource = \"$b\"\nvariable = \"$a\"\n\
         [[map]]\nsource = \"$host\"\nvariable = \"$b\"\nentries = [{ match = \"x\", value = \"$a\" }]\n\
         [[location]]\nprefix = \"/\"\nreturn = { status = 200, body = \"$a\" }\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{path}:5: map.variable: $a depends on itself ($a -> $b -> $a)"
        )),
        "{stderr}"
    );
    let (code, stderr, path) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8080\"\n[[listen]]\naddr = \"127.0.0.1:8081\"\n\
         [[server]]\ndefault = true\nlisten = [\"127.0.0.1:8081\"]\n\
         [[server]]\nnames = [\"b.example\"]\ndefault = true\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{path}:10: server.default: server #1 is already the default server on \"127.0.0.1:8081\""
        )),
        "{stderr}"
    );
    // One default per address is fine.
    let (code, stderr, _) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8080\"\n[[listen]]\naddr = \"127.0.0.1:8081\"\n\
         [[server]]\ndefault = true\nlisten = [\"127.0.0.1:8081\"]\n\
         [[server]]\nnames = [\"b.example\"]\ndefault = true\nlisten = [\"127.0.0.1:8080\"]\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
}

/// The whole response to `GET target` with `Host: host`, as text.
fn raw_get(addr: SocketAddr, target: &str, host: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        c,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}

fn cache_status(response: &str) -> &str {
    response
        .lines()
        .find_map(|l| l.strip_prefix("X-Cache-Status: "))
        .unwrap_or("none")
}

/// docs/examples/three-sites.toml (the worked example of docs/sites.md): `-t` accepts it
/// as shipped, and, run on loopback with edgeorigin for both origins, each site does
/// what the guide says.
#[test]
fn the_three_sites_example_is_accepted_and_routes_as_documented() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/three-sites.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let (code, stderr, _) = check_config(&text);
    assert_eq!(code, Some(0), "edgecache -t {path}: {stderr}");

    let (_o, origin) = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let mut text = text;
    for (from, to) in [
        ("0.0.0.0:80", "{listen}".to_string()),
        ("/var/cache/edgecache", d.clone()),
        ("/var/log/edgecache", d.clone()),
        (
            "\"10.0.2.20:9000\", \"10.0.2.21:9000\"",
            format!("\"{origin}\""),
        ),
        (
            "\"10.0.1.10:8080\", \"10.0.1.11:8080\"",
            format!("\"{origin}\""),
        ),
        ("workers = \"auto\"", "workers = 1".to_string()),
    ] {
        assert!(text.contains(from), "the example no longer has {from}");
        text = text.replace(from, &to);
    }
    let (_p, addr, _) = edgecache(&text);

    // 3. The legacy domain only redirects (a rewrite, then the return), query kept.
    assert_eq!(
        get(addr, "/product/12?x=1", "old-shop.example"),
        (
            301,
            "https://shop.example.com/p/12?x=1".into(),
            get(addr, "/product/12?x=1", "old-shop.example").2
        )
    );
    let (st, loc, _) = get(addr, "/about?a=b", "WWW.old-shop.example.");
    assert_eq!(
        (st, loc.as_str()),
        (301, "https://shop.example.com/about?a=b")
    );
    // An unknown host gets the default server's 404, not a site.
    let (st, _, body) = get(addr, "/obj/1k/1", "nobody.example");
    assert_eq!((st, body.as_str()), (404, "unknown site\n"));

    // 2. The shop: one cache entry whatever the order and tracking arguments, and no
    // cache status fields for clients (so the origin's count tells hits from misses).
    let n0 = common::origin_requests(origin);
    let first = raw_get(
        addr,
        "/obj/1k/1?id=7&utm_source=a&page=2",
        "shop.example.com",
    );
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert_eq!(cache_status(&first), "none", "hidden: {first}");
    assert!(
        !first.to_ascii_lowercase().contains("\r\ncache-status:"),
        "{first}"
    );
    assert_eq!(common::origin_requests(origin), n0 + 1);
    let again = raw_get(
        addr,
        "/obj/1k/1?page=2&fbclid=z&utm_source=b&id=7",
        "Shop.Example.com",
    );
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert_eq!(
        common::origin_requests(origin),
        n0 + 1,
        "one entry: {again}"
    );
    raw_get(addr, "/obj/1k/1?id=8&page=2", "shop.example.com");
    assert_eq!(
        common::origin_requests(origin),
        n0 + 2,
        "another id is another page"
    );

    // 1. The bucket: the key is the path alone.
    let a = raw_get(addr, "/obj/1k/2?v=1", "assets.example.com");
    assert_eq!(cache_status(&a), "MISS", "{a}");
    let b = raw_get(addr, "/obj/1k/2?v=2", "assets.example.com");
    assert_eq!(cache_status(&b), "HIT", "{b}");
}

/// Reads one response with a `Content-Length` body from a keep-alive connection.
fn read_response(c: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "the connection closed");
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_string();
    let len: usize = common::head_field(&head, "content-length")
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0; len];
    c.read_exact(&mut body).unwrap();
    (
        head[9..12].parse().unwrap(),
        String::from_utf8(body).unwrap(),
    )
}

#[test]
fn one_keep_alive_connection_changing_host_and_a_reload_route_every_request_anew() {
    // The server a connection's last Host chose is kept for its next request with the
    // same Host: another Host on the same connection, and a reload that moves a name to
    // another server, must still route by the request in hand.
    let config = |a: &str, b: &str| {
        format!(
            "[[listen]]\naddr = \"{{listen}}\"\n[admin]\nlisten = \"{{admin}}\"\n\
             [[server]]\nnames = [{a}]\n[[server.location]]\nprefix = \"/\"\n\
             return = {{ status = 200, body = \"A\" }}\n\
             [[server]]\nnames = [{b}]\n[[server.location]]\nprefix = \"/\"\n\
             return = {{ status = 200, body = \"B\" }}\n"
        )
    };
    let first = config("'a.test'", "'b.test', '~^r(?<n>[0-9])\\.test$'");
    let (p, addr, admin) = edgecache(&first);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let ask = |c: &mut TcpStream, host: &str| {
        write!(c, "GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        read_response(c).1
    };
    let hosts = [
        "a.test",
        "a.test",
        "b.test",
        "A.TEST",
        "b.test:80",
        "r1.test",
        "r1.test",
        "a.test",
        "zz.test",
    ];
    let want = ["A", "A", "B", "A", "B", "B", "B", "A", "A"];
    for (h, w) in hosts.iter().zip(want) {
        assert_eq!(ask(&mut c, h), w, "{h}");
    }
    // The same open connection after a reload that swaps the names.
    common::reload(&p, addr, admin, &config("'b.test'", "'a.test'"));
    assert_eq!(
        ask(&mut c, "a.test"),
        "B",
        "a reload must not leave a stale choice"
    );
    assert_eq!(ask(&mut c, "a.test"), "B");
    assert_eq!(ask(&mut c, "b.test"), "A");
}
