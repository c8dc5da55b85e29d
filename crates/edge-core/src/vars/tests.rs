use super::*;
use crate::testutil::req;
use edge_http::RequestHead;

fn client(tls: bool) -> Client {
    Client {
        peer: "[::ffff:192.0.2.7]:5555".parse().unwrap(),
        tls,
        server_port: 8443,
    }
}

fn render(src: &str, r: &RequestHead, known: &Known, maps: &Maps) -> String {
    let t = Template::compile(src, known).unwrap();
    let routed = Routed::default();
    let ctx = Ctx::new(r, client(true), "srv", &routed, maps);
    t.to_string(&ctx)
}

#[test]
fn syntax_as_nginx() {
    let k = Known::default();
    let r = req("/p/q?a=1&B=2", &[("Host", "WWW.Example.COM.:8080")]);
    let m = Maps::default();
    assert_eq!(render("$host", &r, &k, &m), "www.example.com");
    assert_eq!(render("${host}x", &r, &k, &m), "www.example.comx");
    assert!(Template::compile("$hostx", &k).is_err());
}

#[test]
fn unknown_and_bad_syntax_are_errors() {
    let k = Known::default();
    assert_eq!(
        Template::compile("$scheme://$host$request_url", &k)
            .unwrap_err()
            .to_string(),
        "unknown variable \"$request_url\""
    );
    assert!(matches!(
        Template::compile("${host", &k),
        Err(TemplateError::Syntax(_))
    ));
    assert!(matches!(
        Template::compile("${}", &k),
        Err(TemplateError::Syntax(_))
    ));
    // A `$` before a non-name byte, and at the end, is literal.
    assert_eq!(
        Template::compile("a$ b$", &k).unwrap().as_literal(),
        Some("a$ b$")
    );
}

#[test]
fn builtin_variables() {
    let k = Known::default();
    let m = Maps::default();
    let r = req(
        "/p/q?a=1&B=2&c",
        &[
            ("Host", "[::1]:8080"),
            ("User-Agent", "curl/8"),
            ("X-Multi", "1"),
            ("x-multi", "2"),
            ("Cookie", "sid=abc; Theme=dark"),
        ],
    );
    assert_eq!(render("$host", &r, &k, &m), "[::1]");
    assert_eq!(render("$scheme", &r, &k, &m), "https");
    assert_eq!(
        render("$request_method $request_uri", &r, &k, &m),
        "GET /p/q?a=1&B=2&c"
    );
    assert_eq!(
        render("$uri|$args|$is_args", &r, &k, &m),
        "/p/q|a=1&B=2&c|?"
    );
    assert_eq!(
        render("$arg_b/$arg_A/$arg_c/$arg_zz.", &r, &k, &m),
        "2/1//."
    );
    assert_eq!(render("$http_user_agent", &r, &k, &m), "curl/8");
    assert_eq!(render("$http_X_MULTI", &r, &k, &m), "1, 2");
    assert_eq!(render("$cookie_theme|$cookie_sid", &r, &k, &m), "dark|abc");
    assert_eq!(
        render("$remote_addr:$server_port", &r, &k, &m),
        "192.0.2.7:8443"
    );
    assert_eq!(render("$server_name", &r, &k, &m), "srv");
    assert_eq!(
        render("$request", &r, &k, &m),
        "GET /p/q?a=1&B=2&c HTTP/1.0"
    );
    // Log-time variables are empty outside a log line.
    assert_eq!(render("[$status$upstream_cache_status]", &r, &k, &m), "[]");
    let t = Template::compile("$binary_remote_addr", &k).unwrap();
    let routed = Routed::default();
    let ctx = Ctx::new(&r, client(false), "", &routed, &m);
    let mut out = Vec::new();
    t.render(&ctx, &mut out);
    assert_eq!(out, [192, 0, 2, 7]);
    // No Host: the server name.
    let bare = req("/", &[]);
    let h = Template::compile("$host/$is_args", &k).unwrap();
    assert_eq!(
        h.to_string(&Ctx::new(&bare, client(false), "fallback", &routed, &m)),
        "fallback/"
    );
}

#[test]
fn captures_numbered_and_named() {
    let mut k = Known::default();
    let srv = std::sync::Arc::new(compile_regex(r"^(?<sub>[a-z]+)\.example\.net$", true).unwrap());
    let loc = std::sync::Arc::new(compile_regex(r"^/img/(\d+)/(?<name>.+)$", false).unwrap());
    k.add_captures(&srv);
    k.add_captures(&loc);
    let r = req("/", &[]);
    let mut routed = Routed::default();
    let c = srv.captures("shop.example.net").unwrap();
    routed.caps.set_server(&srv, "shop.example.net", &c);
    let m = Maps::default();
    let t = Template::compile("$sub:$1:$name:$12", &k).unwrap();
    assert_eq!(
        t.to_string(&Ctx::new(&r, client(false), "", &routed, &m)),
        "shop:shop::shop2"
    );
    let c = loc.captures("/img/42/cat.png").unwrap();
    routed.caps.set_latest(&loc, "/img/42/cat.png", &c);
    assert_eq!(
        t.to_string(&Ctx::new(&r, client(false), "", &routed, &m)),
        "shop:42:cat.png:422"
    );
}

