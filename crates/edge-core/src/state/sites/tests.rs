use super::*;
use crate::state::route::Handler;
use std::collections::HashMap;

fn sites(text: &str) -> Sites {
    let cfg = crate::config::parse("t.toml", text).unwrap();
    let known = crate::config::sites::known(&cfg);
    let env = Env {
        upstreams: &HashMap::new(),
        caches: &HashMap::new(),
        known: &known,
        logs: &crate::state::logs::LogTable::default(),
        zones: &Default::default(),
    };
    Sites::build(&cfg, &env).unwrap()
}

fn req(target: &str, host: &str) -> RequestHead {
    let raw = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    edge_http::parse_request(raw.as_bytes(), &edge_http::Limits::default())
        .unwrap()
        .unwrap()
        .0
}

const CLIENT: Client = Client {
    peer: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        9,
    )),
    tls: false,
    server_port: 80,
};

/// What a request gets: the rendered `return` body of its location, `redirect <status>
/// <location>`, `404` or `cycle`.
fn answer(s: &Sites, listen: usize, target: &str, host: &str) -> String {
    let mut r = req(target, host);
    let mut routed = Routed::default();
    let Some(server) = s.select(listen, r.host(), &mut routed.caps) else {
        return "no server".into();
    };
    routed.server = server;
    let route = match s.route(server, &r, CLIENT, &mut routed) {
        Routing::Route(route, uri) => {
            if let Some(uri) = uri {
                routed.original_uri = Some(r.path_and_query().to_string());
                r.target = uri;
            }
            route
        }
        Routing::Redirect(st, loc) => return format!("redirect {st} {loc}"),
        Routing::NotFound => return "404".into(),
        Routing::Cycle => return "cycle".into(),
        Routing::BadRequest => return "400".into(),
    };
    let Handler::Return(ret) = &route.handler else {
        return "other".into();
    };
    let name = &s.servers[server as usize].name;
    ret.body
        .to_string(&Ctx::new(&r, CLIENT, name, &routed, &s.maps))
}

const LISTEN: &str = r#"
[[listen]]
addr = "127.0.0.1:1"
[[listen]]
addr = "127.0.0.1:2"
"#;

fn servers() -> Sites {
    sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/"
return = {{ status = 200, body = "implicit $host" }}

[[server]]
names = ["example.com", "www.example.com"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "exact $server_name" }}

[[server]]
names = ["*.example.com", ".example.org"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "lead" }}

[[server]]
names = ["*.b.example.com"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "longer lead" }}

[[server]]
names = ["mail.*"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "trail" }}

[[server]]
names = ["~^(?<sub>[a-z]+)\\.example\\.net$", "~^(\\d+)\\.example\\.net$"]
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "regex sub=$sub 1=$1" }}

[[server]]
names = ["only2.example"]
listen = ["127.0.0.1:2"]
default = true
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "only on 2" }}
"#
    ))
}

#[test]
fn hosts_pick_servers_in_nginx_order() {
    let s = servers();
    assert_eq!(answer(&s, 0, "/", "example.com"), "exact example.com");
    // Case, trailing dot and port do not matter.
    assert_eq!(
        answer(&s, 0, "/", "WWW.Example.COM.:8080"),
        "exact example.com"
    );
    assert_eq!(answer(&s, 0, "/", "a.example.com"), "lead");
    assert_eq!(answer(&s, 0, "/", "x.y.example.com"), "lead");
    assert_eq!(answer(&s, 0, "/", "c.b.example.com"), "longer lead");
    assert_eq!(
        answer(&s, 0, "/", "example.org"),
        "lead",
        ".x also matches x"
    );
    assert_eq!(
        answer(&s, 0, "/", "mail.example.com"),
        "lead",
        "leading before trailing"
    );
    assert_eq!(answer(&s, 0, "/", "mail.other.net"), "trail");
    assert_eq!(
        answer(&s, 0, "/", "Shop.Example.NET"),
        "regex sub=shop 1=shop"
    );
    assert_eq!(answer(&s, 0, "/", "42.example.net"), "regex sub= 1=42");
    // Unknown hosts: the implicit server (first), whose $host falls back to nothing.
    assert_eq!(answer(&s, 0, "/", "nope.test"), "implicit nope.test");
    assert_eq!(
        answer(&s, 0, "/", "only2.example"),
        "implicit only2.example"
    );
    // Listener 2: the server marked default takes unknown hosts there.
    assert_eq!(answer(&s, 1, "/", "only2.example"), "only on 2");
    assert_eq!(answer(&s, 1, "/", "nope.test"), "only on 2");
    assert_eq!(answer(&s, 1, "/", "example.com"), "exact example.com");
}

