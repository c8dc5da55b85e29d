//! Sending a stored object, or a fill in progress, to one client: as it is
//! ([`super::hit`], [`super::stream`]), or compressed or decoded for it
//! ([`super::variant`]) when the location compresses.
//!
//! How it fits: every place that answers a client from the cache with the identity
//! object goes through here ([`stored`], [`filling`], [`follow`]), so a client that
//! wants a coding gets the compressed copy wherever the object comes from: a hit, a
//! stale or revalidated object, the leader of a miss, or a collapsed follower.
//! A stored partial object (status 206) never comes here: [`super::handle`] sends it
//! to [`super::partial`], and revalidation makes a stale one a miss.

use super::ctx::{mark, CacheStatus, Ctx, MayStore};
use super::hit;
use super::stream::{stream_fill, Leader};
use super::variant::{self, Source};
use crate::http::conn::Conn;
use crate::http::exchange::{Exchange, ExchangeError};
use edge_cache::{Fill, FillHead, HitEntry, WaitHead};
use std::sync::Arc;

/// Sends a stored object with `X-Cache-Status: st`.
pub async fn stored(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    entry: HitEntry,
    st: CacheStatus,
) -> Result<(), ExchangeError> {
    match variant::plan_for(ctx, ex, &entry.meta) {
        Some(plan) => {
            mark(ctx.w, ex, st);
            let src = Source::Hit(entry);
            Box::pin(variant::serve(ctx, conn, ex, src, plan, &[])).await
        }
        None => hit::serve(ctx, conn, ex, entry, st).await,
    }
}

/// Sends a fill's object as it is written (the caller has set the cache status);
/// `leader` for the client of the request that leads the fill.
pub async fn filling(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    fill: &Arc<Fill>,
    head: Arc<FillHead>,
    leader: Option<Leader>,
) -> Result<(), ExchangeError> {
    match variant::plan_for(ctx, ex, &head.meta) {
        Some(plan) => {
            // Its copy is made from the fill as it grows (or it is transformed on the
            // fly); a leader's relay is not needed for that.
            let extra = leader.map(|l| l.extra).unwrap_or_default();
            let src = Source::Fill {
                fill: fill.clone(),
                head,
            };
            Box::pin(variant::serve(ctx, conn, ex, src, plan, &extra)).await
        }
        None => stream_fill(ctx, conn, ex, fill, head, leader).await,
    }
}

/// How following a fill ended.
pub enum Followed {
    /// The response was sent (or failed).
    Done(Result<(), ExchangeError>),
    /// The leader failed before the head: join again.
    Retry,
    /// Fetch on our own: uncached after "not storable" or `cache_lock_timeout`
    /// (`store` false), or storing our own variant when the leader's response varies
    /// and this request wants another one (`store` true).
    Alone { store: MayStore },
}

/// A collapsed follower: wait for the leader's head, then stream the object as it is
/// written. `X-Cache-Status: HIT` (nginx reports its cache-lock waiters the same way).
pub async fn follow(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    fill: &Arc<Fill>,
) -> Followed {
    let head = match fill.wait_head(ctx.p.rules.cache_lock_timeout).await {
        WaitHead::Head(h) => h,
        WaitHead::Retry => return Followed::Retry,
        WaitHead::Uncacheable | WaitHead::TimedOut => {
            return Followed::Alone {
                store: MayStore::No,
            }
        }
    };
    // The leader's response varies on request headers this request may not share.
    if !head.meta.vary.is_empty()
        && edge_cache::variant_key(&ctx.key, &head.meta.vary, &ex.req.headers) != head.meta.key
    {
        return Followed::Alone {
            store: MayStore::Yes,
        };
    }
    mark(ctx.w, ex, CacheStatus::Hit);
    ex.cache.collapsed = true;
    Followed::Done(filling(ctx, conn, ex, fill, head, None).await)
}