#[test]
fn maps_in_nginx_order_with_template_values() {
    let mut k = Known::default();
    k.add_map("kind", 0);
    let mut table = NameTable::default();
    let pats = [
        "exact.example.com",
        "*.example.com",
        "www.example.*",
        "~*bot",
        "~^Mozilla",
    ];
    for (i, p) in pats.iter().enumerate() {
        for p in NamePattern::parse(p, false).unwrap() {
            table.insert(p, i as u16);
        }
    }
    table.finish();
    let values = ["exact", "lead", "trail", "bot:$http_x", "moz"]
        .iter()
        .map(|v| Template::compile(v, &k).unwrap())
        .collect();
    let maps = Maps {
        list: vec![Map {
            source: Template::compile("$http_user_agent", &k).unwrap(),
            table,
            values,
            default: Template::compile("none", &k).unwrap(),
        }],
        geo: Vec::new(),
    };
    let kind = |ua: &str| {
        let r = req("/", &[("User-Agent", ua), ("X", "y")]);
        render("$kind", &r, &k, &maps)
    };
    assert_eq!(kind("EXACT.example.com"), "exact");
    assert_eq!(kind("a.b.example.com"), "lead");
    assert_eq!(kind("www.example.org"), "trail");
    assert_eq!(kind("GoogleBOT/2"), "bot:y");
    assert_eq!(kind("Mozilla/5"), "moz");
    assert_eq!(kind("mozilla/5"), "none", "~ is case-sensitive");
    assert_eq!(kind("example.com"), "none", "*.x does not match x");
}

#[test]
fn a_map_cycle_renders_empty_instead_of_looping() {
    let mut k = Known::default();
    k.add_map("a", 0);
    let maps = Maps {
        list: vec![Map {
            source: Template::compile("x$a", &k).unwrap(),
            table: NameTable::default(),
            values: vec![],
            default: Template::compile("[$a]", &k).unwrap(),
        }],
        geo: Vec::new(),
    };
    let r = req("/", &[]);
    let out = render("$a", &r, &k, &maps);
    assert_eq!(out.matches('[').count(), 8);
    assert_eq!(out.matches(']').count(), 8);
}

#[test]
fn host_normalization() {
    assert_eq!(normalize_host("Example.com."), "Example.com");
    assert_eq!(normalize_host("example.com:443"), "example.com");
    assert_eq!(normalize_host("example.com.:443"), "example.com");
    assert_eq!(normalize_host("[2001:db8::1]:80"), "[2001:db8::1]");
    assert_eq!(normalize_host(""), "");
}

#[test]
fn arg_finds_the_first_argument_by_name_in_any_case() {
    use super::var::arg;
    assert_eq!(arg("a=1&b=2", "b"), Some("2"));
    assert_eq!(arg("b=2&A=1&a=3", "a"), Some("1"));
    assert_eq!(arg("x&a", "a"), Some(""));
    assert_eq!(arg("a=", "a"), Some(""));
    assert_eq!(arg("&&ab=1&a=2&", "a"), Some("2"));
    assert_eq!(arg("ab=1", "a"), None);
    assert_eq!(arg("", "a"), None);
    assert_eq!(arg("a=x=y", "a"), Some("x=y"));
    assert_eq!(arg("é=1&a=ü", "a"), Some("ü"));
}

#[test]
fn many_server_name_regexes_match_in_order_with_the_prefix_index() {
    // Server names (lower-cased lookups, regexes case-insensitive), more than the scan
    // limit: the first matching regex in order wins, as with a plain scan.
    let names = [
        r"~^r1-(\d+)\.ex$",
        r"~^R1",
        r"~^k8s\.",
        r"~^www\d*\.",
        r"~\.img\.",
        r"~^(api|cdn)\.",
        r"~^s3\.",
        r"~^r10-",
        r"~^r1",
        r"~^a|^b",
        r"~^[0-9]+\.",
    ];
    let mut table = NameTable::default();
    for (i, n) in names.iter().enumerate() {
        for p in NamePattern::parse(n, true).unwrap() {
            table.insert(p, i);
        }
    }
    table.finish_lowered();
    let res: Vec<regex::Regex> = names
        .iter()
        .map(|n| compile_regex(&n[1..], true).unwrap())
        .collect();
    for name in [
        "r1-42.ex",
        "r10-1.ex",
        "r1x",
        "k8s.io",
        "\u{212a}8s.io",
        "www7.x",
        "a.img.b",
        "cdn.x",
        "s3.x",
        "\u{17f}3.x",
        "b",
        "12.x",
        "zzz",
        "",
    ] {
        let want = res.iter().position(|re| re.is_match(name));
        assert_eq!(table.find(name, None).copied(), want, "{name}");
    }
}
