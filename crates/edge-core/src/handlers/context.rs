//! What handlers render templates with: the connection's facts and the exchange's
//! routing results as a [`crate::vars::Ctx`].

use crate::http::{Conn, Exchange};
use crate::state::Shared;
use crate::vars::{Client, Ctx};

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
