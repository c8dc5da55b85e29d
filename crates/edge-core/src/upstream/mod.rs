//! Upstreams: server groups with round robin and failure skipping (shared by all
//! workers), a keep-alive connection pool per worker (never shared: connections never
//! move between workers), the client that fetches from them ([`client`]) and the relay
//! of a response to the client ([`relay`]).

pub mod client;
mod group;
pub mod headers;
pub mod health;
mod maglev;
mod pool;
pub mod relay;

pub use client::{fetch_with, HeadOptions, Local, UpstreamError, UpstreamResponse};
pub use group::{HealthCheck, UpstreamGroup, UpstreamServer};
pub use pool::{PooledConn, UpstreamIo, UpstreamPool};
