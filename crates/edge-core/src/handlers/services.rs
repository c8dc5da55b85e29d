//! What a handler may use of its worker.

use crate::aio::FileBackend;
use crate::metrics::{Metrics, WorkerStats};
use crate::state::LocalSettings;
use crate::upstream::UpstreamPool;
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What a worker lends its handlers: its counters, its upstream keep-alive pool and its
/// file I/O backend. Owned by one worker thread, so nothing here needs a lock.
pub struct Services {
    pub id: usize,
    pub metrics: Arc<Metrics>,
    pub pool: UpstreamPool,
    /// The file I/O backend (`aio.mode`), chosen once.
    pub file_io: FileBackend,
    /// This worker's RAM tier and open-file cache. Borrowed only between awaits.
    pub local: RefCell<edge_cache::local::Local>,
    /// The settings `local` was built from (rebuilt by [`Services::tick`] on a reload
    /// that changes them).
    pub local_settings: Cell<LocalSettings>,
    /// A response-head buffer reused from one response to the next (see
    /// [`Services::take_buf`]).
    pub scratch: RefCell<Vec<u8>>,
    /// Response compression: this worker's handle on the compression pool.
    pub compress: crate::compress::Compressor,
    /// Mappings of large object bodies, kept beside the open-file cache (see
    /// [`crate::http::mapped`]). Borrowed only between awaits.
    pub maps: RefCell<crate::http::mapped::MapCache>,
    /// `aio.sendfile_max = "auto"`: how this worker sends bodies over it, by measure.
    pub large_send: crate::http::large_send::Chooser,
}

/// Largest scratch buffer kept between responses.
const SCRATCH_KEEP: usize = 64 * 1024;

impl Services {
    pub fn stats(&self) -> &WorkerStats {
        &self.metrics.workers[self.id]
    }

    /// An empty buffer with room for `cap` bytes: the worker's scratch buffer if no
    /// response holds it now, a new one otherwise.
    pub fn take_buf(&self, cap: usize) -> Vec<u8> {
        let mut b = std::mem::take(&mut *self.scratch.borrow_mut());
        b.clear();
        b.reserve(cap);
        b
    }

    /// Returns a buffer from [`Services::take_buf`] for the next response.
    pub fn give_buf(&self, b: Vec<u8>) {
        if b.capacity() <= SCRATCH_KEEP {
            let mut s = self.scratch.borrow_mut();
            if s.capacity() < b.capacity() {
                *s = b;
            }
        }
    }

    /// How many body mappings this worker keeps and for how long: the open-file
    /// cache's `max` and `inactive` (a mapping lives like the descriptor beside it).
    pub fn map_limits(&self) -> crate::http::mapped::MapLimits {
        let files = self.local_settings.get().files;
        crate::http::mapped::MapLimits {
            max: files.max,
            inactive_ticks: files.inactive_ticks,
        }
    }

    /// Copy the RAM tier's and open-file cache's counters to `/metrics`.
    pub fn publish_local(&self) {
        self.stats().local.publish(&self.local.borrow());
    }

    /// Once a second: apply new settings, close idle cached descriptors, and report
    /// the accesses the front answered to each zone's index.
    pub fn tick(&self, shared: &crate::state::Shared) {
        let settings = shared.local;
        if self.local_settings.get() != settings {
            self.local_settings.set(settings);
            *self.local.borrow_mut() = settings.build(self.metrics.workers.len());
        }
        self.local.borrow_mut().files.sweep();
        self.maps.borrow_mut().sweep(self.map_limits());
        for c in shared.caches.values() {
            c.flush_touches(&self.local);
        }
        self.publish_local();
        if shared.send.adaptive {
            self.tick_large_send();
        }
    }

    /// Closes [`Services::large_send`]'s window; publishes and logs a new choice.
    fn tick_large_send(&self) {
        use crate::rt::thread_cpu_ns;
        let Some(d) = self
            .large_send
            .tick(std::time::Instant::now(), thread_cpu_ns())
        else {
            let st = self.stats();
            if self.large_send.exploring() {
                st.large_send_choice.store(0, Relaxed);
            }
            return;
        };
        let st = self.stats();
        st.large_send_choice.store(d.method.code(), Relaxed);
        st.large_send_mapped_ns_per_mib
            .store(d.mapped_ns_per_mib as u64, Relaxed);
        st.large_send_sendfile_ns_per_mib
            .store(d.sendfile_ns_per_mib as u64, Relaxed);
        tracing::info!(
            worker = self.id,
            "large cache hits (over aio.sendfile_max) go by {} here: {:.0} us of this worker's CPU per MiB written from a mapping, {:.0} by sendfile (medians of {} one-second windows each); measured again in {} s",
            d.method.name(),
            d.mapped_ns_per_mib / 1e3,
            d.sendfile_ns_per_mib / 1e3,
            crate::http::large_send::SAMPLES,
            crate::http::large_send::EXPLOIT.as_secs()
        );
    }

    /// What a relay needs to compress for a location with this policy.
    pub fn compression<'a>(
        &'a self,
        policy: Option<&'a crate::compress::Policy>,
    ) -> Option<(&'a crate::compress::Policy, &'a crate::compress::Compressor)> {
        policy.map(|p| (p, &self.compress))
    }

    /// The upstream client's view of this worker.
    pub fn upstream(&self) -> crate::upstream::Local<'_> {
        crate::upstream::Local {
            pool: &self.pool,
            stats: self.stats(),
        }
    }
}
