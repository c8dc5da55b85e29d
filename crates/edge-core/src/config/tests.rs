use super::*;

/// The error of a config that must be rejected (also used by the tests of the config
/// submodules).
pub(super) fn err(text: &str) -> ConfigError {
    parse("t.toml", text).expect_err("config should be rejected")
}

/// The smallest valid config: one listener.
pub(super) const MIN: &str = "[[listen]]\naddr = \"127.0.0.1:8080\"\n";

#[test]
fn embedded_default_is_valid() {
    let (cfg, _) = embedded_default();
    assert_eq!(cfg.listen[0].addr.get_ref(), "127.0.0.1:8080");
    assert_eq!(
        cfg.upstream[0].servers.get_ref(),
        &vec!["127.0.0.1:8081".to_string()]
    );
    assert_eq!(cfg.cache[0].path, PathBuf::from("edgecache-data/cache"));
    assert!(cfg.demo_origin.is_some());
}

#[test]
fn design_example_parses() {
    let text = r#"
workers = "auto"
worker_cpu_affinity = "auto"
worker_connections = 65536
accept = "reuseport"
shutdown_timeout = "30s"
keepalive_timeout = "75s"
keepalive_requests = 1000
client_header_timeout = "60s"
client_body_timeout = "60s"
send_timeout = "60s"
client_max_body_size = "1m"
access_log = { path = "logs/access.log", buffer = "64k", flush = "1s" }
error_log = { path = "logs/error.log", level = "warn" }

[[listen]]
addr = "127.0.0.1:8080"
backlog = 65535

[aio]
mode = "threads"
directio = "4m"
sendfile = true
[aio.thread_pool]
threads = 32
max_queue = 65536
queue = "mutex"

[[cache]]
name = "disk1"
path = "/cdn/cache1"
levels = "1:2"
max_size = "1400g"
inactive = "4d"
keys_zone = "400m"

[[upstream]]
name = "origin"
servers = ["127.0.0.1:8081"]
keepalive = 64
connect_timeout = "2s"
read_timeout = "30s"

[[location]]
prefix = "/"
proxy = "origin"
cache = ["disk1"]
cache_valid = { "200" = "10m", "404" = "1m" }
use_stale = ["error", "timeout", "updating", "http_5xx"]
compress = ["zstd", "br", "gzip"]
compress_offload = true

[[location]]
exact = "/empty.gif"
empty_gif = true

[[location]]
prefix = "/health"
return = { status = 200, body = "" }

[admin]
listen = "127.0.0.1:9090"
allow = ["127.0.0.1/32"]
"#;
    let cfg = parse("design.toml", text).unwrap();
    assert_eq!(cfg.workers, Workers::Auto);
    assert_eq!(cfg.cache[0].max_size.0, 1400 << 30);
    assert_eq!(cfg.aio.directio.0, Some(4 << 20));
    assert_eq!(cfg.location.len(), 3);
    match &cfg.access_log {
        AccessLog::File { buffer, .. } => assert_eq!(*buffer, 65536),
        AccessLog::Off => panic!("access log should be on"),
    }
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let e = err(&format!("{MIN}\nworkerz = 2\n"));
    assert_eq!(e.line, 4);
    assert_eq!(e.key, "listen.workerz");
    assert!(
        e.to_string()
            .starts_with("t.toml:4: listen.workerz: unknown key"),
        "{e}"
    );
    let e = err("workerz = 2\n[[listen]]\naddr = \"127.0.0.1:1\"\n");
    assert_eq!((e.line, e.key.as_str()), (1, "workerz"));
}

#[test]
fn bad_values_point_at_their_line() {
    let e = err(&format!("keepalive_timeout = \"75x\"\n{MIN}"));
    assert_eq!((e.line, e.key.as_str()), (1, "keepalive_timeout"));
    assert!(e.message.contains("unknown unit"), "{e}");

    let e = err(&format!("{MIN}[aio]\nmode = \"libaio\"\n"));
    assert_eq!((e.line, e.key.as_str()), (4, "aio.mode"));

    let e = err("[[listen]]\naddr = \"not an address\"\n");
    assert_eq!((e.line, e.key.as_str()), (2, "listen.addr"));

    let e = err(&format!("workers = 0\n{MIN}"));
    assert_eq!((e.line, e.key.as_str()), (1, "workers"));

    let e = err(&format!(
        "{MIN}[[location]]\nprefix = \"/\"\nproxy = \"nowhere\"\n"
    ));
    assert_eq!((e.line, e.key.as_str()), (5, "location.proxy"));
    assert!(e.message.contains("nowhere"));
}

