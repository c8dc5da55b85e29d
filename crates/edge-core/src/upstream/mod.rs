//! Upstreams: server groups with round robin and failure skipping (shared by all
//! workers), and a keep-alive connection pool per worker (never shared: connections
//! never move between workers).

mod group;
mod pool;

pub use group::{UpstreamGroup, UpstreamServer};
pub use pool::{PooledConn, UpstreamPool};