#[test]
fn many_regex_names_use_a_set_and_keep_config_order() {
    let mut text = LISTEN.to_string();
    for i in 0..12 {
        text.push_str(&format!(
            "[[server]]\nnames = [\"~^h{i}-(?<n{i}>[0-9]+)\\\\.test$\", \"~^hx\\\\.test$\"]\n[[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"s{i} $n{i}\" }}\n"
        ));
    }
    let s = sites(&text);
    assert_eq!(answer(&s, 0, "/", "h7-99.test"), "s7 99");
    // Several servers' patterns could match: the first in config order wins.
    assert_eq!(answer(&s, 0, "/", "hx.test"), "s0 ");
}

fn locations() -> Sites {
    sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/"
return = {{ status = 200, body = "root" }}
[[location]]
exact = "/img/logo.png"
return = {{ status = 200, body = "exact" }}
[[location]]
prefix = "/img/"
return = {{ status = 200, body = "prefix img" }}
[[location]]
prefix = "/static/"
stop_regex = true
return = {{ status = 200, body = "stop" }}
[[location]]
regex = '\.(png|jpg)$'
return = {{ status = 200, body = "regex1 ext=$1 uri=$uri" }}
[[location]]
iregex = '^/(?<sect>[a-z]+)/.*\.PNG$'
return = {{ status = 200, body = "regex2 $sect" }}
"#
    ))
}

#[test]
fn locations_in_nginx_order() {
    let s = locations();
    assert_eq!(answer(&s, 0, "/img/logo.png", "h"), "exact");
    assert_eq!(
        answer(&s, 0, "/img/a.png?x=1", "h"),
        "regex1 ext=png uri=/img/a.png"
    );
    assert_eq!(answer(&s, 0, "/img/a.gif", "h"), "prefix img");
    assert_eq!(
        answer(&s, 0, "/static/a.png", "h"),
        "stop",
        "^~ skips regexes"
    );
    assert_eq!(
        answer(&s, 0, "/docs/A.PNG", "h"),
        "regex2 docs",
        "first regex in order"
    );
    assert_eq!(answer(&s, 0, "/x.jpg", "h"), "regex1 ext=jpg uri=/x.jpg");
    assert_eq!(answer(&s, 0, "/y", "h"), "root");
}

#[test]
fn no_location_is_404() {
    let s = sites(&format!(
        "{LISTEN}[[location]]\nexact = \"/x\"\nreturn = {{ status = 200, body = \"x\" }}\n"
    ));
    assert_eq!(answer(&s, 0, "/y", "h"), "404");
}

fn rewrites() -> Sites {
    sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/"
rewrite = [
  {{ regex = '^/old/(.*)$', replacement = "/new/$1", flag = "last" }},
  {{ regex = '^/perm/(.*)$', replacement = "/p/$1", flag = "permanent" }},
  {{ regex = '^/temp$', replacement = "/t?from=temp", flag = "redirect" }},
  {{ regex = '^/ext$', replacement = "https://$host/e" }},
  {{ regex = '^/noargs$', replacement = "/plain?", flag = "break" }},
  {{ regex = '^/a1$', replacement = "/a2" }},
  {{ regex = '^/a2$', replacement = "/a3?q=1" }},
  {{ regex = '^/loop/(\d+)$', replacement = "/loop/x$1", flag = "last" }},
]
return = {{ status = 200, body = "root uri=$uri args=$args req=$request_uri" }}
[[location]]
prefix = "/new/"
rewrite = [{{ regex = '^/new/b/(.*)$', replacement = "/final/$1", flag = "break" }}]
return = {{ status = 200, body = "new uri=$uri args=$args 1=$1" }}
[[location]]
prefix = "/loop/"
rewrite = [{{ regex = '^/loop/(x+)(\d+)$', replacement = "/loop/$1x$2", flag = "last" }}]
return = {{ status = 200, body = "loop $uri" }}
"#
    ))
}