#[test]
fn syntax_error_has_a_line() {
    let e = err(&format!("{MIN}\n[[location]\nprefix = 1\n"));
    assert_eq!(e.line, 4);
}

#[test]
fn location_rules() {
    let up = "[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:1\"]\n";
    let e = err(&format!("{MIN}{up}[[location]]\nprefix = \"/\"\n"));
    assert!(e.message.contains("needs one handler"), "{e}");
    let e = err(&format!(
        "{MIN}{up}[[location]]\nprefix = \"/\"\nproxy = \"o\"\nempty_gif = true\n"
    ));
    assert!(e.message.contains("more than one handler"), "{e}");
    let e = err(&format!(
        "{MIN}{up}[[location]]\nprefix = \"/\"\nproxy = \"o\"\ncache = [\"nope\"]\n"
    ));
    assert_eq!(e.key, "location.cache");
    let e = err(&format!(
        "{MIN}{up}[[location]]\nprefix = \"x\"\nproxy = \"o\"\n"
    ));
    assert!(e.message.contains("start with '/'"));
}

#[test]
fn admin_must_be_loopback_and_allow_must_parse() {
    let e = err(&format!("{MIN}[admin]\nlisten = \"0.0.0.0:9090\"\n"));
    assert_eq!(e.key, "admin.listen");
    let e = err(&format!("{MIN}[admin]\nallow = [\"10.0.0.0/99\"]\n"));
    assert_eq!((e.line, e.key.as_str()), (4, "admin.allow"));
}

#[test]
fn cidr_matching() {
    use validate::Cidr;
    let c = Cidr::parse("127.0.0.0/8").unwrap();
    assert!(c.contains("127.1.2.3".parse().unwrap()));
    assert!(!c.contains("128.0.0.1".parse().unwrap()));
    assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
    let all = Cidr::parse("0.0.0.0/0").unwrap();
    assert!(all.contains("8.8.8.8".parse().unwrap()));
    assert!(Cidr::parse("::1").unwrap().contains("::1".parse().unwrap()));
}

/// `listen.deferred` and `listen.tls.ktls` are on unless switched off; an unknown key
/// beside them is refused with its line.
#[test]
fn listen_deferred_and_ktls_default_on() {
    let cfg = parse("t.toml", MIN).unwrap();
    assert!(cfg.listen[0].deferred);
    let listen: Listen = toml::from_str(
        "addr = \"127.0.0.1:8443\"\ndeferred = false\n\
         tls = { cert = \"a.pem\", key = \"a.key\", ktls = false }\n",
    )
    .unwrap();
    assert!(!listen.deferred);
    assert!(!listen.tls.unwrap().get_ref().ktls);
    let on: TlsCfg = toml::from_str("cert = \"a.pem\"\nkey = \"a.key\"\n").unwrap();
    assert!(on.ktls, "kTLS on by default");
    let e = err("[[listen]]\naddr = \"127.0.0.1:8080\"\ndeferd = true\n");
    assert!(e.to_string().contains("t.toml:3"), "{e}");
}

#[test]
fn the_ram_tier_is_auto_by_default_and_off_without_a_disk_cache() {
    let cache = "[[cache]]\nname = \"c\"\npath = \"/tmp/x\"\nmax_size = \"1g\"\n";
    let cfg = parse("t.toml", &format!("{MIN}{cache}")).unwrap();
    assert_eq!(cfg.memory_cache, MemoryCache::default());
    assert_eq!(cfg.memory_cache.size, MemSize::Auto);
    let r = cfg.memory_cache.resolve_with(|| 8 << 30, 1 << 30);
    assert_eq!(
        (r.size, r.auto, r.max_object_size),
        (128 << 20, true, 32 << 10)
    );
    // No disk cache: nothing to hold, and memory is not even read.
    let r = cfg.memory_cache.resolve_with(|| panic!("not read"), 0);
    assert_eq!((r.size, r.auto), (0, true));
    // "off" and an explicit size are taken as they are.
    let off = parse(
        "t.toml",
        &format!("{MIN}{cache}[memory_cache]\nsize = \"off\"\n"),
    )
    .unwrap();
    assert_eq!(off.memory_cache.resolve_with(|| 8 << 30, 1 << 30).size, 0);
    let fixed = parse(
        "t.toml",
        &format!("{MIN}{cache}[memory_cache]\nsize = \"3m\"\n"),
    )
    .unwrap();
    let r = fixed
        .memory_cache
        .resolve_with(|| panic!("not read"), 1 << 30);
    assert_eq!((r.size, r.auto), (3 << 20, false));
    // The embedded default says "auto" too.
    let (cfg, _) = embedded_default();
    assert_eq!(cfg.memory_cache.size, MemSize::Auto);
    // A size needs a disk cache; "auto" does not.
    let e = err(&format!("{MIN}[memory_cache]\nsize = \"4m\"\n"));
    assert_eq!((e.line, e.key.as_str()), (3, "memory_cache"));
    parse("t.toml", &format!("{MIN}[memory_cache]\nsize = \"auto\"\n")).unwrap();
}

