//! `allow`/`deny` at request time: the route's compiled rules against the request's
//! client address (`$remote_addr`: after the PROXY protocol and `real_ip`).
//!
//! As nginx's access phase, the check runs once the location is chosen (after its
//! rewrites; a redirecting rewrite answers before it) and before its handler, `return`
//! included (nginx runs `return` in the rewrite phase, before access: a famous trap
//! that edgecache does not copy). No location: 404, whatever the server's rules.

use crate::access::rules::{truthy, AccessList, Action};
use crate::http::Exchange;
use crate::state::Shared;
use crate::vars::{Client, Var};

/// Whether the rules let this request's client in. Network rules are integer compares;
/// a `"$geo"` rule of the client address is a table lookup; any other variable is
/// rendered (into a small buffer) only when the rules before it did not decide.
pub fn allowed(rules: &AccessList<Var>, client: Client, ex: &Exchange, shared: &Shared) -> bool {
    let action = rules.check(client.peer.ip(), |v| {
        let ctx = super::context::vars(client, ex, shared);
        match v {
            Var::Geo(i) => shared
                .sites
                .maps
                .geo_value(*i as usize, &ctx)
                .is_some_and(|s| truthy(s.as_bytes())),
            other => {
                let mut value = Vec::with_capacity(32);
                other.write(&ctx, &mut value);
                truthy(&value)
            }
        }
    });
    action == Action::Allow
}

/// One line per denial, at `info`: a denial is the client's doing, expected and
/// counted (`edgecache_access_denied_total`); at `warn` or `error` (nginx logs it at
/// `error`) a denied client could fill the error log at will. `error_log.level =
/// "info"` shows them.
pub fn log_denied(client: Client, ex: &Exchange, shared: &Shared) {
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    let server = shared
        .sites
        .servers
        .get(ex.routed.server as usize)
        .map_or("", |s| s.name.as_str());
    tracing::info!(
        "access forbidden by rule, client: {}, server: {}, request: \"{} {}\"",
        client.peer.ip(),
        server,
        ex.req.method.as_str(),
        // The target as it came (a rewrite may have changed it since).
        ex.routed
            .original_uri
            .as_deref()
            .unwrap_or(&ex.req.target)
            .escape_debug()
    );
}
