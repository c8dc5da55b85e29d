//! Expired (or `no-cache`, or soft-purged) objects: revalidate with the stored
//! validators, serve stale when the origin fails, or refresh in the background.
//!
//! How it fits: [`super::handle`] calls [`revalidate`] for a stale lookup, holding the
//! key's collapse lock when it leads (so one request refreshes and the others wait or
//! are served UPDATING). Outcomes:
//! - `stale-while-revalidate` window, or `use_stale = ["updating"]` with
//!   `background_update`: the stale object is served at once (`UPDATING`) and one task
//!   ([`tokio::task::spawn_local`] on this worker) refreshes it;
//! - 304 → `policy::refresh_meta` + `Cache::refresh` (header only, body untouched) →
//!   `REVALIDATED`; a refreshed response that may no longer be stored is purged;
//! - an origin error/timeout, or a 5xx listed in `use_stale` (or within
//!   `stale-if-error`) → the stale object (`STALE`), with a log line;
//! - any other full response replaces the object like a miss (`EXPIRED`).

use super::ctx::{fill_head, CacheStatus, Ctx, MayStore, OwnedCtx};
use super::fill::{self, open_writer, pump};
use super::store::publish;
use crate::config::UseStale;
use crate::http::conn::Conn;
use crate::http::exchange::{Exchange, ExchangeError};
use crate::state::rules::StaleSet;
use crate::upstream::{fetch_with, UpstreamError};
use edge_cache::policy::{self, StaleReason};
use edge_cache::{FillHandle, HitEntry, Lookup, ObjectMeta};
use edge_http::{HeaderMap, Method, RequestHead};
use std::sync::Arc;
use std::time::SystemTime;

/// May a stale object be served while someone else refreshes it?
pub fn may_serve_updating(ctx: &Ctx<'_>, meta: &ObjectMeta, now: SystemTime) -> bool {
    // Never a partial object: it is not revalidated (see [`revalidate`]).
    meta.status != 206
        && policy::can_serve_stale_with(
            meta,
            now,
            StaleReason::Updating,
            ctx.use_stale(UseStale::Updating),
        )
}

/// May this request itself serve stale and leave the refresh to a background task?
fn background_allowed(ctx: &Ctx<'_>, meta: &ObjectMeta, now: SystemTime) -> bool {
    let configured = ctx.p.rules.background_update && ctx.use_stale(UseStale::Updating);
    policy::can_serve_stale_with(meta, now, StaleReason::Updating, configured)
}

/// Does `use_stale` (or the object's `stale-if-error`) allow serving stale after this
/// upstream outcome?
fn stale_on_error(
    ctx: &Ctx<'_>,
    meta: &ObjectMeta,
    err: Option<&UpstreamError>,
    status: u16,
) -> bool {
    match use_stale_covers(ctx.p.rules.use_stale, err, status) {
        Some(listed) => {
            policy::can_serve_stale_with(meta, SystemTime::now(), StaleReason::Error, listed)
        }
        None => false,
    }
}

/// Whether `use_stale` lists this upstream outcome (an error, or the origin's status
/// when `err` is None); `None` when stale is out of the question: the client's own
/// error, or an answer that is not a 5xx.
fn use_stale_covers(use_stale: StaleSet, err: Option<&UpstreamError>, status: u16) -> Option<bool> {
    let has = |u: UseStale| use_stale.contains(u);
    Some(match err {
        Some(UpstreamError::ConnectTimeout | UpstreamError::ReadTimeout) => has(UseStale::Timeout),
        Some(UpstreamError::Client(_) | UpstreamError::ClientBody(_)) => return None,
        Some(_) => has(UseStale::Error),
        None if !(500..600).contains(&status) => return None,
        None => {
            has(UseStale::Http5xx)
                || match status {
                    500 => has(UseStale::Http500),
                    502 => has(UseStale::Http502),
                    503 => has(UseStale::Http503),
                    504 => has(UseStale::Http504),
                    _ => false,
                }
        }
    })
}