#[test]
fn rewrite_flags() {
    let s = rewrites();
    // last: searched again, so /new/ serves it; its own rewrite did not match, which
    // empties `$1` (as in nginx).
    assert_eq!(
        answer(&s, 0, "/old/a?k=v", "h"),
        "new uri=/new/a args=k=v 1="
    );
    // break in the second location: served there, not searched again.
    assert_eq!(answer(&s, 0, "/old/b/c", "h"), "new uri=/final/c args= 1=c");
    assert_eq!(answer(&s, 0, "/perm/x?y=1", "h"), "redirect 301 /p/x?y=1");
    assert_eq!(
        answer(&s, 0, "/temp?y=1", "h"),
        "redirect 302 /t?from=temp&y=1"
    );
    assert_eq!(
        answer(&s, 0, "/ext", "Ex.COM:81"),
        "redirect 302 https://ex.com/e"
    );
    // A replacement ending in `?` drops the request's query.
    assert_eq!(
        answer(&s, 0, "/noargs?z=1", "h"),
        "root uri=/plain args= req=/noargs?z=1"
    );
    // No flag: the next rewrites see the new URI, then the location's `return` answers.
    assert_eq!(
        answer(&s, 0, "/a1?z=1", "h"),
        "root uri=/a3 args=q=1&z=1 req=/a1?z=1"
    );
}

#[test]
fn the_eleventh_uri_change_is_a_cycle() {
    let s = rewrites();
    // /loop/x1 -> /loop/xx1 -> ...: the /loop/ location rewrites for ever.
    assert_eq!(answer(&s, 0, "/loop/x1", "h"), "cycle");
    let s = sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/"
rewrite = [{{ regex = '^/n/(x*)(\d)$', replacement = "/n/$1x$2", flag = "last" }}]
return = {{ status = 200, body = "$uri" }}
[[location]]
prefix = "/n/xxxxxxxxxx"
return = {{ status = 200, body = "done $uri" }}
"#
    ));
    // 10 changes: /n/1 -> /n/x1 ... -> /n/xxxxxxxxxx1, which a location without rewrites
    // serves.
    assert_eq!(answer(&s, 0, "/n/1", "h"), "done /n/xxxxxxxxxx1");
    let s = sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/"
rewrite = [{{ regex = '^/n/(x*)(\d)$', replacement = "/n/$1x$2", flag = "last" }}]
return = {{ status = 200, body = "$uri" }}
[[location]]
prefix = "/n/xxxxxxxxxxx"
return = {{ status = 200, body = "done $uri" }}
"#
    ));
    // 11 changes needed: the 11th fails.
    assert_eq!(answer(&s, 0, "/n/1", "h"), "cycle");
}

#[test]
fn rewritten_targets_cannot_break_the_request_line() {
    assert_eq!(rewritten(b"/a b\r\n\x80", None), "/a%20b%0D%0A%80");
    assert_eq!(rewritten(b"/a?x=1", Some("y=2")), "/a?x=1&y=2");
    assert_eq!(rewritten(b"/a", Some("y=2")), "/a?y=2");
    assert_eq!(rewritten(b"/a?", Some("y=2")), "/a");
}

/// Locations and rewrites match nginx's `$uri`: decoded, dots resolved, slashes merged;
/// `$request_uri` keeps what the client sent.
#[test]
fn locations_match_the_normalized_uri() {
    let s = sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/"
return = {{ status = 200, body = "root uri=$uri req=$request_uri args=$args" }}
[[location]]
exact = "/a/c-d"
return = {{ status = 200, body = "exact uri=$uri req=$request_uri" }}
[[location]]
prefix = "/secret/"
return = {{ status = 200, body = "secret" }}
[[location]]
prefix = "/r/"
rewrite = [{{ regex = "^/r/(.*)$", replacement = "/$1", flag = "last" }}]
return = {{ status = 200, body = "unreached" }}
"#
    ));
    assert_eq!(
        answer(&s, 0, "/a//b/../c%2Dd", "h"),
        "exact uri=/a/c-d req=/a//b/../c%2Dd"
    );
    assert_eq!(answer(&s, 0, "/x/..%2Fsecret/a", "h"), "secret");
    assert_eq!(answer(&s, 0, "//secret//a", "h"), "secret");
    assert_eq!(answer(&s, 0, "/%73ecret/", "h"), "secret");
    assert_eq!(
        answer(&s, 0, "/caf%C3%A9?q=%2F", "h"),
        "root uri=/café req=/caf%C3%A9?q=%2F args=q=%2F"
    );
    // A rewrite sees the normalized path; its result is matched normalized too.
    assert_eq!(
        answer(&s, 0, "/r/x/../a/c%2dd?k=1", "h"),
        "exact uri=/a/c-d req=/r/x/../a/c%2dd?k=1"
    );
    assert_eq!(
        answer(&s, 0, "/r/caf%C3%A9", "h"),
        "root uri=/café req=/r/caf%C3%A9 args="
    );
    for bad in ["/a%00b", "/..", "/a/%2e%2e/..", "/a%2", "/a%g0"] {
        assert_eq!(answer(&s, 0, bad, "h"), "400", "{bad}");
    }
}

