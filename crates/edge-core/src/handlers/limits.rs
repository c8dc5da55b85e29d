//! A location's `limit_conn` and `limit_req`, applied to a request before its handler
//! runs (`crate::limit` decides; this renders the keys, delays and answers).
//!
//! Order: `limit_conn` first (a connection refused takes nothing from the rate), then
//! `limit_req`. A refused `limit_conn` closes the connection after its answer (an
//! HTTP/1.1 connection over its limit should not stay open); a refused `limit_req`
//! leaves it open, as nginx does. A delayed request waits on a timer of its own, in its
//! own task: the worker goes on with everything else; so does a refusal whose zone
//! `hold`s its answer.

use super::services::Services;
use crate::http::{Conn, Exchange};
use crate::state::route::Route;
use crate::state::Shared;
use std::cell::Cell;
use std::time::Duration;

/// Most requests a worker holds back at once for `limit_req` (each holds a connection
/// or an HTTP/2 stream too, so `worker_connections` bounds them first in practice);
/// past it a request that should wait is refused instead.
pub const MAX_DELAYED: usize = 16_384;

thread_local! {
    /// Requests this worker holds back now.
    static DELAYED: Cell<usize> = const { Cell::new(0) };
}

/// One delayed request; counted off when its wait ends or its exchange is dropped.
struct Waiting;

impl Waiting {
    fn new() -> Waiting {
        DELAYED.with(|d| d.set(d.get() + 1));
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        DELAYED.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Applies the route's limits to the request: the status to refuse it with, or None
/// to serve it (after the delay a zone asked for). Sets `$limit_req_status`.
pub async fn apply(
    w: &Services,
    conn: &Conn,
    client: crate::vars::Client,
    ex: &mut Exchange,
    shared: &Shared,
    route: &Route,
) -> Option<u16> {
    let limits = &route.limits;
    let mut buf = w.take_buf(64);
    let (refused, outcome) = {
        let exr: &Exchange = ex;
        let ip = client.peer.ip();
        // The template context, built only for a key that is not the address alone.
        let mut ctx = None;
        let mut key_of = |k: &crate::limit::Key| {
            if k.addr_only() {
                return Some(crate::limit::Key::hash_addr(ip));
            }
            let ctx = ctx.get_or_insert_with(|| super::context::vars(client, exr, shared));
            k.hash(ctx, &mut buf)
        };
        let mut refused = None;
        for rule in limits.conn.iter() {
            let Some(h) = key_of(&rule.key) else {
                continue;
            };
            if conn.held().check(rule, h, w.id).is_err() {
                refused = Some(rule.status);
                break;
            }
        }
        let outcome = if refused.is_none() && !limits.req.is_empty() {
            let now = crate::limit::clock(exr.started);
            let may_delay = DELAYED.with(|d| d.get() < MAX_DELAYED);
            crate::limit::check_req(&limits.req, key_of, now, w.id, may_delay)
        } else {
            crate::limit::ReqOutcome::default()
        };
        (refused, outcome)
    };
    w.give_buf(buf);
    if let Some(status) = refused {
        tracing::debug!(
            "limit_conn: refusing a request of {} with {status}",
            ex.client_addr()
        );
        ex.keep_alive = false;
        return Some(status);
    }
    ex.routed.limit_req = outcome.result.map(|r| r.status());
    if let Some(status) = outcome.refuse {
        tracing::debug!(
            "limit_req: refusing a request of {} with {status}",
            ex.client_addr()
        );
        // `hold`: the answer leaves when the key could pass again, so a client that
        // sends as fast as it is answered is answered at the rate. Held refusals count
        // with the delayed requests (`check_req` holds none past the bound).
        wait_counted(outcome.hold).await;
        return Some(status);
    }
    wait_counted(outcome.delay).await;
    None
}

/// Waits `ns` nanoseconds (none: at once), counted among the worker's waiting requests
/// (the bound `check_req` is told of as `may_delay`).
async fn wait_counted(ns: u64) {
    if ns > 0 {
        let _waiting = Waiting::new();
        tokio::time::sleep(Duration::from_nanos(ns)).await;
    }
}