/// `If-None-Match` / `If-Modified-Since` lines from the stored validators.
fn validators(ctx: &Ctx<'_>, meta: &ObjectMeta) -> Vec<u8> {
    validator_lines(meta, ctx.p.rules.cache_revalidate)
}

/// The conditional request lines for `meta`; none with `cache_revalidate = false`
/// (nginx's `proxy_cache_revalidate off`): the refetch is then unconditional.
fn validator_lines(meta: &ObjectMeta, cache_revalidate: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if !cache_revalidate {
        return out;
    }
    if let Some(etag) = &meta.etag {
        edge_http::write_header(&mut out, "If-None-Match", etag.as_bytes());
    }
    if let Some(lm) = meta.last_modified {
        edge_http::write_header(
            &mut out,
            "If-Modified-Since",
            edge_http::fmt_http_date(lm).as_bytes(),
        );
    }
    out
}

/// Refreshes a stored object from a 304's headers: its header is rewritten on disk
/// (on the file I/O backend's pool: in place, or the whole file when the new header does
/// not fit before the body) and `entry` carries the new metadata. A response that may
/// no longer be stored is purged, on the pool too (and still served this once). None only if the
/// rewrite job itself failed to run (it panicked): the entry went with it.
async fn apply_304(
    ctx: &Ctx<'_>,
    mut entry: HitEntry,
    req: &HeaderMap,
    resp: &HeaderMap,
    t0: SystemTime,
    t1: SystemTime,
) -> Option<HitEntry> {
    match policy::refresh_meta(&entry.meta, req, resp, &ctx.p.policy, t0, t1) {
        Ok(m) => {
            let cache = ctx.cache.clone();
            let new_meta = m.clone();
            let job = move || {
                let r = cache.refresh(&entry, new_meta);
                (entry, r)
            };
            match ctx.w.file_io.blocking(job).await {
                Ok((e, r)) => {
                    if let Err(err) = r {
                        tracing::debug!("cache refresh of {} failed: {err}", ctx.key);
                    }
                    entry = e;
                }
                Err(err) => {
                    tracing::error!("cache refresh of {}: {err}", ctx.key);
                    return None;
                }
            }
            entry.meta = Arc::new(m);
            Some(entry)
        }
        Err(why) => {
            tracing::debug!(
                "{} no longer cacheable after 304 ({})",
                ctx.key,
                why.as_str()
            );
            // The unlinks run on the file I/O backend's pool, like every other purge.
            let (cache, key) = (ctx.cache.clone(), ctx.key.clone());
            if let Err(err) = ctx
                .w
                .file_io
                .blocking(move || cache.purge_key(&key, false))
                .await
            {
                tracing::error!("purge of {} after a 304: {err}", ctx.key);
            }
            Some(entry)
        }
    }
}

/// A stale lookup. `handle` is the collapse lock when this request leads the refresh;
/// `store` is `MayStore::No` under `no_cache`/`cache_min_uses` (a full response is not
/// stored).
pub async fn revalidate(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    handle: Option<FillHandle>,
    entry: HitEntry,
    store: MayStore,
) -> Result<(), ExchangeError> {
    if entry.meta.status == 206 {
        // A stale partial object is not revalidated: the request fetches what it
        // needs, and the response replaces the part.
        drop(handle);
        return super::partial::miss(ctx, conn, ex, store).await;
    }
    let now = SystemTime::now();
    // Whatever the refresh, it goes upstream: its proxy_set_header fields, once.
    crate::handlers::context::upstream_fields(conn, ex, ctx.shared, ctx.route);
    if let Some(h) = handle {
        if background_allowed(ctx, &entry.meta, now) {
            spawn_background(ctx, ex, ex.client_addr().ip(), Some(h));
            return super::deliver::stored(ctx, conn, ex, entry, CacheStatus::Updating).await;
        }
        return foreground(ctx, conn, ex, Some(h), entry, store).await;
    }
    if background_allowed(ctx, &entry.meta, now) && store == MayStore::Yes {
        // No lock (cache_lock = false): still refresh only in the background.
        spawn_background(ctx, ex, ex.client_addr().ip(), None);
        return super::deliver::stored(ctx, conn, ex, entry, CacheStatus::Updating).await;
    }
    foreground(ctx, conn, ex, None, entry, store).await
}

