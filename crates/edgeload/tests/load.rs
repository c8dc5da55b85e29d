//! Integration tests: the real `edgeload` binary against real servers on 127.0.0.1.
//! Nothing asserts speed (the machine is shared); counts, framing, errors and exit codes
//! are asserted exactly, rates within the tolerance the issue states.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{edgeload, edgeload_json, reported_requests, Framing, TestServer};

const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn request_counts_match_what_the_server_saw() {
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "4",
            "-d",
            "10s",
            "--requests",
            "500",
            &srv.url("/x"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(reported_requests(&r.stdout), 500, "{}", r.stdout);
    assert_eq!(srv.requests(), 500);
    // Keep-alive: one connection per -c, no more.
    assert_eq!(srv.connections(), 4);
    assert_eq!(v["requests"], 500);
    assert_eq!(v["status"]["200"], 500);
    assert_eq!(v["connections_opened"], 4);
    assert!(!r.stdout.contains("Socket errors"), "{}", r.stdout);
}

#[test]
fn open_loop_sends_at_the_requested_rate() {
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "10",
            "-R",
            "500",
            "-d",
            "4s",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let sent = srv.requests();
    assert!(
        (1900..=2100).contains(&sent),
        "server saw {sent} requests, want 2000 ± 5%\n{}",
        r.stdout
    );
    assert_eq!(v["mode"], "open");
    assert_eq!(v["target_rps"], 500.0);
    // Corrected latency is measured from the intended send time, so it is never below
    // the service time.
    assert!(v["latency_us"]["p50"].as_u64().unwrap() >= v["service_us"]["p50"].as_u64().unwrap());
    assert!(
        r.stdout.contains("Open loop at 500.00 requests/sec"),
        "{}",
        r.stdout
    );
}

#[test]
fn verify_catches_a_corrupted_body() {
    let srv = TestServer::start(Framing::Length, Some(10));
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "100",
            "--verify",
            &srv.url("/obj/1"),
        ],
        LIMIT,
    );
    assert_eq!(
        r.code,
        Some(1),
        "a mismatch must fail the run\n{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stdout
            .contains("  Verify: 90 ok, 10 mismatched, 0 without checksum"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("did not match their X-Checksum"),
        "{}",
        r.stderr
    );

    // The same server without corruption passes, chunked bodies included.
    let clean = TestServer::start(Framing::Chunked, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "50",
            "--verify",
            &clean.url("/obj/2"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("  Verify: 50 ok, 0 mismatched, 0 without checksum"),
        "{}",
        r.stdout
    );

    // Corrupted chunked bodies are caught too.
    let bad = TestServer::start(Framing::Chunked, Some(1));
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "--requests",
            "5",
            "--verify",
            &bad.url("/obj/3"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stdout.contains("Verify: 0 ok, 5 mismatched"),
        "{}",
        r.stdout
    );
}

#[test]
fn ramp_produces_connect_and_delay_distributions() {
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "8",
            "--ramp",
            "40",
            "-d",
            "1s",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    for block in [
        "  Connect Distribution\n",
        "  Delay Distribution\n",
        "  Ramp timeouts: connect_timeout 0, delay_timeout 0",
    ] {
        assert!(r.stdout.contains(block), "missing {block:?}:\n{}", r.stdout);
    }
    // The 8 connections were opened at 40/s: the last one ~175 ms after the first.
    let times = srv.seen.accepted_at.lock().unwrap().clone();
    assert_eq!(times.len(), 8);
    let spread = *times.last().unwrap() - times[0];
    assert!(
        spread >= Duration::from_millis(140),
        "connections opened within {spread:?}, want ~175ms"
    );
    assert_eq!(v["connect_us"]["count"], 8);
    assert_eq!(v["delay_us"]["count"], 8);
    assert!(v["connect_us"]["max"].as_u64().unwrap() > 0 || v["connect_us"]["p50"] == 0);
}

#[test]
fn json_parses_and_holds_percentiles() {
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(&["-t", "1", "-c", "2", "-d", "500ms", &srv.url("/")], LIMIT);
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let n = v["requests"].as_u64().unwrap();
    assert!(n > 0);
    assert_eq!(n, reported_requests(&r.stdout));
    assert!(v["duration_s"].as_f64().unwrap() > 0.4);
    assert!(v["rps"].as_f64().unwrap() > 0.0);
    assert!(v["bytes"].as_u64().unwrap() > 0);
    for k in [
        "connect",
        "read",
        "write",
        "timeout",
        "status",
        "verify",
        "connect_timeout",
        "delay_timeout",
    ] {
        assert!(v["errors"][k].is_u64(), "errors.{k}");
    }
    for dist in ["latency_us", "service_us", "connect_us", "delay_us"] {
        let d = &v[dist];
        let get = |k: &str| {
            d[k].as_f64()
                .unwrap_or_else(|| panic!("{dist}.{k} missing: {d}"))
        };
        let ps = ["min", "p50", "p75", "p90", "p99", "p99.9", "p99.99"].map(get);
        assert!(
            ps.windows(2).all(|w| w[0] <= w[1]),
            "{dist} percentiles not monotone: {ps:?}"
        );
        assert!(get("max") >= get("p99.99") * 0.99, "{dist}");
        assert!(get("mean") >= 0.0 && get("stdev") >= 0.0);
    }
    assert_eq!(v["latency_us"]["count"].as_u64(), Some(n));
}

#[test]
fn no_keepalive_opens_one_connection_per_request() {
    let srv = TestServer::start(Framing::Length, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "3",
            "--no-keepalive",
            "--requests",
            "60",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(srv.requests(), 60);
    assert_eq!(srv.connections(), 60);
    assert_eq!(srv.seen.close_requests.load(Ordering::SeqCst), 60);
    assert_eq!(reported_requests(&r.stdout), 60);
}

#[test]
fn chunked_and_close_delimited_bodies_are_framed() {
    let srv = TestServer::start(Framing::Chunked, None);
    let r = edgeload(
        &["-t", "1", "-c", "3", "--requests", "300", &srv.url("/c")],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(reported_requests(&r.stdout), 300);
    assert_eq!(srv.connections(), 3, "chunked keeps the connection alive");
    assert!(!r.stdout.contains("Socket errors"), "{}", r.stdout);

    let srv = TestServer::start(Framing::Close, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "40",
            "--verify",
            &srv.url("/e"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(reported_requests(&r.stdout), 40);
    assert_eq!(
        srv.connections(),
        40,
        "a close-delimited body ends its connection"
    );
    assert!(r.stdout.contains("Verify: 40 ok"), "{}", r.stdout);
    assert!(!r.stdout.contains("Socket errors"), "{}", r.stdout);
}

#[test]
fn pipelining_keeps_counts_exact() {
    let srv = TestServer::start(Framing::Length, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--pipeline",
            "8",
            "--requests",
            "400",
            "--verify",
            &srv.url("/p"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(srv.requests(), 400);
    assert_eq!(reported_requests(&r.stdout), 400);
    assert!(r.stdout.contains("Verify: 400 ok"), "{}", r.stdout);
}

#[test]
fn mix_and_paths_spread_requests_and_report_classes() {
    let srv = TestServer::start(Framing::Length, None);
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(
        &mix,
        format!("# test mix\n3 /small\n\n1 {}\n", srv.url("/large")),
    )
    .unwrap();
    let (r, v) = edgeload_json(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "800",
            "--mix",
            mix.to_str().unwrap(),
            "--paths",
            "4",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let paths = srv.seen.paths.lock().unwrap().clone();
    let small: u64 = (1..=4)
        .map(|i| paths.get(&format!("/small/{i}")).copied().unwrap_or(0))
        .sum();
    let large: u64 = (1..=4)
        .map(|i| paths.get(&format!("/large/{i}")).copied().unwrap_or(0))
        .sum();
    assert_eq!(small + large, 800, "unexpected paths: {paths:?}");
    assert!(
        (520..=680).contains(&small),
        "3:1 weights gave {small}:{large}"
    );
    assert!(
        (1..=4).all(|i| paths.contains_key(&format!("/small/{i}"))),
        "{paths:?}"
    );
    assert!(r.stdout.contains("  URL Classes"), "{}", r.stdout);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("/small/*") && l.contains(&small.to_string())),
        "{}",
        r.stdout
    );
    assert_eq!(v["classes"][0]["url"], "/small/*");
    assert_eq!(v["classes"][0]["requests"].as_u64(), Some(small));
    assert_eq!(v["classes"][1]["requests"].as_u64(), Some(large));
}

/// `--seek`: every connection reads READ bytes in STEP ranges, consecutive, of one
/// object, from an offset within the span; then seeks again.
#[test]
fn seek_reads_consecutive_ranges_from_random_offsets() {
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "64",
            "--paths",
            "3",
            "--seek",
            "16m,4m,1m",
            &srv.url("/obj/2g"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(v["requests"], 64);
    let ranges = srv.seen.ranges.lock().unwrap().clone();
    assert_eq!(ranges.len(), 64, "every request has a Range");
    let mib = 1u64 << 20;
    let mut offsets = std::collections::HashSet::new();
    for conn in 0..2 {
        let mine: Vec<_> = ranges.iter().filter(|r| r.0 == conn).collect();
        // Reads of 4 ranges; the shared --requests budget may cut a connection's last.
        for read in mine.chunks(4) {
            let (_, path, first) = read[0];
            let id: u64 = path.strip_prefix("/obj/2g/").unwrap().parse().unwrap();
            assert!((1..=3).contains(&id), "{path}");
            let start: u64 = first
                .strip_prefix("bytes=")
                .and_then(|v| v.split('-').next())
                .unwrap()
                .parse()
                .unwrap();
            assert!(start <= 12 * mib, "{first}");
            offsets.insert(start);
            for (k, (_, p, range)) in read.iter().enumerate() {
                let a = start + k as u64 * mib;
                assert_eq!(
                    (p, range.as_str()),
                    (path, &*format!("bytes={a}-{}", a + mib - 1))
                );
            }
        }
    }
    assert!(offsets.len() >= 14, "a new offset per seek: {offsets:?}");
}

#[test]
fn zipf_paths_favour_the_low_ids() {
    // Zipf(1) over 100 ids: P(1) = 1 / H(100) ≈ 0.193, P(2) half of that.
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "4",
            "--requests",
            "6000",
            "--paths",
            "100",
            "--zipf",
            "1.0",
            &srv.url("/z"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert!(
        r.stdout
            .contains("  Zipf 1.00 popularity over paths 1..100\n"),
        "{}",
        r.stdout
    );
    let paths = srv.seen.paths.lock().unwrap().clone();
    let count = |i: u64| paths.get(&format!("/z/{i}")).copied().unwrap_or(0);
    let total: u64 = (1..=100).map(count).sum();
    assert_eq!(total, 6000, "unexpected paths: {paths:?}");
    let share1 = count(1) as f64 / 6000.0;
    assert!((0.16..0.23).contains(&share1), "P(1) = {share1}");
    let ratio = count(1) as f64 / count(2) as f64;
    assert!((1.6..2.5).contains(&ratio), "count(1)/count(2) = {ratio}");
    let top10: u64 = (1..=10).map(count).sum();
    assert!(top10 > 3000, "ids 1..10 take ~56% of requests, got {top10}");
    assert_eq!(
        (v["paths"].as_u64(), v["zipf"].as_f64()),
        (Some(100), Some(1.0))
    );
}

#[test]
fn silent_server_gives_timeouts() {
    let srv = TestServer::start(Framing::Silent, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "-d",
            "1s",
            "--timeout",
            "200ms",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(
        r.code,
        Some(1),
        "no request completed: exit 1\n{}",
        r.stdout
    );
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("Socket errors"))
        .expect("socket errors line");
    let timeouts: u64 = line
        .rsplit("timeout ")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(timeouts >= 4, "{line}");
    // Each timeout replaces the connection.
    assert!(srv.connections() >= 4);
}

#[test]
fn refused_connections_are_counted_not_fatal() {
    let addr = edge_testkit::free_addr();
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "-d",
            "300ms",
            &format!("http://{addr}/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1));
    assert!(r.stdout.contains("Socket errors: connect "), "{}", r.stdout);
    assert!(r.stderr.contains("no request completed"), "{}", r.stderr);
}

#[test]
fn bad_flags_and_urls_exit_2_with_a_message() {
    for (args, want) in [
        (
            vec!["ftp://127.0.0.1/"],
            "must start with http:// or https://",
        ),
        (
            vec!["--insecure", "http://127.0.0.1/"],
            "need an https:// URL",
        ),
        (
            vec!["--cacert", "/no/such.pem", "https://127.0.0.1/"],
            "--cacert /no/such.pem",
        ),
        (vec!["127.0.0.1:8080"], "must start with http://"),
        (vec!["-d", "ten", "http://127.0.0.1/"], "invalid duration"),
        (
            vec!["-t", "4", "-c", "2", "http://127.0.0.1/"],
            "must be >= threads",
        ),
        (vec!["--pipeline", "0", "http://127.0.0.1/"], "--pipeline"),
        (
            vec!["--mix", "/no/such/file", "http://127.0.0.1/"],
            "/no/such/file",
        ),
        (vec!["--frobnicate", "http://127.0.0.1/"], "--frobnicate"),
        (
            vec!["--zipf", "0.8", "http://127.0.0.1/"],
            "--zipf needs --paths",
        ),
        (
            vec!["--paths", "10", "--zipf", "4", "http://127.0.0.1/"],
            "--zipf must be",
        ),
        (vec![], "URL"),
    ] {
        let r = edgeload(&args, LIMIT);
        assert_eq!(r.code, Some(2), "{args:?}: stdout {}", r.stdout);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: nothing is run");
    }
    let r = edgeload(&["--help"], LIMIT);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("--ramp"));
}

#[test]
fn ctrl_c_prints_the_report_so_far() {
    let srv = TestServer::start(Framing::Length, None);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_edgeload"))
        .args([
            "-t",
            "1",
            "-c",
            "2",
            "-d",
            "60s",
            "--latency",
            &srv.url("/"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let st = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let r = common::finish(child, Duration::from_secs(10));
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert!(r.stdout.contains("Requests/sec:"), "{}", r.stdout);
    assert!(r.stdout.contains("  Latency Distribution"), "{}", r.stdout);
    let n = reported_requests(&r.stdout);
    assert!(
        n > 0 && n <= srv.requests(),
        "reported {n}, server saw {}",
        srv.requests()
    );
}

#[test]
fn histogram_prints_log2_buckets() {
    let srv = TestServer::start(Framing::Length, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "--requests",
            "200",
            "--histogram",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let head = r
        .stdout
        .lines()
        .find(|l| l.starts_with("Values min:"))
        .expect("histogram header");
    assert!(head.ends_with("count:200"), "{head}");
    let rows: u64 = r
        .stdout
        .lines()
        .filter(|l| l.contains(" |"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(rows, 200, "bucket counts add up\n{}", r.stdout);
}

/// Against the project's own origin (`edgeorigin`): real X-Checksum values over a mix of
/// sizes. Needs the binary (`./test` builds every binary first); when it was not built,
/// the test says so and does nothing.
#[test]
fn verifies_edgeorigin_bodies_over_a_size_mix() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_edgeload")).with_file_name("edgeorigin");
    if !exe.exists() {
        eprintln!(
            "SKIPPED: {} not built (run `cargo build --workspace --bins`)",
            exe.display()
        );
        return;
    }
    let addr = edge_testkit::free_addr();
    let mut origin = edge_testkit::Proc::spawn(&exe, &["--listen", &addr.to_string()]);
    origin.wait_port(addr, Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(&mix, "70 /obj/10k\n25 /obj/100k\n5 /obj/1m\n").unwrap();
    let url = format!("http://{addr}/");
    let r = edgeload(
        &[
            "-t",
            "2",
            "-c",
            "4",
            "--requests",
            "300",
            "--verify",
            "--mix",
            mix.to_str().unwrap(),
            "--paths",
            "20",
            &url,
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("Verify: 300 ok, 0 mismatched, 0 without checksum"),
        "{}",
        r.stdout
    );
    // Statuses outside 2xx/3xx are counted as wrk does.
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "--requests",
            "20",
            &format!("http://{addr}/obj/1k/1?status=503"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.contains("  Non-2xx or 3xx responses: 20"),
        "{}",
        r.stdout
    );
}

/// Large bodies are dropped unread in the kernel by default (`recv(MSG_TRUNC)`), read
/// into the client with `--copy-bodies`, and always read (to be hashed) with `--verify`:
/// the same responses, statuses and bytes either way, pipelined or not, Content-Length
/// and chunked
/// (edgeorigin's chunks are 64 KiB, about one read buffer each: less is left to drop).
#[test]
fn large_bodies_are_dropped_unread_unless_copied_or_verified() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_edgeload")).with_file_name("edgeorigin");
    assert!(exe.exists(), "{} not built", exe.display());
    let addr = edge_testkit::free_addr();
    let mut origin = edge_testkit::Proc::spawn(&exe, &["--listen", &addr.to_string()]);
    origin.wait_port(addr, Duration::from_secs(10));
    for path in ["/obj/1m/7", "/obj/300k/7?chunked=1"] {
        let url = format!("http://{addr}{path}");
        let mut seen = Vec::new();
        // The last run pipelines: each dropped rest ends exactly at its body's end, and
        // the next response's head (already on the socket) is read, not dropped.
        for mode in [
            None,
            Some("--copy-bodies"),
            Some("--verify"),
            Some("--pipeline=4"),
        ] {
            let mut args = vec!["-t", "1", "-c", "3", "--requests", "60"];
            args.extend(mode);
            args.push(&url);
            let (r, v) = edgeload_json(&args, LIMIT);
            assert_eq!(r.code, Some(0), "{mode:?} {path}: {}", r.stderr);
            assert_eq!(v["requests"], 60, "{mode:?} {path}");
            assert_eq!(v["status"]["200"], 60, "{mode:?} {path}");
            assert!(!r.stdout.contains("Socket errors"), "{}", r.stdout);
            let (bytes, dropped) = (
                v["bytes"].as_u64().unwrap(),
                v["bytes_discarded"].as_u64().unwrap(),
            );
            match mode {
                None | Some("--pipeline=4") if !path.contains("chunked") => assert!(
                    dropped > bytes / 2 && dropped < bytes,
                    "{path}: most body bytes dropped unread: {dropped} of {bytes}"
                ),
                // Chunk lines are always read; how much of a chunk's data is dropped
                // depends on how the reads fall.
                None | Some("--pipeline=4") => assert!(dropped < bytes, "{path}"),
                Some(m) => assert_eq!(dropped, 0, "{m} {path}: every byte read"),
            }
            if mode == Some("--verify") {
                assert!(r.stdout.contains("Verify: 60 ok"), "{}", r.stdout);
            }
            seen.push(bytes);
        }
        assert!(seen.iter().all(|&b| b == seen[0]), "{path}: bytes {seen:?}");
    }
}

/// `--source`: connection g's first socket binds address g mod N, so the server sees
/// every address of the range, each for C / N connections.
#[test]
fn source_binds_connections_round_robin_over_the_range() {
    let srv = TestServer::start(Framing::Length, None);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "8",
            "--requests",
            "400",
            "--source",
            "127.0.0.2-127.0.0.5",
            &srv.url("/s"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert!(
        r.stdout
            .contains("  Source addresses: 4 (127.0.0.2-127.0.0.5), round robin\n"),
        "{}",
        r.stdout
    );
    assert_eq!(srv.requests(), 400);
    let mut peers = srv.peers();
    peers.sort();
    assert_eq!(
        peers,
        [
            "127.0.0.2",
            "127.0.0.2",
            "127.0.0.3",
            "127.0.0.3",
            "127.0.0.4",
            "127.0.0.4",
            "127.0.0.5",
            "127.0.0.5"
        ]
    );
    assert_eq!(v["source"], "127.0.0.2-127.0.0.5");
    assert_eq!(v["source_addresses"], 4);
    assert_eq!(v["connections_opened"], 8);
}

/// Reconnects move on by C addresses: one connection without keep-alive walks the whole
/// list (a comma list here, with a single address and a range in it), in order.
#[test]
fn source_reconnects_walk_every_address() {
    let srv = TestServer::start(Framing::Length, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "--no-keepalive",
            "--requests",
            "9",
            "--source",
            "127.0.0.7,127.0.0.3-127.0.0.4",
            &srv.url("/w"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(srv.requests(), 9);
    let peers = srv.peers();
    let want: Vec<String> = ["127.0.0.7", "127.0.0.3", "127.0.0.4"]
        .iter()
        .cycle()
        .take(9)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(peers, want);
}

/// An address the host does not have is one clear error (exit 1) before anything runs;
/// a malformed list is a usage error (exit 2).
#[test]
fn source_that_cannot_bind_exits_before_the_run() {
    let srv = TestServer::start(Framing::Length, None);
    let r = edgeload(&["--source", "192.0.2.1", "-d", "1s", &srv.url("/")], LIMIT);
    assert_eq!(r.code, Some(1), "stdout: {}", r.stdout);
    assert!(
        r.stderr.contains("--source 192.0.2.1: cannot bind"),
        "{}",
        r.stderr
    );
    assert_eq!(srv.connections(), 0);
    let r = edgeload(&["--source", "127.0.0.9-127.0.0.2", &srv.url("/")], LIMIT);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("backwards"), "{}", r.stderr);
}

/// 429s (a rate limit's rejections) are counted per status, in the JSON and on a
/// `Status codes` line, and do not stop the run or change the exit code.
#[test]
fn rejections_are_counted_per_status_and_do_not_abort() {
    let srv = TestServer::start(Framing::Length, None);
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix");
    std::fs::write(&mix, "1 /ok\n3 /429/limited\n").unwrap();
    let (r, v) = edgeload_json(
        &[
            "-t",
            "1",
            "-c",
            "4",
            "--requests",
            "2000",
            "--mix",
            mix.to_str().unwrap(),
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(srv.requests(), 2000);
    // Keep-alive survives a 429: no reconnects.
    assert_eq!(srv.connections(), 4);
    let ok = v["status"]["200"].as_u64().unwrap();
    let limited = v["status"]["429"].as_u64().unwrap();
    assert_eq!(ok + limited, 2000);
    assert!(ok > 0 && limited > ok, "200: {ok}, 429: {limited}");
    assert_eq!(v["errors"]["status"].as_u64(), Some(limited));
    for k in ["connect", "read", "write", "timeout"] {
        assert_eq!(v["errors"][k], 0, "{k}");
    }
    assert!(
        r.stdout
            .contains(&format!("  Status codes: 200 {ok}, 429 {limited}\n")),
        "{}",
        r.stdout
    );
    assert_eq!(v["classes"][1]["requests"].as_u64(), Some(limited));
}
