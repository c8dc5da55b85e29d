//! The admin console (`GET /` on the admin listener): the page itself, the `/status`
//! fields it reads (`cache_totals`, `top_objects`), and the page in a real browser:
//! headless Chromium loads it from a running edgecache, its rendered figures are read
//! back from the DOM, a screenshot is kept, and a purge through its form removes an
//! object.
//!
//! The browser test needs `chromium` (Debian's package; `.ci/run` installs it). Without
//! it the test fails, unless `EDGECACHE_TEST_NO_BROWSER=1` says to skip it.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Sends `n` GETs for `path` and returns the X-Cache-Status of each.
fn hits(s: &Setup, path: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let r = s.get(path, &[]);
            assert_eq!(r.status, 200, "{path}");
            r.header("x-cache-status").unwrap_or("").to_string()
        })
        .collect()
}

/// Polls `/status` until `top_objects` names `key` (workers publish once a second).
fn wait_top(s: &Setup, key: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = s.status_json();
        if status.contains(&format!("\"key\": \"{key}\"")) {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "no {key}: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn console_page_is_self_contained_and_allow_listed() {
    let s = setup("", "");
    let r = edge_testkit::get(s.admin, "/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let page = String::from_utf8(r.body).unwrap();
    assert!(page.contains("<title>edgecache console</title>"));
    assert!(page.contains("fetch(\"/status\""));
    assert!(page.contains("action=\"/purge\""));
    // Nothing from elsewhere: no scripts, styles, images or fonts by URL.
    for external in ["src=", "href=", "@import", "url(", "http://", "https://"] {
        assert!(!page.contains(external), "the page loads {external}");
    }
    // HEAD answers the head only; other methods are refused.
    let mut c = edge_testkit::Client::connect(s.admin);
    assert_eq!(c.request("POST", "/", &["Content-Length: 0"]).status, 405);

    // The page is behind `admin.allow` like every admin endpoint.
    let denied = setup_allow("", "", "\"10.0.0.0/8\"");
    assert_eq!(edge_testkit::get(denied.admin, "/", &[]).status, 403);
}

#[test]
fn status_reports_cache_totals_and_top_objects() {
    let s = setup("", "");
    let st = hits(&s, "/obj/4k/1", 16);
    assert_eq!(st[0], "MISS");
    assert!(st[1..].iter().all(|x| x == "HIT"), "{st:?}");
    hits(&s, "/obj/4k/2", 8);
    let status = wait_top(&s, "test/obj/4k/1");
    // One worker, every 8th request sampled: 16 and 8 requests exactly.
    assert!(
        status.contains("\"key\": \"test/obj/4k/1\",\n      \"requests\": 16"),
        "{status}"
    );
    assert!(
        status.contains("\"key\": \"test/obj/4k/2\",\n      \"requests\": 8"),
        "{status}"
    );
    let first = status.find("test/obj/4k/1").unwrap();
    assert!(
        first < status.find("test/obj/4k/2").unwrap(),
        "highest first"
    );
    assert_eq!(json_number(&status, "hit"), Some(22));
    assert_eq!(json_number(&status, "miss"), Some(2));
    assert_eq!(json_number(&status, "bytes_hit"), Some(22 * 4096));
    assert_eq!(json_number(&status, "bytes_origin"), Some(2 * 4096));
}

/// The browser, or None where the run says to skip it.
fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let p = PathBuf::from(dir).join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    if std::env::var("EDGECACHE_TEST_NO_BROWSER").as_deref() == Ok("1") {
        eprintln!("console browser test skipped (EDGECACHE_TEST_NO_BROWSER=1)");
        return None;
    }
    panic!("the console test needs chromium (apt-get install -y chromium), or EDGECACHE_TEST_NO_BROWSER=1 to skip it");
}

/// Runs headless Chromium on `url` with `args` (after the script has run and the page
/// has fetched `/status`), and returns its stdout.
fn headless(browser: &PathBuf, profile: &std::path::Path, args: &[&str], url: &str) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--virtual-time-budget=1500",
            "--window-size=1280,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element with `id` in a dumped DOM (its first text, tags dropped).
fn text_of(dom: &str, id: &str) -> String {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    let end = start + dom[start..].find("</").unwrap();
    let mut s = String::new();
    let mut in_tag = false;
    for c in dom[start..end].chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => s.push(c),
            _ => {}
        }
    }
    s
}

#[test]
fn console_in_headless_chromium_shows_figures_and_purges() {
    let Some(browser) = chromium() else {
        return;
    };
    let s = setup("", "");
    // 3 misses, 13 hits: hit ratio 13/16 = 81.3%, the same for bytes (same sizes).
    hits(&s, "/obj/4k/1", 8);
    hits(&s, "/obj/4k/2", 4);
    hits(&s, "/obj/4k/3", 4);
    wait_top(&s, "test/obj/4k/1");
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", s.admin);

    let dom = headless(&browser, profile.path(), &["--dump-dom"], &url);
    assert_eq!(text_of(&dom, "hit-ratio"), "81.3%", "{dom}");
    assert_eq!(text_of(&dom, "byte-hit-ratio"), "81.3%", "{dom}");
    assert_eq!(text_of(&dom, "requests-total"), "16", "{dom}");
    assert!(
        dom.contains("<td class=\"k\">test/obj/4k/1</td><td>8</td>"),
        "{dom}"
    );
    assert!(dom.contains("<td class=\"k\">origin</td>"), "{dom}");
    assert!(dom.contains("<td class=\"k\">c1</td><td>3</td>"), "{dom}");

    // The screenshot, kept for a person to look at (target/tmp/console.png).
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    let _ = std::fs::remove_file(&shot);
    headless(
        &browser,
        profile.path(),
        &[&format!("--screenshot={}", shot.display())],
        &url,
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{}",
        png.len()
    );

    // A purge through the form (filled and submitted by the page's own script).
    let dom = headless(
        &browser,
        profile.path(),
        &["--dump-dom"],
        &format!("{url}?purge=url&value=/obj/4k/2"),
    );
    assert_eq!(text_of(&dom, "purge-result"), "purged 1 object", "{dom}");
    assert_eq!(
        s.get("/obj/4k/2", &[]).header("x-cache-status"),
        Some("MISS")
    );
    assert_eq!(
        s.get("/obj/4k/1", &[]).header("x-cache-status"),
        Some("HIT")
    );
}

/// Every metric the shipped Grafana dashboard queries is one `/metrics` serves (names
/// checked against a running edgecache, so a renamed family fails here).
#[test]
fn grafana_dashboard_queries_served_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/grafana/edgecache-dashboard.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() >= 20, "{}", exprs.len());
    let s = setup("", "");
    s.get("/obj/1k/1", &[]);
    let metrics = get_text(s.admin, "/metrics");
    let mut names: Vec<&str> = exprs
        .iter()
        .flat_map(|e| e.match_indices("edgecache_").map(move |(i, _)| &e[i..]))
        .map(|e| {
            let end = e
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(e.len());
            &e[..end]
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 25, "{names:?}");
    for name in names {
        let served = metrics
            .lines()
            .any(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")));
        assert!(
            served,
            "the dashboard queries {name}, which /metrics does not serve"
        );
    }
}