async fn foreground(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    handle: Option<FillHandle>,
    entry: HitEntry,
    store: MayStore,
) -> Result<(), ExchangeError> {
    let extra = validators(ctx, &entry.meta);
    let conditional = !extra.is_empty();
    let (up, t0, t1) = fill::fetch_origin(ctx, conn, ex, &extra).await;
    let mut up = match up {
        Ok(up) => up,
        Err(e) => {
            drop(handle);
            if stale_on_error(ctx, &entry.meta, Some(&e), 0) {
                tracing::warn!(
                    "upstream \"{}\": {}; serving stale {}",
                    ctx.p.upstream.name,
                    e,
                    ctx.key
                );
                ex.cache.detail = Some(
                    if matches!(
                        e,
                        UpstreamError::ReadTimeout | UpstreamError::ConnectTimeout
                    ) {
                        "origin-timeout"
                    } else {
                        "origin-unreachable"
                    },
                );
                return super::deliver::stored(ctx, conn, ex, entry, CacheStatus::Stale).await;
            }
            super::ctx::mark(ctx.w, ex, CacheStatus::Expired);
            return fill::upstream_failed(ctx, conn, ex, e).await;
        }
    };
    let status = up.head.status;
    if status == 304 && conditional {
        let resp = std::mem::take(&mut up.head.headers);
        up.release(&ctx.w.pool, &ctx.p.upstream);
        let refreshed = apply_304(ctx, entry, &ex.req.headers, &resp, t0, t1).await;
        drop(handle); // followers join again and find the refreshed object
        let Some(entry) = refreshed else {
            return fill::fetch_and_fill(ctx, conn, ex, None, CacheStatus::Expired, MayStore::No)
                .await;
        };
        ex.cache.fwd_status = Some(304);
        return super::deliver::stored(ctx, conn, ex, entry, CacheStatus::Revalidated).await;
    }
    if stale_on_error(ctx, &entry.meta, None, status) {
        drop(up); // closes the upstream connection; its body is not wanted
        drop(handle);
        tracing::warn!(
            "upstream \"{}\" answered {status}; serving stale {}",
            ctx.p.upstream.name,
            ctx.key
        );
        ex.cache.fwd_status = Some(status);
        return super::deliver::stored(ctx, conn, ex, entry, CacheStatus::Stale).await;
    }
    drop(entry);
    fill::respond(
        ctx,
        conn,
        ex,
        up,
        handle,
        CacheStatus::Expired,
        store,
        t0,
        t1,
    )
    .await
}

/// Starts the one background refresh of this key on the worker's loop.
fn spawn_background(
    ctx: &Ctx<'_>,
    ex: &Exchange,
    peer: std::net::IpAddr,
    handle: Option<FillHandle>,
) {
    let Some(owned) = OwnedCtx::new(ctx) else {
        return; // dropping the handle lets the next request refresh in the foreground
    };
    let job = Background {
        owned,
        req: (*ex.req).clone(),
        peer,
        fields: ex.upstream_fields.clone(),
    };
    tokio::task::spawn_local(async move { job.run(handle).await });
}

/// What a background refresh needs, owned (it outlives the request).
struct Background {
    owned: OwnedCtx,
    req: RequestHead,
    peer: std::net::IpAddr,
    /// The request's rendered `proxy_set_header`.
    fields: Option<std::rc::Rc<crate::http::fields::UpstreamFields>>,
}

