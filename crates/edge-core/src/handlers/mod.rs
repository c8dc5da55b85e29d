//! Location handlers: `proxy` (to an upstream, uncached), `cache` (a proxied location
//! with `cache = [...]`), `static` (files under a root), `return` (a fixed status and
//! body) and `empty_gif`.
//!
//! How it fits: the worker implements the session's `Service` by calling [`dispatch`],
//! the router: it finds the request's route in the config snapshot and calls the one
//! handler that serves it. Handlers get what they need as arguments: the worker's
//! [`Services`] (counters, upstream pool, file I/O backend), the config snapshot
//! ([`Shared`]) and the connection and exchange. Nothing below this layer calls up.

pub mod access;
pub mod cache;
pub mod context;
pub mod limits;
pub mod proxy;
pub mod services;
pub mod simple;
pub mod static_files;

use crate::http::respond::finish_without_body;
use crate::http::{Conn, Exchange, ExchangeError};
use crate::state::route::Handler;
use crate::state::sites::Routing;
use crate::state::Shared;
use context::client_of;
use services::Services;
use std::rc::Rc;
use std::sync::Arc;

/// The router: picks the request's server by host ([`crate::state::sites`]), its
/// location and rewrites, applies the location's `limit_conn` and `limit_req`
/// ([`limits`]), its `allow`/`deny` rules and its `secure_link`, and answers with the
/// location's handler (404 when no location matches, 403 when the rules deny the
/// client or a signature is bad, 410 for an expired link, 421 when a TLS connection's
/// certificate does not cover the host, 500 on a rewrite cycle, 301/302 for a
/// redirecting rewrite, the limit's status when one refuses).
pub async fn dispatch(
    w: &Rc<Services>,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
) -> Result<(), ExchangeError> {
    let sites = &shared.sites;
    let listen = conn.info.listen as usize;
    let Some(server) = select_server(conn, ex, shared) else {
        return finish_without_body(conn, ex, &shared.timeouts, 404).await;
    };
    ex.routed.server = server;
    ex.routed.log = sites.servers.get(server as usize).map(|s| s.log.slot);
    if let Some(cert) = conn.info.sni_cert {
        // RFC 9110 7.4: this connection is not authoritative for a host its certificate
        // does not cover (a client reusing a connection, or a forged Host).
        let covered = match (ex.req.host(), shared.listeners.get(listen)) {
            (Some(h), Some(l)) => l
                .sni
                .as_ref()
                .is_none_or(|sni| sni.covers(cert, crate::vars::normalize_host(h))),
            _ => true,
        };
        if !covered {
            return finish_without_body(conn, ex, &shared.timeouts, 421).await;
        }
    }
    let client = client_of(conn, ex, shared);
    let route = match sites.route(server, &ex.req, client, &mut ex.routed) {
        Routing::Route(route, None) => {
            ex.routed.log = Some(route.log.slot);
            route
        }
        Routing::Route(route, Some(uri)) => {
            ex.routed.log = Some(route.log.slot);
            let old = ex.req.path_and_query();
            // An absolute-form target keeps its scheme and authority (they are the host).
            let keep = ex.req.target.len() - old.len();
            let keep = if ex.req.target.ends_with(old) {
                keep
            } else {
                0
            };
            ex.routed
                .original_uri
                .get_or_insert_with(|| old.to_string());
            ex.req.target.replace_range(keep.., &uri);
            route
        }
        Routing::Redirect(status, location) => {
            let mut extra = Vec::new();
            edge_http::write_header(&mut extra, "Location", location.as_bytes());
            let page = crate::http::respond::error_page(status);
            return crate::http::respond::respond(
                conn,
                ex,
                &shared.timeouts,
                status,
                "text/html",
                &page,
                &extra,
            )
            .await;
        }
        Routing::NotFound => return finish_without_body(conn, ex, &shared.timeouts, 404).await,
        Routing::BadRequest => {
            // nginx answers 400 too: `%00`, a bad escape, or `..` above the root. The
            // request was well framed: the connection stays open.
            return finish_without_body(conn, ex, &shared.timeouts, 400).await;
        }
        Routing::Cycle => {
            tracing::error!(
                "rewrite or internal redirection cycle while processing {:?}",
                ex.req.target
            );
            return finish_without_body(conn, ex, &shared.timeouts, 500).await;
        }
    };
    context::apply_fields(client, ex, shared, route);
    if !route.limits.is_empty() {
        if let Some(status) = limits::apply(w, conn, client, ex, shared, route).await {
            return finish_without_body(conn, ex, &shared.timeouts, status).await;
        }
    }
    if let Some(rules) = &route.access {
        if !access::allowed(rules, client, ex, shared) {
            w.stats()
                .access_denied
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            access::log_denied(client, ex, shared);
            return finish_without_body(conn, ex, &shared.timeouts, 403).await;
        }
    }
    // `PURGE` of a cached location has its own gate (`admin.allow`) and names the
    // object without a signature.
    let purge = ex.req.method == edge_http::Method::Purge
        && matches!(&route.handler, Handler::Proxy(p) if !p.caches.is_empty());
    if let Some(link) = route.secure_link.as_ref().filter(|_| !purge) {
        // Signed URLs: 403 for a bad or missing signature, 410 for an expired link.
        let verdict = link.verify(
            &context::vars(client, ex, shared),
            crate::secure_link::unix_now(),
        );
        if let Some(status) = verdict.status() {
            return finish_without_body(conn, ex, &shared.timeouts, status).await;
        }
    }
    if matches!(route.handler, Handler::Proxy(_))
        && ex.req.headers.contains("via")
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
            static_files::handle(w, conn, ex, shared, root, index).await
        }
        Handler::Return(r) => simple::handle_return(conn, ex, shared, r).await,
        Handler::EmptyGif => simple::handle_empty_gif(conn, ex, shared).await,
    }
}

/// The request's server ([`crate::state::sites::Sites::select`]), through the
/// connection's [`crate::http::conn::HostMemo`] when its previous request sent the same
/// Host under the same config generation.
fn select_server(conn: &mut Conn, ex: &mut Exchange, shared: &Shared) -> Option<u16> {
    let sites = &shared.sites;
    let listen = conn.info.listen as usize;
    if !sites.looks_up(listen) {
        return sites.select(listen, None, &mut ex.routed.caps);
    }
    let host = ex.req.host();
    if let (Some(m), Some(h)) = (&conn.host_memo, host) {
        if m.generation == shared.generation && m.host == h {
            return Some(m.server);
        }
    }
    let server = sites.select(listen, host, &mut ex.routed.caps)?;
    // A choice with regex captures is not kept: they must be found again.
    if let Some(h) = host.filter(|_| ex.routed.caps.is_empty()) {
        let m = conn.host_memo.get_or_insert_with(|| {
            Box::new(crate::http::conn::HostMemo {
                generation: 0,
                host: String::new(),
                server: 0,
            })
        });
        m.generation = shared.generation;
        m.host.clear();
        m.host.push_str(h);
        m.server = server;
    }
    Some(server)
}
