//! What the server hands the admin listener when it starts it: the counters, the
//! current config generation, and the process-wide settings `/status` reports.

use crate::metrics::Metrics;
use std::sync::Arc;

pub struct AdminCtx {
    pub metrics: Arc<Metrics>,
    pub shared: Arc<crate::state::Current>,
    pub accept: &'static str,
    /// `multi_accept` and `reuseport_steering`, for `/status`.
    pub multi_accept: bool,
    pub steering: &'static str,
    /// The CPU each worker is pinned to (None: not pinned).
    pub cpus: Vec<Option<usize>>,
    /// For the I/O pool's queue depth.
    pub aio: crate::aio::AioSetup,
    /// For the compression pool's queue depth.
    pub compress: crate::compress::PoolSetup,
    /// The effective `worker_connections` (configured, or sized to the descriptor limit).
    pub worker_connections: usize,
}
