//! The runner's helpers.

use super::*;

#[test]
fn metric_names_lose_the_longest_prefix() {
    let p = vec!["edgecache_".to_string(), "edgecache_aio_".to_string()];
    assert_eq!(short_metric("edgecache_aio_reads_total", &p), "reads_total");
    assert_eq!(
        short_metric("edgecache_requests_total", &p),
        "requests_total"
    );
    assert_eq!(short_metric("other", &p), "other");
}

#[test]
fn slugs_are_path_safe() {
    assert_eq!(slug("nginx aio threads"), "nginx-aio-threads");
    assert_eq!(slug("../x"), "---x");
}
