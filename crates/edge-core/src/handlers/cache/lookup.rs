//! The lookup of a cached request: through the worker's RAM tier and open-file cache,
//! and with `cache_verify = "always"` a body check before anything is sent.
//!
//! How it fits: [`super::handle`] looks every request's key up here, and
//! [`super::slice`] each slice's key.

use super::ctx::Ctx;
use edge_cache::{HitBody, HitEntry, Lookup};
use std::hash::Hasher as _;
use std::time::SystemTime;

/// The cache lookup through this worker's RAM tier and open-file cache.
pub async fn lookup(ctx: &Ctx<'_>, req: &edge_http::HeaderMap, now: SystemTime) -> Lookup {
    let found = ctx
        .cache
        .lookup_hashed(
            Some(&ctx.w.local),
            &ctx.w.file_io,
            &ctx.key,
            ctx.key_hash,
            req,
            now,
        )
        .await;
    ctx.w.publish_local();
    match found {
        Lookup::Fresh(e) => verified(ctx, e).await.map_or(Lookup::Miss, Lookup::Fresh),
        Lookup::Stale(e) => verified(ctx, e).await.map_or(Lookup::Miss, Lookup::Stale),
        Lookup::Miss => Lookup::Miss,
    }
}

/// Bodies at most this large are kept in memory once read for `cache_verify =
/// "always"` (the response is sent from that copy); larger ones are hashed in pieces and
/// sent from the file (the page cache holds what was just read).
const VERIFY_KEEP: u64 = 1 << 20;

/// With `cache_verify = "always"`, a body read from disk is checked against its
/// checksum before it is sent: a mismatch drops the object (None: the request then
/// fetches it again, as on a miss).
pub async fn verified(ctx: &Ctx<'_>, mut entry: HitEntry) -> Option<HitEntry> {
    if ctx.cache.verify() != edge_cache::Verify::Always {
        return Some(entry);
    }
    let Some(file) = entry.file() else {
        return Some(entry); // a RAM-tier body: memory is not re-checked
    };
    let io = &ctx.w.file_io;
    let len = entry.body_len;
    if len <= VERIFY_KEEP {
        let buf = Vec::with_capacity(len as usize);
        let (res, body) = io
            .read_exact_append(file, entry.body_offset, len as usize, buf)
            .await;
        if let Err(e) = res {
            ctx.cache
                .drop_corrupt(&entry, &format!("reading the body: {e}"));
            return None;
        }
        if !edge_cache::Cache::body_matches(&entry, &body) {
            ctx.cache.drop_corrupt(&entry, "body checksum mismatch");
            return None;
        }
        entry.body = HitBody::Mem(bytes::Bytes::from(body));
        entry.body_offset = 0;
        return Some(entry);
    }
    let mut h = twox_hash::XxHash3_64::new();
    let mut at = 0u64;
    let mut buf = Vec::with_capacity(VERIFY_KEEP as usize);
    while at < len {
        let n = (len - at).min(VERIFY_KEEP) as usize;
        buf.clear();
        let (res, b) = io
            .read_exact_append(file, entry.body_offset + at, n, buf)
            .await;
        buf = b;
        if let Err(e) = res {
            ctx.cache
                .drop_corrupt(&entry, &format!("reading the body: {e}"));
            return None;
        }
        h.write(&buf);
        at += n as u64;
    }
    if h.finish() != entry.meta.body_hash {
        ctx.cache.drop_corrupt(&entry, "body checksum mismatch");
        return None;
    }
    Some(entry)
}
