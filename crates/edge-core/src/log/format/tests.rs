use super::*;
use crate::config::logs::{COMBINED, EDGECACHE};
use crate::vars::{Client, LogFacts, Maps, Routed};
use edge_http::RequestHead;
use std::time::Duration;

fn req(raw_head: &str) -> RequestHead {
    let raw = match raw_head.split_once("\r\n") {
        Some((line, rest)) if line.ends_with("1.1") && !rest.contains("Host:") => {
            format!("{line}\r\nHost: x\r\n{rest}")
        }
        _ => raw_head.to_string(),
    };
    crate::testutil::parse(&raw)
}

fn client() -> Client {
    Client {
        peer: "192.0.2.7:5555".parse().unwrap(),
        tls: false,
        server_port: 8080,
    }
}

fn facts() -> LogFacts<'static> {
    LogFacts {
        status: 200,
        cache_status: Some("HIT"),
        time_iso8601: "2026-11-21T03:12:17+00:00",
        time_local: "21/Nov/2026:03:12:17 +0000",
        body_bytes_sent: 10240,
        bytes_sent: 10400,
        request_length: 77,
        request_time: Duration::from_millis(1234),
        upstream_response_time: Some(Duration::from_micros(5600)),
    }
}

fn line(src: &str, escape: LogEscape, r: &RequestHead, f: &LogFacts<'_>) -> String {
    let fmt = LogFormat::compile("t", src, escape, &Known::default()).unwrap();
    let routed = Routed::default();
    let maps = Maps::default();
    let mut ctx = Ctx::new(r, client(), "srv", &routed, &maps);
    ctx.log = Some(f);
    let mut out = Vec::new();
    fmt.render(&ctx, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn combined_is_nginx_byte_for_byte() {
    let r =
        req("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nReferer: http://r/\r\nUser-Agent: curl/8.0\r\n\r\n");
    assert_eq!(
        line(COMBINED, LogEscape::Default, &r, &facts()),
        "192.0.2.7 - - [21/Nov/2026:03:12:17 +0000] \"GET /a?b=1 HTTP/1.1\" 200 10240 \"http://r/\" \"curl/8.0\"\n"
    );
    // No Referer, no User-Agent: `-`; an empty one stays empty (nginx: found, empty).
    let r = req("GET / HTTP/1.1\r\nHost: x\r\nReferer: \r\n\r\n");
    assert_eq!(
        line(COMBINED, LogEscape::Default, &r, &facts()),
        "192.0.2.7 - - [21/Nov/2026:03:12:17 +0000] \"GET / HTTP/1.1\" 200 10240 \"\" \"-\"\n"
    );
    // The default format: combined, request time, cache status (`-` when none).
    let f = LogFacts {
        cache_status: None,
        ..facts()
    };
    assert_eq!(
        line(EDGECACHE, LogEscape::Default, &r, &f),
        "192.0.2.7 - - [21/Nov/2026:03:12:17 +0000] \"GET / HTTP/1.1\" 200 10240 \"\" \"-\" 1.234 -\n"
    );
}

#[test]
fn every_log_variable() {
    // user:pass in Basic credentials.
    let r = req("POST /p HTTP/1.0\r\nAuthorization: Basic dXNlcjpwYXNz\r\n\r\n");
    let f = facts();
    let cases = [
        ("$status", "200"),
        ("$request", "POST /p HTTP/1.0"),
        ("$time_iso8601", "2026-11-21T03:12:17+00:00"),
        ("$time_local", "21/Nov/2026:03:12:17 +0000"),
        ("$upstream_cache_status", "HIT"),
        ("$body_bytes_sent", "10240"),
        ("$bytes_sent", "10400"),
        ("$request_length", "77"),
        ("$request_time", "1.234"),
        ("$upstream_response_time", "0.005"),
        ("$remote_user", "user"),
        ("$remote_addr", "192.0.2.7"),
        ("$server_protocol", "HTTP/1.0"),
        ("$http_authorization", "Basic dXNlcjpwYXNz"),
    ];
    for (src, want) in cases {
        assert_eq!(
            line(src, LogEscape::None, &r, &f),
            format!("{want}\n"),
            "{src}"
        );
    }
    // Without the facts (not a log line) the log-time variables are empty.
    let none = LogFacts {
        cache_status: None,
        upstream_response_time: None,
        ..facts()
    };
    assert_eq!(
        line(
            "[$upstream_cache_status][$upstream_response_time]",
            LogEscape::Default,
            &r,
            &none
        ),
        "[-][-]\n"
    );
    assert_eq!(
        line(
            "[$upstream_cache_status][$remote_user]",
            LogEscape::Json,
            &req("GET / HTTP/1.1\r\n\r\n"),
            &none
        ),
        "[][]\n"
    );
    // Not Basic, bad base64, no colon.
    for (auth, want) in [
        ("Bearer abc", "-"),
        ("Basic !!!", "-"),
        ("basic YWxpY2U=", "alice"),
    ] {
        let r = req(&format!("GET / HTTP/1.1\r\nAuthorization: {auth}\r\n\r\n"));
        assert_eq!(
            line("$remote_user", LogEscape::Default, &r, &f),
            format!("{want}\n"),
            "{auth}"
        );
    }
    // A rewrite changes the target, not `$request` (the request line as it came).
    let mut r = req("GET /old?q=1 HTTP/1.1\r\n\r\n");
    let routed = Routed {
        original_uri: Some("/old?q=1".into()),
        ..Default::default()
    };
    r.target = "/new?q=1".into();
    let fmt =
        LogFormat::compile("t", "$request $uri", LogEscape::Default, &Known::default()).unwrap();
    let maps = Maps::default();
    let mut ctx = Ctx::new(&r, client(), "", &routed, &maps);
    ctx.log = Some(&f);
    let mut out = Vec::new();
    fmt.render(&ctx, &mut out);
    assert_eq!(out, b"GET /old?q=1 HTTP/1.1 /new\n");
}

#[test]
fn default_escape_is_nginx_hex() {
    let mut out = Vec::new();
    escape_default(b"a\"b\\c\n\x01\x7f\xff ok", &mut out);
    assert_eq!(out, b"a\\x22b\\x5Cc\\x0A\\x01\\x7F\\xFF ok");
    // In a line: the variable is escaped, the format's own text is not.
    let r = req("GET / HTTP/1.1\r\nUser-Agent: x\"y\\zé\r\n\r\n");
    assert_eq!(
        line("\"$http_user_agent\"", LogEscape::Default, &r, &facts()),
        "\"x\\x22y\\x5Cz\\xC3\\xA9\"\n"
    );
}

#[test]
fn json_escape_is_json() {
    let mut out = Vec::new();
    escape_json(b"a\"b\\c\n\r\t\x08\x0c\x01\x1f\x7f \xc3\xa9 \xff", &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\x7f \u{e9} \\u00ff"
    );
    let r = req("GET /q?\"x HTTP/1.1\r\nUser-Agent: a\"bé\r\n\r\n");
    let l = line(
        r#"{"ua":"$http_user_agent","ref":"$http_referer","req":"$request","s":$status}"#,
        LogEscape::Json,
        &r,
        &facts(),
    );
    let v: serde_json::Value = serde_json::from_str(&l).unwrap();
    assert_eq!(v["ua"], "a\"b\u{e9}");
    assert_eq!(v["ref"], "", "no value: empty in JSON");
    assert_eq!(v["req"], "GET /q?\"x HTTP/1.1");
    assert_eq!(v["s"], 200);
}

#[test]
fn the_clock_is_read_only_for_formats_that_print_it() {
    let k = Known::default();
    let f = LogFormat::compile("a", "$status $request", LogEscape::Default, &k).unwrap();
    assert!(!f.needs_time_local && !f.needs_time_iso8601);
    let f = LogFormat::compile("b", COMBINED, LogEscape::Default, &k).unwrap();
    assert!(f.needs_time_local && !f.needs_time_iso8601);
    assert!(LogFormat::compile("c", "$nope", LogEscape::Default, &k).is_err());
}
