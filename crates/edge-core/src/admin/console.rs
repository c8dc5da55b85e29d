//! The admin console: `GET /` on the admin listener serves one self-contained HTML
//! page (`console.html`: inline CSS and a small script, no external asset, no
//! framework, so it works offline on a node). The page polls `/status` every 2 s and
//! posts its purge form to `POST /purge`; both, like the page itself, are behind
//! `admin.allow` in `mod.rs`.
//!
//! How it fits: `mod.rs` routes `/` here, and `status.rs` adds the two `/status` fields the page
//! needs beyond the per-worker counters: `cache_totals` (responses by cache status and
//! body bytes by source, for the hit ratios) and `top_objects` (from
//! [`crate::metrics::top`]).

use crate::metrics::{Metrics, CACHE_STATUSES};
use serde_json::{json, Map, Value};

/// The page, served as is.
pub(super) const PAGE: &[u8] = include_bytes!("console.html");

/// `cache_totals`: responses of cached locations by `X-Cache-Status` and body bytes
/// from the cache and from the origin, summed over workers.
pub(super) fn cache_totals_json(m: &Metrics) -> Value {
    let mut by_status = Map::new();
    for (i, st) in CACHE_STATUSES.iter().enumerate() {
        by_status.insert((*st).into(), m.sum(|w| &w.cache_status[i]).into());
    }
    json!({
        "responses": by_status,
        "bytes_hit": m.sum(|w| &w.cache_bytes_hit),
        "bytes_origin": m.sum(|w| &w.cache_bytes_origin),
    })
}

/// `top_objects`: the most requested host and path pairs over about the last minute,
/// highest first, with their estimated request counts (sampled, see
/// [`crate::metrics::top`]).
pub(super) fn top_objects_json(m: &Metrics) -> Value {
    let top = crate::metrics::top::merged(m.workers.iter().map(|w| &w.top));
    top.into_iter()
        .map(|(key, requests)| json!({ "key": key, "requests": requests }))
        .collect()
}
