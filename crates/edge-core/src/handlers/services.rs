//! What a handler may use of its worker.

use crate::aio::FileBackend;
use crate::metrics::{Metrics, WorkerStats};
use crate::upstream::UpstreamPool;
use std::sync::Arc;

/// What a worker lends its handlers: its counters, its upstream keep-alive pool and its
/// file I/O backend. Owned by one worker thread, so nothing here needs a lock.
pub struct Services {
    pub id: usize,
    pub metrics: Arc<Metrics>,
    pub pool: UpstreamPool,
    /// The file I/O backend (`aio.mode`), chosen once.
    pub file_io: FileBackend,
}

impl Services {
    pub fn stats(&self) -> &WorkerStats {
        &self.metrics.workers[self.id]
    }

    /// The upstream client's view of this worker.
    pub fn upstream(&self) -> crate::upstream::Local<'_> {
        crate::upstream::Local {
            pool: &self.pool,
            stats: self.stats(),
        }
    }
}