impl Background {
    async fn run(self, handle: Option<FillHandle>) {
        let Some(ctx) = self.owned.ctx() else {
            return;
        };
        let p = ctx.p;
        let entry = match ctx
            .cache
            .lookup_with(
                &ctx.w.file_io,
                &ctx.key,
                &self.req.headers,
                SystemTime::now(),
            )
            .await
        {
            Lookup::Fresh(_) => return, // someone refreshed it meanwhile
            Lookup::Stale(e) => Some(e),
            Lookup::Miss => None,
        };
        let extra = entry
            .as_ref()
            .map(|e| validators(&ctx, &e.meta))
            .unwrap_or_default();
        let fields = self.fields.as_deref();
        let head = fill_head(&ctx, &self.req, self.peer, &extra, fields);
        let t0 = SystemTime::now();
        let affinity = ctx.affinity();
        let up = fetch_with(
            ctx.w.upstream(),
            None,
            &p.upstream,
            &head,
            &Method::Get,
            affinity,
            fields.and_then(|f| f.host.as_deref()),
        )
        .await;
        let t1 = SystemTime::now();
        let up = match up {
            Ok(up) => up,
            Err(e) => {
                tracing::warn!(
                    "upstream \"{}\": {} during background update of {}",
                    p.upstream.name,
                    e,
                    ctx.key
                );
                return;
            }
        };
        if let (Some(e), 304) = (entry, up.head.status) {
            if !extra.is_empty() {
                let resp = up.head.headers.clone();
                up.release(&ctx.w.pool, &p.upstream);
                apply_304(&ctx, e, &self.req.headers, &resp, t0, t1).await;
                drop(handle);
                return;
            }
        }
        if (500..600).contains(&up.head.status) {
            // Keep serving the stale object; the next request tries again.
            tracing::warn!(
                "upstream \"{}\" answered {} during background update of {}",
                p.upstream.name,
                up.head.status,
                ctx.key
            );
            return;
        }
        let writer = open_writer(&ctx, &self.req.headers, &up, t0, t1).await;
        let store = publish(writer, handle);
        let _ = pump(&ctx, None, up, store, None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn use_stale_maps_outcomes_like_nginx() {
        use UseStale::*;
        let refused = UpstreamError::Connect(std::io::Error::other("refused"));
        // (use_stale, upstream error, origin status, expected)
        type Case<'a> = (&'a [UseStale], Option<&'a UpstreamError>, u16, Option<bool>);
        let cases: &[Case<'_>] = &[
            (&[Error], Some(&refused), 0, Some(true)),
            (&[Timeout], Some(&refused), 0, Some(false)),
            (&[Timeout], Some(&UpstreamError::ReadTimeout), 0, Some(true)),
            (
                &[Error],
                Some(&UpstreamError::ConnectTimeout),
                0,
                Some(false),
            ),
            (&[Error], Some(&UpstreamError::Closed), 0, Some(true)),
            (
                &[Error, Timeout],
                Some(&UpstreamError::ClientBody(413)),
                0,
                None,
            ),
            (&[Http5xx], None, 503, Some(true)),
            (&[Http500], None, 500, Some(true)),
            (&[Http500], None, 502, Some(false)),
            (&[Http502, Http504], None, 504, Some(true)),
            (&[Error], None, 500, Some(false)),
            (&[Http5xx], None, 404, None),
            (&[Http5xx], None, 200, None),
        ];
        for (i, (list, err, status, want)) in cases.iter().enumerate() {
            assert_eq!(
                use_stale_covers(StaleSet::of(list), *err, *status),
                *want,
                "case {i}"
            );
        }
    }

    #[test]
    fn validators_come_from_the_stored_object() {
        let mut m = ObjectMeta::new("k", 200, SystemTime::now());
        assert!(
            validator_lines(&m, true).is_empty(),
            "nothing to validate with"
        );
        m.etag = Some("\"v1\"".into());
        m.last_modified = Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let lines = String::from_utf8(validator_lines(&m, true)).unwrap();
        assert_eq!(
            lines,
            "If-None-Match: \"v1\"\r\nIf-Modified-Since: Tue, 14 Nov 2023 22:13:20 GMT\r\n"
        );
        assert!(validator_lines(&m, false).is_empty());
    }
}