/// Found by the differential test against nginx (tests/sites_nginx.rs).
#[test]
fn a_return_answers_after_rewrites_without_a_flag() {
    let s = sites(&format!(
        r#"{LISTEN}
[[location]]
prefix = "/old/"
rewrite = [
  {{ regex = '^/old/nf/(.*)$', replacement = "/new/nf-$1" }},
  {{ regex = '^/old/two/(.*)$', replacement = "/old/nf/$1" }},
]
return = {{ status = 200, body = "old uri=$uri args=$args 1=$1" }}
[[location]]
prefix = "/gif/"
rewrite = [{{ regex = '^/gif/(.*)$', replacement = "/new/$1" }}]
empty_gif = true
[[location]]
prefix = "/new/"
return = {{ status = 200, body = "new uri=$uri 1=$1" }}
"#
    ));
    // nginx runs the location's rewrites and then its `return`, with the new URI; no
    // new search. (`$1` is empty: the second rewrite did not match.)
    assert_eq!(
        answer(&s, 0, "/old/nf/e?z=9", "h"),
        "old uri=/new/nf-e args=z=9 1="
    );
    // The rewrites run once, in order: the second's result is not rewritten again by
    // the first.
    assert_eq!(
        answer(&s, 0, "/old/two/t", "h"),
        "old uri=/old/nf/t args= 1=t"
    );
    // A location without `return` searches again for the changed URI.
    assert_eq!(answer(&s, 0, "/gif/g", "h"), "new uri=/new/g 1=g");
}

/// Found by the differential test against nginx: a rewrite regex that does not match
/// empties `$1`.. (nginx: `r->ncaptures = 0`), including the server name's; named
/// captures keep their values.
#[test]
fn a_rewrite_that_does_not_match_empties_numbered_captures() {
    let s = sites(&format!(
        r#"{LISTEN}
[[server]]
names = ['~^(?<sub>[a-z]+)\.example\.net$']
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "root 1=$1 sub=$sub" }}
[[server.location]]
prefix = "/chain/"
rewrite = [{{ regex = '^/chain/(a*)b(.*)$', replacement = "/chain/$1a$2", flag = "last" }}]
return = {{ status = 200, body = "chain uri=$uri 1=$1 sub=$sub" }}
"#
    ));
    assert_eq!(
        answer(&s, 0, "/x", "shop.example.net"),
        "root 1=shop sub=shop"
    );
    assert_eq!(
        answer(&s, 0, "/chain/x", "shop.example.net"),
        "chain uri=/chain/x 1= sub=shop"
    );
    assert_eq!(
        answer(&s, 0, "/chain/ab", "shop.example.net"),
        "chain uri=/chain/aa 1= sub=shop"
    );
}

/// Found by the differential test against nginx: `$server_name` is the first name as
/// nginx has it, a regex included.
#[test]
fn server_name_is_nginx_s_first_name() {
    assert_eq!(server_name("Example.COM"), "example.com");
    assert_eq!(server_name(".Dot.example"), "dot.example");
    assert_eq!(server_name("*.example.com"), "*.example.com");
    assert_eq!(server_name("~^(?<A>x)$"), "~^(?<A>x)$");
}

/// Captures are kept only when some template reads one (no copy per request otherwise).
#[test]
fn captures_are_kept_only_when_a_template_reads_them() {
    let text = |body: &str| {
        format!(
            r#"{LISTEN}
[[server]]
names = ['~^(?<sub>[a-z]+)\.example\.net$']
[[server.location]]
regex = '^/img/(?<name>[a-z]+)$'
return = {{ status = 200, body = "{body}" }}
"#
        )
    };
    for (body, kept) in [("img", false), ("img $1", true), ("img $sub", true)] {
        let s = sites(&text(body));
        let r = req("/img/cat", "shop.example.net");
        let mut routed = Routed::default();
        let server = s.select(0, r.host(), &mut routed.caps).unwrap();
        assert!(matches!(
            s.route(server, &r, CLIENT, &mut routed),
            Routing::Route(_, None)
        ));
        assert_eq!(!routed.caps.is_empty(), kept, "{body}");
    }
}
