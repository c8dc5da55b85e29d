//! What handlers render templates with: the connection's facts and the exchange's
//! routing results as a [`crate::vars::Ctx`].

use crate::http::fields::{AddFields, OutFields, UpstreamFields};
use crate::http::{Conn, Exchange};
use crate::state::route::Route;
use crate::state::Shared;
use crate::vars::{Client, Ctx, LogFacts};
use std::rc::Rc;
use std::sync::Arc;

/// The connection's facts templates read (`$remote_addr`, `$scheme`, `$server_port`).
/// `$remote_addr` is the request's client ([`Exchange::client_addr`]): the TCP peer, or
/// a PROXY header's source, or what `real_ip` found.
pub fn client_of(conn: &Conn, ex: &Exchange, shared: &Shared) -> Client {
    Client {
        peer: ex.client_addr(),
        tls: conn.info.tls,
        server_port: shared
            .listeners
            .get(conn.info.listen as usize)
            .map_or(0, |l| l.addr.port()),
    }
}

/// The variables of this exchange as routing left them, for rendering templates.
pub fn vars<'a>(client: Client, ex: &'a Exchange, shared: &'a Shared) -> Ctx<'a> {
    let server = shared
        .sites
        .servers
        .get(ex.routed.server as usize)
        .map_or("", |s| s.name.as_str());
    Ctx::new(&ex.req, client, server, &ex.routed, &shared.sites.maps)
}

/// Renders the route's `proxy_set_header` for this request onto the exchange, once,
/// before its first upstream request (a proxied request, a cache fill or revalidation,
/// a background refresh). A no-op for a route that sets none, or when done already.
pub fn upstream_fields(conn: &Conn, ex: &mut Exchange, shared: &Shared, route: &Route) {
    let f = &route.fields;
    if ex.upstream_fields.is_some() || !f.sets_request() {
        return;
    }
    {
        let vars = vars(client_of(conn, ex, shared), ex, shared);
        let mut lines = Vec::new();
        let mut value = Vec::new();
        for s in &f.set {
            if let Some(t) = &s.value {
                value.clear();
                t.render(&vars, &mut value);
                value.retain(|&b| b != b'\r' && b != b'\n' && b != 0);
                edge_http::write_header(&mut lines, &s.name, &value);
            }
        }
        let host = f.set_host.as_ref().map(|t| {
            let mut h = t.to_string(&vars);
            h.retain(|c| !c.is_ascii_control());
            h
        });
        ex.upstream_fields = Some(Rc::new(UpstreamFields {
            names: f.set_names.clone(),
            lines,
            host,
        }));
    }
}

/// Puts the route's response-side header control on the exchange (rendered when the
/// head is written, so `$status` and `$upstream_cache_status` have their values).
/// Nothing is allocated for a route without it, and only an `Arc` count for literal
/// `add_header`s. `proxy_set_header` is rendered only for a request that goes upstream
/// ([`upstream_fields`]): a cache hit never pays for it.
pub fn apply_fields(client: Client, ex: &mut Exchange, shared: &Arc<Shared>, route: &Arc<Route>) {
    let f = &route.fields;
    if f.response_default() {
        return;
    }
    let add = match &f.add_static {
        Some(lines) => AddFields::Static(lines.clone()),
        None if f.add.is_empty() => AddFields::None,
        None => {
            let (shared, route) = (shared.clone(), route.clone());
            AddFields::Render(Rc::new(move |ex: &Exchange, out: &mut Vec<u8>| {
                // At head time: what the log would say so far (no time, no bytes yet).
                let facts = LogFacts {
                    status: ex.status,
                    cache_status: ex.cache_status,
                    time_iso8601: "",
                    time_local: "",
                    body_bytes_sent: 0,
                    bytes_sent: 0,
                    request_length: ex.head_length,
                    request_time: ex.started.elapsed(),
                    upstream_response_time: ex.upstream_started.map(|t| t.elapsed()),
                };
                let mut vars = vars(client, ex, &shared);
                vars.log = Some(&facts);
                let mut value = Vec::new();
                for (name, t) in &route.fields.add {
                    value.clear();
                    t.render(&vars, &mut value);
                    value.retain(|&b| b != b'\r' && b != b'\n' && b != 0);
                    edge_http::write_header(out, name, &value);
                }
            }))
        }
    };
    ex.out_fields = OutFields {
        add,
        always: f.add_always,
        hide: f.hide.clone(),
        cache_status: f.cache_status,
    };
}
