//! edge-core: the edgecache server. `edgecache`'s main.rs parses the command line and
//! calls [`server::run`]; everything else lives here, a folder per layer:
//!
//! - [`config`]: the TOML file, validated before any socket opens.
//! - [`net`]: listening sockets and accept strategies.
//! - [`server`]: workers (thread per core, current_thread runtime), the HTTP/1.1 session,
//!   routing, lifecycle and signals.
//! - [`handlers`]: proxy (with the cache), static, return, empty_gif.
//! - [`aio`]: the file I/O seam every file read goes through.
//! - [`compress`]: response compression (plans, filters, the offload pool).
//! - [`upstream`]: server groups and per-worker keep-alive pools.
//! - [`tls`]: rustls configs (listeners and https upstreams) and their counters.
//! - [`quic`]: QUIC for HTTP/3: worker-naming connection IDs, each worker's UDP socket
//!   with the hand-off between workers, the shared keys and counters.
//! - [`vars`]: variables and templates (`$host`, `$arg_x`, captures, `[[map]]`), compiled
//!   once; [`state::sites`] holds the servers, locations and rewrites.
//! - [`secure_link`]: signed URLs (the per-request check and `edgecache sign`).
//! - [`limit`]: request and connection limits held for the whole node (`limit_req`,
//!   `limit_conn`), lock-free.
//! - [`log`], [`metrics`], [`admin`]: observability; [`purge`]: purge requests (the
//!   admin form and the `PURGE` answer).
//! - [`access`]: address prefixes, `allow`/`deny` lists and `[[geo]]` tables.
//! - [`prom`]: the Prometheus text writer every counter group writes `/metrics` with.
pub mod access;
pub mod admin;
pub mod affinity;
pub mod aio;
pub mod compress;
pub mod config;
pub mod handlers;
pub mod http;
pub mod limit;
pub mod log;
pub mod metrics;
pub mod net;
pub mod prom;
pub mod purge;
pub mod quic;
pub mod rt;
pub mod secure_link;
pub mod server;
pub mod state;
pub mod tls;
pub mod upstream;
pub mod vars;

#[cfg(test)]
pub(crate) mod testutil;