/// Templates are compiled at `-t`: an unknown variable is `file:line: key: message`,
/// wherever the template is (cache_key, return, rewrite, map, hash_key).
#[test]
fn unknown_variables_name_file_line_and_key() {
    let base = "[[listen]]\naddr = \"127.0.0.1:8080\"\n[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:9\"]\n";
    let e = err(&format!(
        "{base}[[location]]\nprefix = \"/\"\nproxy = \"o\"\ncache_key = \"$scheme://$host$request_url\"\n"
    ));
    assert_eq!(
        e.to_string(),
        "t.toml:9: location.cache_key: unknown variable \"$request_url\""
    );
    let e = err(&format!(
        "{base}[[server]]\nnames = [\"a.example\"]\n[[server.location]]\nprefix = \"/\"\n\
         return = {{ status = 301, location = \"https://$hots$request_uri\" }}\n"
    ));
    assert_eq!(e.line, 10, "{e}");
    assert!(e.to_string().contains("unknown variable \"$hots\""), "{e}");
    let e = err(&format!(
        "{base}[[location]]\nprefix = \"/\"\nempty_gif = true\n\
         rewrite = [{{ regex = \"^/(a)$\", replacement = \"/$nope\" }}]\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (9, "location.rewrite.replacement"),
        "{e}"
    );
    let e = err(&format!(
        "{base}[[map]]\nsource = \"$http_user_agent\"\nvariable = \"$is_bot\"\n\
         entries = [{{ match = \"~*(bot\", value = \"1\" }}]\n"
    ));
    assert_eq!(e.key, "map.entries.match", "{e}");
    // Named captures and map variables are variables; a map may not redefine a built-in.
    parse(
        "t.toml",
        &format!(
            "{base}[[map]]\nsource = \"$http_user_agent\"\nvariable = \"$is_bot\"\n\
             entries = [{{ match = \"~*bot\", value = \"1\" }}]\n\
             [[location]]\nregex = '^/(?<id>\\d+)$'\nreturn = {{ status = 200, body = \"$id $is_bot\" }}\n"
        ),
    )
    .unwrap();
    let e = err(&format!(
        "{base}[[map]]\nsource = \"$uri\"\nvariable = \"$host\"\n"
    ));
    assert!(e.to_string().contains("already a variable"), "{e}");
    // Location match keys: exactly one.
    let e = err(&format!(
        "{base}[[location]]\nprefix = \"/\"\nregex = \"x\"\nempty_gif = true\n"
    ));
    assert!(e.to_string().contains("not several"), "{e}");
    let e = err(&format!(
        "{base}[[location]]\nregex = \"(\"\nempty_gif = true\n"
    ));
    assert_eq!((e.line, e.key.as_str()), (7, "location.regex"), "{e}");
    let e = err(&format!(
        "{base}[[server]]\nnames = [\"a\"]\nlisten = [\"127.0.0.1:1\"]\n"
    ));
    assert_eq!(e.key, "server.listen", "{e}");
}

/// `real_ip` and `listen.proxy_protocol`: defaults, and every bad value named with the
/// line of `real_ip`.
#[test]
fn real_ip_and_proxy_protocol() {
    let cfg = parse("t.toml", MIN).unwrap();
    assert!(!cfg.listen[0].proxy_protocol);
    assert!(cfg.real_ip.is_none());
    let text = format!("real_ip = {{ from = [\"10.0.0.0/8\", \"::1\"] }}\n{MIN}");
    let cfg = parse("t.toml", &text).unwrap();
    let r = cfg.real_ip.unwrap().into_inner();
    assert_eq!((r.header.as_str(), r.recursive), ("X-Real-IP", false));
    let pp = format!("real_ip = {{ from = [\"10.0.0.0/8\"], header = \"proxy_protocol\" }}\n{MIN}proxy_protocol = true\n");
    let cfg = parse("t.toml", &pp).unwrap();
    assert!(cfg.listen[0].proxy_protocol);
    for (real_ip, key, says) in [
        (
            r#"{ from = ["10.0.0.0/33"] }"#,
            "real_ip.from",
            "prefix length",
        ),
        (
            r#"{ from = ["10.0.0.x"] }"#,
            "real_ip.from",
            "invalid address",
        ),
        (r#"{ from = [] }"#, "real_ip.from", "at least one"),
        (
            r#"{ from = ["::1"], header = "X Forwarded" }"#,
            "real_ip.header",
            "not a field name",
        ),
        (
            r#"{ from = ["::1"], header = "" }"#,
            "real_ip.header",
            "not a field name",
        ),
        (
            r#"{ from = ["::1"], header = "proxy_protocol" }"#,
            "real_ip.header",
            "proxy_protocol = true",
        ),
    ] {
        let e = err(&format!("workers = 1\n\nreal_ip = {real_ip}\n{MIN}"));
        assert_eq!((e.line, e.key.as_str()), (3, key), "{real_ip}: {e}");
        assert!(e.message.contains(says), "{real_ip}: {e}");
        assert!(e.to_string().starts_with("t.toml:3: "), "{e}");
    }
    let e = err(&format!(
        "real_ip = {{ from = [\"::1\"], trusted = true }}\n{MIN}"
    ));
    assert!(e.message.contains("unknown field"), "{e}");
}

/// A parse error about a field names it under its table and, for an inline table, under
/// the key that holds it: what the operator has to find and fix.
#[test]
fn a_missing_or_unknown_field_is_named_where_it_belongs() {
    let e = err(&format!(
        "{MIN}\n[[limit_req_zone]]\nname = \"a\"\nkey = \"$remote_addr\"\n"
    ));
    assert_eq!(e.key, "limit_req_zone.rate", "{e}");
    assert!(e.message.contains("missing field"), "{e}");
    let e = err(&format!(
        "{MIN}\n[[location]]\nprefix = \"/\"\nlimit_req = [{{ zone = \"a\", foo = 1 }}]\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (6, "location.limit_req.foo"),
        "{e}"
    );
    assert!(e.message.starts_with("unknown key"), "{e}");
    let e = err(&format!(
        "real_ip = {{ from = [\"::1\"], trusted = true }}\n{MIN}"
    ));
    assert_eq!((e.line, e.key.as_str()), (1, "real_ip.trusted"), "{e}");
}

#[test]
fn access_logs_and_formats() {
    let ok = format!(
        "access_log = {{ path = \"a.log\", format = \"j\" }}\n\
         [log_format.j]\nformat = '{{\"s\":$status}}'\nescape = \"json\"\n\
         {MIN}\
         [[server]]\nnames = [\"a\"]\naccess_log = {{ path = \"s.log\", format = \"combined\" }}\n\
         [[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\naccess_log = \"off\"\n"
    );
    let cfg = parse("t.toml", &ok).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.log_format["j"].escape, LogEscape::Json);
    assert!(matches!(
        cfg.server[0].access_log.as_ref().map(|a| a.get_ref()),
        Some(AccessLog::File { format: Some(f), .. }) if f == "combined"
    ));
    assert_eq!(
        cfg.server[0].location[0]
            .access_log
            .as_ref()
            .map(|a| a.get_ref()),
        Some(&AccessLog::Off)
    );

    // An unknown format, where it is named.
    let e = err(&format!(
        "{MIN}[[server]]\nnames = [\"a\"]\naccess_log = {{ path = \"s.log\", format = \"nope\" }}\n"
    ));
    assert_eq!((e.line, e.key.as_str()), (5, "server.access_log"), "{e}");
    assert!(e.message.contains("unknown log format \"nope\""), "{e}");
    let e = err(&format!(
        "access_log = {{ path = \"a\", format = \"x\" }}\n{MIN}"
    ));
    assert_eq!((e.line, e.key.as_str()), (1, "access_log"), "{e}");
    // An unknown variable in a format: its line.
    let e = err(&format!(
        "{MIN}[log_format.j]\nformat = \"$status $stauts\"\n"
    ));
    assert_eq!((e.line, e.key.as_str()), (4, "log_format.format"), "{e}");
    assert!(e.message.contains("unknown variable \"$stauts\""), "{e}");
    // A built-in name cannot be redefined; escape is checked.
    let e = err(&format!(
        "{MIN}[log_format.combined]\nformat = \"$status\"\n"
    ));
    assert!(e.message.contains("built-in"), "{e}");
    let e = err(&format!(
        "{MIN}[log_format.j]\nformat = \"$status\"\nescape = \"xml\"\n"
    ));
    assert_eq!(e.line, 5, "{e}");
    // Unknown keys in the table are errors.
    let e = err(&format!(
        "{MIN}[log_format.j]\nformat = \"$status\"\nbuffer = 1\n"
    ));
    assert_eq!(e.line, 5, "{e}");
}

#[test]
fn server_header_defaults_go_to_locations_that_set_none() {
    let cfg = parse(
        "t",
        r#"
[[listen]]
addr = "127.0.0.1:1"
[[upstream]]
name = "o"
servers = ["127.0.0.1:2"]
[[server]]
names = ["a.example"]
add_header = { "X-S" = "server" }
add_header_always = true
cache_status_header = false
proxy_set_header = { Host = "origin.example" }
proxy_hide_header = ["x-secret"]
[[server.location]]
prefix = "/"
proxy = "o"
[[server.location]]
prefix = "/own/"
proxy = "o"
add_header = { "X-L" = "location" }
add_header_always = false
proxy_set_header = { "X-A" = "1" }
[[server.location]]
prefix = "/static/"
static = "/tmp"
"#,
    )
    .unwrap();
    let l = &cfg.server[0].location;
    assert_eq!(
        l[0].add_header.get("X-S").map(String::as_str),
        Some("server")
    );
    assert_eq!(l[0].add_header_always, Some(true));
    assert_eq!(l[0].cache_status_header, Some(false));
    let set = l[0].proxy_set_header.as_ref().unwrap().get_ref();
    assert_eq!(set.get("Host").map(String::as_str), Some("origin.example"));
    assert_eq!(
        l[0].proxy_hide_header.as_ref().unwrap().get_ref(),
        &["x-secret"]
    );
    // A location's own keys win, whole (no merging of the maps, as nginx).
    assert!(!l[1].add_header.contains_key("X-S"));
    assert_eq!(l[1].add_header_always, Some(false));
    let own = l[1].proxy_set_header.as_ref().unwrap().get_ref();
    assert!(!own.contains_key("Host") && own.contains_key("X-A"));
    // proxy_* stay off a static location (where -t would refuse them).
    assert!(l[2].proxy_set_header.is_none() && l[2].proxy_hide_header.is_none());
    assert_eq!(
        l[2].add_header.get("X-S").map(String::as_str),
        Some("server")
    );
}

/// A map that reads itself, directly or through other maps, is a `-t` error naming the
/// cycle; maps that read other maps without a cycle are fine.
#[test]
fn map_cycles_are_rejected() {
    let base = "[[listen]]\naddr = \"127.0.0.1:8080\"\n";
    let e = err(&format!(
        "{base}[[map]]\nsource = \"$self_ref\"\nvariable = \"$self_ref\"\n"
    ));
    assert_eq!((e.line, e.key.as_str()), (5, "map.variable"), "{e}");
    assert!(e.message.contains("$self_ref -> $self_ref"), "{e}");
    // a -> b (in a value) -> c (in the default) -> a (in the source).
    let e = err(&format!(
        "{base}[[map]]\nsource = \"$uri\"\nvariable = \"$a\"\nentries = [{{ match = \"x\", value = \"<$b>\" }}]\n\
         [[map]]\nsource = \"$uri\"\nvariable = \"$b\"\ndefault = \"$c\"\n\
         [[map]]\nsource = \"${{a}}z\"\nvariable = \"$c\"\n"
    ));
    assert_eq!(
        e.to_string(),
        "t.toml:5: map.variable: $a depends on itself ($a -> $b -> $c -> $a): a map's source, default and values may not read it"
    );
    parse(
        "t.toml",
        &format!(
            "{base}[[map]]\nsource = \"$b $c\"\nvariable = \"$a\"\n\
             [[map]]\nsource = \"$c\"\nvariable = \"$b\"\n\
             [[map]]\nsource = \"$uri\"\nvariable = \"$c\"\n"
        ),
    )
    .unwrap();
}

#[test]
fn map_cycle_search_finds_cycles_only() {
    use super::sites::map_cycle;
    assert_eq!(map_cycle(&[]), None);
    assert_eq!(map_cycle(&[vec![1], vec![2], vec![]]), None);
    // A diamond is not a cycle.
    assert_eq!(map_cycle(&[vec![1, 2], vec![3], vec![3], vec![]]), None);
    assert_eq!(map_cycle(&[vec![0]]), Some(vec![0, 0]));
    assert_eq!(map_cycle(&[vec![1], vec![2], vec![1]]), Some(vec![1, 2, 1]));
    // An edge to a map that does not exist is ignored (the compiler never makes one).
    assert_eq!(map_cycle(&[vec![7]]), None);
    // Long chains do not recurse.
    let chain: Vec<Vec<u16>> = (0..4096u16).map(|i| vec![i + 1]).chain([vec![0]]).collect();
    assert_eq!(map_cycle(&chain).map(|c| c.len()), Some(4098));
}

/// nginx: one `default_server` per address. Servers on different listeners may each be
/// a default; two on one address are a `-t` error at the second's `default` line.
#[test]
fn one_default_server_per_listen_addr() {
    let base = "[[listen]]\naddr = \"127.0.0.1:8080\"\n[[listen]]\naddr = \"127.0.0.1:8081\"\n";
    parse(
        "t.toml",
        &format!(
            "{base}[[server]]\ndefault = true\nlisten = [\"127.0.0.1:8080\"]\n\
             [[server]]\ndefault = true\nlisten = [\"127.0.0.1:8081\"]\n"
        ),
    )
    .unwrap();
    let e = err(&format!(
        "{base}[[server]]\ndefault = true\nlisten = [\"127.0.0.1:8080\"]\n\
         [[server]]\nnames = [\"b.example\"]\ndefault = true\n"
    ));
    assert_eq!(
        e.to_string(),
        "t.toml:10: server.default: server #1 is already the default server on \"127.0.0.1:8080\" (one default per [[listen]] addr)"
    );
    let e = err(&format!(
        "{base}[[server]]\nnames = [\"a.example\"]\ndefault = true\nlisten = [\"127.0.0.1:8081\"]\n\
         [[server]]\ndefault = true\nlisten = [\"127.0.0.1:8080\", \"127.0.0.1:8081\"]\n"
    ));
    assert_eq!(e.line, 10, "{e}");
    assert!(e.message.contains("server \"a.example\""), "{e}");
}

#[test]
fn aio_sendfile_max_defaults_parses_and_reports_bad_values() {
    use super::SendfileMax;
    let sm = |size, adaptive| SendfileMax { size, adaptive };
    // Default: "auto", 448 KiB and measured per worker.
    let cfg = parse("t.toml", MIN).unwrap();
    assert_eq!(cfg.aio.sendfile_max, sm(Some(448 << 10), true));
    let cfg = parse("t.toml", &format!("{MIN}[aio]\nsendfile_max = \"auto\"\n")).unwrap();
    assert_eq!(cfg.aio.sendfile_max, sm(Some(448 << 10), true));
    let cfg = parse("t.toml", &format!("{MIN}[aio]\nsendfile_max = \"off\"\n")).unwrap();
    assert_eq!(cfg.aio.sendfile_max, sm(None, false));
    let cfg = parse("t.toml", &format!("{MIN}[aio]\nsendfile_max = \"1m\"\n")).unwrap();
    assert_eq!(cfg.aio.sendfile_max, sm(Some(1 << 20), false));
    let cfg = parse("t.toml", &format!("{MIN}[aio]\nsendfile_max = 65536\n")).unwrap();
    assert_eq!(cfg.aio.sendfile_max, sm(Some(65536), false));
    for bad in ["\"big\"", "-1", "true"] {
        let e = err(&format!("{MIN}[aio]\nsendfile_max = {bad}\n"));
        assert_eq!((e.line, e.key.as_str()), (4, "aio.sendfile_max"), "{e}");
    }
    let e = err(&format!("{MIN}[aio]\nsendfile_max = \"big\"\n"));
    assert!(
        e.to_string().contains("suffix (or \"auto\")"),
        "one line: {e}"
    );
}

#[test]
fn aio_inline_writes_defaults_on_and_takes_a_bool() {
    assert!(parse("t.toml", MIN).unwrap().aio.inline_writes);
    let cfg = parse("t.toml", &format!("{MIN}[aio]\ninline_writes = false\n")).unwrap();
    assert!(!cfg.aio.inline_writes);
    let e = err(&format!("{MIN}[aio]\ninline_writes = \"yes\"\n"));
    assert_eq!((e.line, e.key.as_str()), (4, "aio.inline_writes"), "{e}");
}
