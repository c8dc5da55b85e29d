//! The proxy handler: a location with `proxy = "..."` and no cache passes each
//! request to its upstream group and relays the answer ([`crate::upstream::relay`]).

use super::services::Services;
use crate::http::{Conn, Exchange, ExchangeError};
use crate::state::route::{ProxyRoute, Route};
use crate::state::Shared;

pub async fn handle(
    w: &Services,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
    route: &Route,
    p: &ProxyRoute,
) -> Result<(), ExchangeError> {
    let affinity = {
        let vars = super::context::vars(super::context::client_of(conn, ex, shared), ex, shared);
        super::cache::key::affinity(
            &p.upstream,
            super::cache::key::KeySpec::of(route),
            &vars,
            None,
        )
    };
    super::context::upstream_fields(conn, ex, shared, route);
    crate::upstream::relay::proxy_pass(
        w.upstream(),
        conn,
        ex,
        &shared.timeouts,
        &p.upstream,
        w.compression(p.compress.as_ref()),
        affinity,
    )
    .await
}
