//! The experiment files' checks and plans.

use super::urls::expand_paths;
use super::*;
use crate::kind::ServerKind;

const SAMPLE: &str = r#"
name = "t"
title = "T"
repetitions = 3
duration = "5s"
warmup = "1s"
[origin]
args = ["--sizes", "1k"]
[[server]]
name = "edgecache"
kind = "edgecache"
config = "workers = 1"
[[server]]
name = "nginx"
kind = "nginx"
[[server]]
name = "nginx aio"
kind = "nginx"
vars = { location_extra = "aio threads;" }
quick = false
[[server]]
name = "varnish"
kind = "varnish"
[[workload]]
name = "1k"
urls = [{ path = "/obj/1k/{id}", ids = 3 }]
[[workload]]
name = "mix"
duration = "9s"
urls = [{ path = "/a", weight = 2 }, { path = "/b/{id}", ids = 2 }]
[quick]
workloads = ["1k"]
duration = "2s"
repetitions = 1
"#;

#[test]
fn durations() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
    assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("3m").unwrap(), Duration::from_secs(180));
    assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
    for bad in ["", "x", "-1s", "2d", "NaNs", "2h"] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
}

#[test]
fn full_plan_keeps_everything() {
    let e = Experiment::parse(SAMPLE).unwrap();
    let p = e.plan(&PlanOptions::default()).unwrap();
    assert_eq!(p.repetitions, 3);
    assert_eq!(p.servers.len(), 4);
    assert_eq!(p.workloads.len(), 2);
    assert_eq!(
        p.workloads[0].paths,
        vec![
            ("/obj/1k/1".into(), 1),
            ("/obj/1k/2".into(), 1),
            ("/obj/1k/3".into(), 1)
        ]
    );
    assert_eq!(
        p.workloads[1].paths,
        vec![("/a".into(), 2), ("/b/1".into(), 1), ("/b/2".into(), 1)]
    );
    assert_eq!(p.workloads[0].duration, Duration::from_secs(5));
    assert_eq!(p.workloads[1].duration, Duration::from_secs(9));
    assert_eq!(p.warmup, Duration::from_secs(1));
    assert_eq!(p.workloads[0].connections, DEFAULT_CONNECTIONS);
}

