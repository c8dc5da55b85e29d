//! Location handlers: `proxy` (to an upstream, uncached), `cache` (a proxied location
//! with `cache = [...]`), `static` (files under a root), `return` (a fixed status and
//! body) and `empty_gif`.
//!
//! How it fits: the worker implements the session's `Service` by calling [`dispatch`],
//! the router: it finds the request's route in the config snapshot and calls the one
//! handler that serves it. Handlers get what they need as arguments: the worker's
//! [`Services`] (counters, upstream pool, file I/O backend), the config snapshot
//! ([`Shared`]) and the connection and exchange. Nothing below this layer calls up.

pub mod cache;
pub mod proxy;
pub mod services;
pub mod simple;
pub mod static_files;

use crate::http::respond::finish_without_body;
use crate::http::{Conn, Exchange, ExchangeError};
use crate::state::route::Handler;
use crate::state::Shared;
use services::Services;
use std::rc::Rc;
use std::sync::Arc;

/// The router: answers one request with the handler of its location (404 when no
/// location matches).
pub async fn dispatch(
    w: &Rc<Services>,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
) -> Result<(), ExchangeError> {
    // Borrowed from the snapshot the session holds: no reference count touched.
    let Some(route) = shared.router.find(ex.req.path()) else {
        return finish_without_body(conn, ex, &shared.timeouts, 404).await;
    };
    if matches!(route.handler, Handler::Proxy(_))
        && crate::http::node::looped(ex.req.headers.get_all("via"))
    {
        // This request already passed through this node: a routing loop between
        // tiers. Answering stops it (RFC 8586 style; nginx would loop until a limit).
        w.stats()
            .loops
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            "refusing a request that already passed through this node (Via: {}): a routing loop",
            String::from_utf8_lossy(ex.req.headers.get("via").unwrap_or_default())
        );
        ex.keep_alive = false;
        return finish_without_body(conn, ex, &shared.timeouts, 508).await;
    }
    match &route.handler {
        Handler::Proxy(p) if !p.caches.is_empty() => {
            cache::handle(w, conn, ex, shared, route, p).await
        }
        Handler::Proxy(p) => proxy::handle(w, conn, ex, shared, route, p).await,
        Handler::Static { root, index } => {
            static_files::handle(w, conn, ex, shared, route, root, index).await
        }
        Handler::Return(r) => simple::handle_return(conn, ex, shared, route, r).await,
        Handler::EmptyGif => simple::handle_empty_gif(conn, ex, shared, route).await,
    }
}
