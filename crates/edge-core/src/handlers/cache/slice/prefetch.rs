//! `slice_prefetch = N`: a response that reads a slice to its end starts background
//! fetches of the next N slices, bounded per worker ([`MAX_PREFETCHES`]).
//!
//! How it fits: the request flow (`super`) calls [`prefetch`]; each fetch is led on its
//! slice's inflight lock and its answer taken like any slice's ([`super::obtain::take`]).

use super::got::{slice_ctx, Reference};
use super::obtain::take;
use super::plan::Slicer;
use crate::handlers::cache::ctx::{Ctx, OwnedCtx};
use crate::http::conn::Conn;
use crate::http::exchange::Exchange;
use edge_cache::Join;
use std::time::SystemTime;

/// Most background slice fetches (`slice_prefetch`) in flight on one worker.
pub const MAX_PREFETCHES: usize = 16;

thread_local! {
    /// Background slice fetches in flight on this worker thread.
    static PREFETCHING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one background fetch for as long as it lives.
struct Prefetching;

impl Prefetching {
    fn start() -> Option<Prefetching> {
        PREFETCHING.with(|c| {
            (c.get() < MAX_PREFETCHES).then(|| {
                c.set(c.get() + 1);
                Prefetching
            })
        })
    }
}

impl Drop for Prefetching {
    fn drop(&mut self) {
        PREFETCHING.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// `slice_prefetch = N`: starts background fetches of slices `from .. from + N` that
/// are neither stored nor being fetched, each led on its slice's inflight lock (so a
/// client that asks for it meanwhile follows it) and stored like any slice; one that
/// disagrees with the reference is not stored. At most [`MAX_PREFETCHES`] per worker.
pub(super) fn prefetch(
    ctx: &Ctx<'_>,
    conn: &Conn,
    ex: &mut Exchange,
    sl: &Slicer,
    reference: &Reference,
    from: u64,
) {
    let n = u64::from(ctx.p.rules.slice_prefetch);
    for m in from..from.saturating_add(n) {
        if sl.bytes(m, reference.total).is_empty() {
            return;
        }
        let sc = slice_ctx(ctx, sl, m);
        if sc.cache.index_probe(sc.key_hash) {
            continue;
        }
        let Some(count) = Prefetching::start() else {
            return;
        };
        let Join::Leader(handle) = sc.cache.inflight().join(sc.key_hash) else {
            continue; // someone fetches it already
        };
        crate::handlers::context::upstream_fields(conn, ex, ctx.shared, ctx.route);
        let fields = ex.upstream_fields.clone();
        let mut extra = Vec::with_capacity(48);
        edge_http::write_header(&mut extra, "Range", sl.range_value(m).as_bytes());
        let asked = sl.span(m);
        let head = crate::handlers::cache::ctx::fill_head(
            &sc,
            &ex.req,
            ex.client_addr().ip(),
            &extra,
            fields.as_deref(),
        );
        let host = fields.as_ref().and_then(|f| f.host.clone());
        let Some(owned) = OwnedCtx::new(&sc) else {
            return;
        };
        let req = ex.req.headers.clone();
        let expect = Reference {
            meta: reference.meta.clone(),
            total: reference.total,
        };
        let sl = *sl;
        tokio::task::spawn_local(async move {
            let _count = count;
            let Some(c) = owned.ctx() else {
                return;
            };
            let t0 = SystemTime::now();
            let up = crate::upstream::fetch_with(
                c.w.upstream(),
                None,
                &c.p.upstream,
                &head,
                &edge_http::Method::Get,
                c.affinity(),
                host.as_deref(),
            )
            .await;
            if let Ok(up) = up {
                let times = (t0, SystemTime::now());
                // A stored slice's copy runs in its own task; anything else is dropped.
                let (handle, expect) = (Some(handle), Some(&expect));
                let _ = take(&c, &req, up, times, &sl, m, asked, handle, expect).await;
            }
        });
    }
}