#[test]
fn quick_plan_is_edgecache_alone_unless_peers_are_named() {
    let e = Experiment::parse(SAMPLE).unwrap();
    let p = e
        .plan(&PlanOptions {
            quick: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        p.servers
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["edgecache"]
    );
    assert_eq!(p.workloads.len(), 1);
    assert_eq!(p.workloads[0].duration, Duration::from_secs(2));
    assert_eq!(p.repetitions, 1);
    let p = e
        .plan(&PlanOptions {
            quick: true,
            peers: Some(vec![ServerKind::Nginx]),
            ..Default::default()
        })
        .unwrap();
    // "nginx aio" has quick = false.
    assert_eq!(
        p.servers
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["edgecache", "nginx"]
    );
}

#[test]
fn command_line_overrides_win() {
    let e = Experiment::parse(SAMPLE).unwrap();
    let opts = PlanOptions {
        duration: Some(Duration::from_secs(1)),
        repetitions: Some(2),
        peers: Some(vec![ServerKind::Varnish]),
        ..Default::default()
    };
    let p = e.plan(&opts).unwrap();
    assert!(p
        .workloads
        .iter()
        .all(|w| w.duration == Duration::from_secs(1)));
    assert_eq!(p.repetitions, 2);
    assert_eq!(
        p.servers
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["edgecache", "varnish"]
    );
}

#[test]
fn invalid_files_say_why() {
    let cases = [
        (
            SAMPLE.replace("kind = \"varnish\"", "kind = \"squid\""),
            "squid",
        ),
        (
            SAMPLE.replace("repetitions = 3", "repetitions = 0"),
            "repetitions",
        ),
        (SAMPLE.replace("ids = 3", "ids = 0"), "ids"),
        (
            SAMPLE.replace("duration = \"5s\"", "duration = \"fast\""),
            "duration",
        ),
        (
            SAMPLE.replace("name = \"nginx aio\"", "name = \"nginx\""),
            "twice",
        ),
        (
            SAMPLE.replace("workloads = [\"1k\"]", "workloads = [\"2k\"]"),
            "2k",
        ),
        (
            SAMPLE.replace("path = \"/a\"", "path = \"a b\""),
            "start with",
        ),
        (
            SAMPLE.replace(
                "name = \"varnish\"\nkind = \"varnish\"",
                "name = \"v\"\nkind = \"varnish\"\nconfig = \"x\"",
            ),
            "edgecache",
        ),
        (
            SAMPLE.replace("title = \"T\"", "title = \"T\"\nbogus = 1"),
            "bogus",
        ),
        (
            SAMPLE.replace("kind = \"edgecache\"", "kind = \"nginx\""),
            "edgecache",
        ),
    ];
    for (text, needle) in cases {
        let err = Experiment::parse(&text).unwrap_err();
        assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    }
}

const COLD: &str = r#"
name = "cold"
title = "C"
duration = "10s"
drop_caches = true
memory_limit = "192m"
metrics = ["edgecache_aio_"]
[fio]
ioengine = "libaio"
[[server]]
name = "edgecache off"
kind = "edgecache"
[[server]]
name = "edgecache auto"
kind = "edgecache"
[[server]]
name = "nginx"
kind = "nginx"
[[workload]]
name = "256k"
connections = 64
timeout = "10s"
urls = [{ path = "/obj/256k/{id}", ids = 4096 }]
probe = { connections = 2, rate = 200, urls = [{ path = "/obj/1k/{id}", ids = 8 }] }
[[workload]]
name = "odd"
object_size = "4k"
urls = [{ path = "/x/{id}", ids = 3 }]
[[target]]
label = "best ≥ 1.3× nginx"
workload = "256k"
metric = "mbps"
server = ["edgecache off", "edgecache auto"]
vs = "nginx"
min = 1.3
[[target]]
label = "disk"
workload = "256k"
metric = "mbps"
server = "edgecache auto"
vs = "fio"
min = 0.85
[quick]
max_ids = 100
"#;

#[test]
fn sizes() {
    assert_eq!(parse_size("192m").unwrap(), 192 << 20);
    assert_eq!(parse_size("4K").unwrap(), 4096);
    assert_eq!(parse_size("1g").unwrap(), 1 << 30);
    assert_eq!(parse_size("4KiB").unwrap(), 4096);
    assert_eq!(parse_size("512").unwrap(), 512);
    for bad in ["", "m", "0", "-1m", "1.5g", "1x"] {
        assert!(parse_size(bad).is_err(), "{bad}");
    }
    assert_eq!(guess_object_size("/obj/256k/{id}"), Some(256 << 10));
    assert_eq!(guess_object_size("/txt/1m/7"), Some(1 << 20));
    assert_eq!(guess_object_size("/a/{id}"), None);
}

#[test]
fn cold_disk_fields_reach_the_plan() {
    let e = Experiment::parse(COLD).unwrap();
    let p = e.plan(&PlanOptions::default()).unwrap();
    assert!(p.drop_caches);
    assert_eq!(p.memory_limit, Some(192 << 20));
    let f = p.fio.as_ref().unwrap();
    assert_eq!(
        (f.ioengine.as_str(), f.size, f.direct),
        ("libaio", 1 << 30, true)
    );
    assert_eq!(p.metrics, ["edgecache_aio_"]);
    assert_eq!(p.targets.len(), 2);
    let w = &p.workloads[0];
    assert_eq!(w.paths.len(), 4096, "thousands of ids");
    assert_eq!(w.object_size, Some(256 << 10));
    assert_eq!(w.timeout.as_deref(), Some("10s"));
    let pr = w.probe.as_ref().unwrap();
    assert_eq!((pr.connections, pr.rate, pr.warm_passes), (2, Some(200), 3));
    assert_eq!(pr.paths.len(), 8);
    assert_eq!(
        p.workloads[1].object_size,
        Some(4096),
        "explicit object_size"
    );
    // --quick caps the ids.
    let q = e
        .plan(&PlanOptions {
            quick: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(q.workloads[0].paths.len(), 100);
    assert_eq!(q.workloads[0].groups[0].ids, Some(100));
    assert_eq!(q.workloads[0].probe.as_ref().unwrap().paths.len(), 8);
}

#[test]
fn invalid_cold_disk_fields_say_why() {
    let cases = [
        (
            COLD.replace("memory_limit = \"192m\"", "memory_limit = \"1m\""),
            "16m",
        ),
        (
            COLD.replace("memory_limit = \"192m\"", "memory_limit = \"lots\""),
            "memory_limit",
        ),
        (COLD.replace("rate = 200", "rate = 0"), "probe"),
        (
            COLD.replace("connections = 2,", "connections = 0,"),
            "probe",
        ),
        (COLD.replace("ids = 8", "ids = 0"), "probe"),
        (
            COLD.replace("ioengine = \"libaio\"", "ioengine = \"x; rm\""),
            "ioengine",
        ),
        (
            COLD.replace("object_size = \"4k\"", "object_size = \"big\""),
            "object_size",
        ),
        (
            COLD.replace("timeout = \"10s\"", "timeout = \"soon\""),
            "timeout",
        ),
        (
            COLD.replace("vs = \"nginx\"", "vs = \"varnish\""),
            "varnish",
        ),
        (
            COLD.replace(
                "workload = \"256k\"\nmetric = \"mbps\"\nserver = [",
                "workload = \"1k\"\nmetric = \"mbps\"\nserver = [",
            ),
            "1k",
        ),
        (
            COLD.replace("min = 1.3", "min = 1.3\nmax = 2.0"),
            "exactly one",
        ),
        (
            COLD.replace(
                "metric = \"mbps\"\nserver = \"edgecache auto\"",
                "metric = \"rps\"\nserver = \"edgecache auto\"",
            ),
            "fio",
        ),
        (
            COLD.replace(
                "metric = \"mbps\"\nserver = [",
                "metric = \"speed\"\nserver = [",
            ),
            "speed",
        ),
        (
            COLD.replace("metrics = [\"edgecache_aio_\"]", "metrics = [\"\"]"),
            "metrics",
        ),
    ];
    for (text, needle) in cases {
        assert_ne!(text, COLD, "replacement for {needle:?} did not apply");
        let err = Experiment::parse(&text).unwrap_err();
        assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    }
    let no_fio = COLD.replace("[fio]\nioengine = \"libaio\"\n", "");
    assert!(Experiment::parse(&no_fio).unwrap_err().contains("[fio]"));
}

const TIERS: &str = r#"
name = "t"
title = "T"
duration = "3s"
warm_passes = 2
[[server]]
name = "edgecache"
kind = "edgecache"
[[workload]]
name = "zipf"
urls = [{ path = "/obj/10k/{id}", ids = 20000, zipf = 0.8 }]
[[workload]]
name = "after"
warm_passes = 0
requests = 20000
urls = [{ path = "/obj/10k/{id}", ids = 20000, zipf = 1.0 }]
before = { urls = [{ path = "/obj/10k/{id}", ids = 20000 }], requests = 20000 }
[quick]
max_ids = 5000
duration = "1s"
"#;

#[test]
fn zipf_warm_passes_and_before_reach_the_plan() {
    let e = Experiment::parse(TIERS).unwrap();
    let p = e.plan(&PlanOptions::default()).unwrap();
    let (z, a) = (&p.workloads[0], &p.workloads[1]);
    assert_eq!(z.groups[0].zipf, Some(0.8));
    assert_eq!(zipf_of(&z.groups), Ok(Some(0.8)));
    assert_eq!(z.paths.len(), 20000, "the fill still covers every id");
    assert_eq!((z.warm_passes, a.warm_passes), (2, 0));
    assert!(z.before.is_none());
    let b = a.before.as_ref().unwrap();
    assert_eq!((b.connections, b.threads, b.requests), (16, 1, Some(20000)));
    assert_eq!(b.paths.len(), 20000);
    assert_eq!(
        b.duration,
        Duration::from_secs(3),
        "the workload's duration"
    );
    assert_eq!(zipf_of(&b.groups), Ok(None));
    // --quick caps every group alike: the shape (and so zipf) survives.
    let q = e
        .plan(&PlanOptions {
            quick: true,
            ..Default::default()
        })
        .unwrap();
    let a = &q.workloads[1];
    assert_eq!(a.groups[0].ids, Some(5000));
    assert_eq!(zipf_of(&a.groups), Ok(Some(1.0)));
    let b = a.before.as_ref().unwrap();
    assert_eq!((b.paths.len(), b.duration), (5000, Duration::from_secs(1)));
    // The report's JSON keeps zipf on the groups that have it.
    let j = serde_json::to_value(&q).unwrap();
    assert_eq!(j["workloads"][1]["groups"][0]["zipf"], 1.0);
    assert!(j["workloads"][1]["before"]["groups"][0]
        .get("zipf")
        .is_none());
}

#[test]
fn zipf_that_cannot_be_honoured_is_a_config_error() {
    let z = "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }]";
    assert!(TIERS.contains(z));
    let cases = [
        (
            TIERS.replace(
                z,
                "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }, { path = \"/a\" }]",
            ),
            "end in \"/{id}\" with the same `ids`",
        ),
        (
            TIERS.replace(
                z,
                "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }, { path = \"/obj/1k/{id}\", ids = 100, zipf = 0.8 }]",
            ),
            "same `ids`",
        ),
        (
            TIERS.replace(
                z,
                "urls = [{ path = \"/obj/10k/{id}\", ids = 20000, zipf = 0.8 }, { path = \"/obj/1k/{id}\", ids = 20000 }]",
            ),
            "same on every URL group",
        ),
        (
            TIERS.replace(z, "urls = [{ path = \"/obj/{id}/x\", ids = 9, zipf = 0.8 }]"),
            "end in",
        ),
        (TIERS.replace("zipf = 0.8", "zipf = 0"), "(0, 3]"),
        (TIERS.replace("zipf = 0.8", "zipf = 3.5"), "(0, 3]"),
        (TIERS.replace("zipf = 0.8", "zipf = -1"), "(0, 3]"),
        (
            TIERS.replace("ids = 20000 }], requests", "ids = 20000, zipf = 9 }], requests"),
            "before",
        ),
        (
            TIERS.replace("requests = 20000 }", "requests = 0 }"),
            "before: requests",
        ),
        (
            TIERS.replace("requests = 20000 }", "requests = 20000, duration = \"x\" }"),
            "before: duration",
        ),
        (
            TIERS.replace("requests = 20000 }", "requests = 1, threads = 2, connections = 1 }"),
            "before: need",
        ),
        (TIERS.replace("warm_passes = 0", "warm_passes = \"no\""), "warm_passes"),
    ];
    for (text, needle) in cases {
        assert_ne!(text, TIERS, "replacement for {needle:?} did not apply");
        let err = Experiment::parse(&text).unwrap_err();
        assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    }
}

#[test]
fn a_miss_workload_lets_edgeload_draw_ids_it_never_lists() {
    let text = SAMPLE
        .replace("warmup = \"1s\"", "warmup = \"1s\"\nexpect = \"miss\"")
        .replace(
            "urls = [{ path = \"/obj/1k/{id}\", ids = 3 }]",
            "urls = [{ path = \"/obj/1k/{id}\", ids = 4294967295 }]",
        )
        .replace(
            "urls = [{ path = \"/a\", weight = 2 }, { path = \"/b/{id}\", ids = 2 }]",
            "urls = [{ path = \"/a/{id}\", ids = 9 }, { path = \"/b/{id}\", ids = 9 }]",
        );
    let p = Experiment::parse(&text)
        .unwrap()
        .plan(&PlanOptions::default())
        .unwrap();
    assert_eq!(p.expect, Expect::Miss);
    let w = &p.workloads[0];
    assert_eq!(
        w.paths,
        vec![("/obj/1k/0".into(), 1)],
        "fill and probe: id 0"
    );
    let t = crate::load::edgeload_targets(&w.groups, &w.paths).unwrap();
    assert_eq!(
        (t.url_path.as_str(), t.paths),
        ("/obj/1k", Some(4294967295))
    );
    assert_eq!(
        p.workloads[1].paths,
        vec![("/a/0".into(), 1), ("/b/0".into(), 1)]
    );
    // A shape edgeload cannot draw is refused, not listed.
    let listed = text.replace("{ path = \"/a/{id}\", ids = 9 }", "{ path = \"/a\" }");
    let err = Experiment::parse(&listed).unwrap_err();
    assert!(err.contains("expect = \"miss\""), "{err}");
}

#[test]
fn path_expansion_is_bounded() {
    let g = [UrlGroup {
        path: "/x/{id}".into(),
        ids: Some(MAX_PATHS as u32 + 1),
        weight: 1,
        zipf: None,
    }];
    assert!(expand_paths(&g).unwrap_err().contains("more than"));
}

#[test]
fn program_names_another_edgecache_build() {
    let with = |kind: &str, program: &str| {
        SAMPLE.replacen(
            "[[server]]\nname = \"edgecache\"\nkind = \"edgecache\"\n",
            &format!("[[server]]\nname = \"other build\"\nkind = \"{kind}\"\nprogram = \"{program}\"\n[[server]]\nname = \"edgecache\"\nkind = \"edgecache\"\n"),
            1,
        )
    };
    let e = Experiment::parse(&with("edgecache", "/opt/old/edgecache")).unwrap();
    assert_eq!(e.servers[0].program.as_deref(), Some("/opt/old/edgecache"));
    assert_eq!(e.servers[1].program, None);
    let err = Experiment::parse(&with("nginx", "/usr/sbin/nginx")).unwrap_err();
    assert!(
        err.contains("`program` applies to kind = \"edgecache\" only"),
        "{err}"
    );
    // Variables are read when the run starts (`expand_env`), not when the file parses.
    let e = Experiment::parse(&with("edgecache", "${EDGEBENCH_TEST_SURELY_UNSET}/e")).unwrap();
    let err = expand_env(e.servers[0].program.as_deref().unwrap()).unwrap_err();
    assert!(
        err.contains("EDGEBENCH_TEST_SURELY_UNSET is not set"),
        "{err}"
    );
    let err = Experiment::parse(&with("edgecache", "${BEFORE")).unwrap_err();
    assert!(err.contains("program: `${` without `}`"), "{err}");
}

#[test]
fn environment_variables_expand() {
    // PATH and HOME are set wherever tests run; the values are read back the same way.
    let path = std::env::var("PATH").unwrap();
    let home = std::env::var("HOME").unwrap();
    assert_eq!(expand_env("plain/file").unwrap(), "plain/file");
    assert_eq!(expand_env("$HOME/x").unwrap(), format!("{home}/x"));
    assert_eq!(
        expand_env("${HOME}x/$PATH").unwrap(),
        format!("{home}x/{path}")
    );
    assert!(expand_env("a/$/b")
        .unwrap_err()
        .contains("without a variable name"));
    assert!(expand_env("${HOME").unwrap_err().contains("without `}`"));
}
