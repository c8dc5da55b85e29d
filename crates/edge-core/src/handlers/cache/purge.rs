//! The `PURGE` method on a cached location: it removes every stored variant of the key
//! the same request would be cached under, for clients in `admin.allow` only (403
//! otherwise), and answers `{"purged": N}`, 200 when something matched, 404 when nothing
//! did. The purge itself is `edge_cache`'s (`Cache::purge`), which the admin listener's
//! `POST /purge` calls too.

use super::key::cache_key;
use crate::handlers::services::Services;
use crate::http::conn::Conn;
use crate::http::exchange::{Exchange, ExchangeError};
use crate::http::respond::respond;
use crate::state::route::{ProxyRoute, Route};
use crate::state::Shared;
use std::sync::Arc;

/// `PURGE <path>` on a cached location.
pub async fn handle_method(
    w: &Services,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
    route: &Route,
    p: &ProxyRoute,
) -> Result<(), ExchangeError> {
    if !shared.is_admin(ex.client_addr().ip()) {
        let page = crate::http::respond::error_page(403);
        return respond(conn, ex, &shared.timeouts, 403, "text/html", &page, b"").await;
    }
    let key = {
        let vars = crate::handlers::context::vars(
            crate::handlers::context::client_of(conn, ex, shared),
            ex,
            shared,
        );
        cache_key(super::key::KeySpec::of(route), &vars)
    };
    let target = edge_cache::purge::PurgeTarget::Key(key.clone());
    // The unlinks run on the file I/O backend's pool.
    let caches = p.caches.clone();
    let n = w
        .file_io
        .blocking(move || edge_cache::purge_all(&caches, &target, false))
        .await
        .unwrap_or(0);
    tracing::info!("PURGE {key} from {}: {n} objects", ex.client_addr().ip());
    let body = crate::purge::purged_json(n);
    let status = if n > 0 { 200 } else { 404 };
    respond(
        conn,
        ex,
        &shared.timeouts,
        status,
        "application/json",
        body.as_bytes(),
        b"",
    )
    .await
}
